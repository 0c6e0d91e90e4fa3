"""Words for an explanation (analysis/explain_run.py): plain text lines that fit 80 columns (for `explain` and
`compare`), and a Markdown section (for `check --markdown`). Presentation only: every number comes from the
result."""

from __future__ import annotations

import textwrap
from typing import Iterable

from receipts.analysis.explain import LEVELS, ComponentDelta
from receipts.analysis.explain_shapes import ShapeChange
from receipts.analysis.explain_run import ExplainResult

WIDTH = 80
_NAME = 30     # characters of a component's name in the text table
_SHOWN_UNDECIDED = 3  # inconclusive components named per level (the largest)
_SHOWN_SHAPES = 3  # launch shapes whose calls changed named per kernel (the largest changes)
_TITLES = {"category": "category (ms per step; * = a part of the step: GPU span parts, host gap)", "kernel": "kernel",
           "gap": "gap (idle_long by place: the GPU idle 0.5 ms or more after call N of a kernel)",
           "nvtx": "nvtx (CPU-side range time, whole capture)", "rank": "rank (exposed communication)"}


def _wrap(text: str, indent: str = "  ") -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_long_words=True, break_on_hyphens=False) or [indent]


def _cut(name: str, width: int) -> str:
    return name if len(name) <= width else name[:width - 3] + "..."


def _signed(ms: float) -> str:
    return f"{ms:+.2f}"


def _share(c: ComponentDelta) -> str:
    return "" if c.share is None else f"{100 * c.share:.0f}%"


def _label(c: ComponentDelta) -> str:
    return c.presence or c.verdict


def _row(c: ComponentDelta) -> list[str]:
    """A component's line; a name too long for its column gets a line of its own above the numbers."""
    mark = "* " if c.partition else "  "
    long = len(c.short_name) > _NAME
    numbers = (f"{c.baseline_ms_per_step:8.2f} {c.candidate_ms_per_step:9.2f} {_signed(c.delta_ms_per_step):>8} "
               f"{_share(c):>5} {_label(c)}")
    out = [_cut(f"  {mark}{c.short_name}", WIDTH)] if long else []
    out.append(_cut(f"  {mark}{'' if long else c.short_name:<{_NAME}} {numbers}", WIDTH))
    if c.level == "gap" and c.baseline_calls_per_step is not None and c.candidate_calls_per_step is not None:
        detail = f"a gap there in {_pct(c.baseline_calls_per_step)} -> {_pct(c.candidate_calls_per_step)} of steps"
        out += _wrap(detail + (" in every run (a fact)" if c.evidence == "structural" else ""), "      ")
    elif c.calls_delta_per_step is not None:
        detail = f"{c.baseline_calls_per_step:g} -> {c.candidate_calls_per_step:g} calls/step"
        if c.evidence == "structural":
            detail += " in every run (a fact)"
        changed = [g for g in c.shapes if g.ms_per_call is not None]
        if changed and c.more_calls_ms_per_step is not None:
            detail += f": {_shape_calls(changed)}: more calls {_signed(c.more_calls_ms_per_step)} ms"
            if c.slower_calls_ms_per_step is not None:
                detail += f", slower calls {_signed(c.slower_calls_ms_per_step)} ms"
        elif c.ms_per_added_call is not None and c.more_calls_ms_per_step is not None:
            detail += (f": more calls {_signed(c.more_calls_ms_per_step)} ms, {c.ms_per_added_call:.3f} ms per "
                       f"added call")
        elif c.slower_calls_ms_per_step is not None and c.verdict != "no change":
            detail += f": the same calls, {_signed(c.slower_calls_ms_per_step)} ms"
        out += _wrap(detail, "      ")
    return out


def _pct(share: float) -> str:
    return f"{100 * share:.0f}%"


def _shape_calls(changed: list[ShapeChange]) -> str:
    """The calls added (removed) by launch shape, at their price: '+16 calls of grid (2,66,1) block (384,1,1) at
    0.175 ms each (its other 13 taken as unchanged)'."""
    words = []
    for g in changed[:_SHOWN_SHAPES]:
        shape = g.shape or "no recorded shape"
        n = g.calls_delta_per_step
        kept = min(g.baseline_calls_per_step, g.candidate_calls_per_step)  # the group's calls taken as unchanged
        why = ("a new shape" if g.new else "no longer launched" if g.candidate_calls_per_step == 0.0
               else f"its other {kept:g} taken as unchanged")
        calls = "call" if abs(n) == 1 else "calls"
        words.append(f"{n:+g} {calls} of {shape} at {g.ms_per_call:.3f} ms each ({why})")
    more = len(changed) - _SHOWN_SHAPES
    return "; ".join(words) + (f"; and {more} more shape{'s' if more != 1 else ''}" if more > 0 else "")


def dashboard_link(r: ExplainResult) -> str | None:
    """The dashboard's compare view of this explanation (`receipts dashboard`, then this query), or None."""
    e = r.explanation
    if e is None or not e.baseline_runs:
        return None
    query = f"?view=compare&a={e.baseline_runs[-1]}&b={r.receipt_id}"
    return query + (f"&against={r.against}" if r.mode == "lane" else "")


def rules_note(r: ExplainResult) -> str:
    """The runs were categorised under different kernel-category rules: how they were compared, and how to keep
    what re-categorises them exactly."""
    assert r.rules is not None
    return r.rules.note(r.names) + (" (ingest --keep-raw keeps the raw events that re-categorise them)"
                                    if r.rules.left_out else "")


def text_lines(r: ExplainResult, *, show_all: bool = False) -> list[str]:
    """The explanation as lines of at most 80 characters (a refusal: its one line)."""
    e = r.explanation
    if e is None:
        return [f"REFUSED: {r.refusal}"]
    s = e.step
    base = ", ".join(r.names.get(i, i) for i in e.baseline_runs)
    lines = [_cut(f"{r.run_name} vs {r.against}: step time {s.verdict}", WIDTH)]
    if s.delta_ms is not None and s.baseline_ms:
        lines.append(f"  {s.baseline_ms:.2f} -> {s.candidate_ms:.2f} ms per step "
                     f"({_signed(s.delta_ms)} ms, {100 * s.delta_ms / s.baseline_ms:+.1f}%)")
    lines += _wrap(s.why)
    if e.period_note:
        lines += _wrap(f"period: {e.period_note}")
    lines += _wrap(f"profiled baseline runs: {base}"
                   + (f" (without a profile, left out: {', '.join(r.unprofiled)})" if r.unprofiled else ""))
    lines += _wrap(f"noise: {e.noise_note}; Benjamini-Hochberg at {e.fdr:g} over all {e.family} components of "
                   f"every level; a component is named from {e.min_effect_ms:.2f} ms per step, a changed call "
                   f"count at any size")
    if r.clock is not None:
        lines += _wrap(f"GPU clocks: {r.clock.note}")
    if len(r.formats) > 1:
        lines += _wrap(f"profiles of different formats ({', '.join(r.formats)}): kernels are matched in one spelling, "
                       "but the CPU-side ranges are not the same ranges (nsys: NVTX; the PyTorch profiler: its "
                       "own annotations)")
    if r.rules is not None:
        lines += _wrap(f"rules: {rules_note(r)}")
    header = f"    {'component':<{_NAME}} {'baseline':>8} {'candidate':>9} {'delta':>8} {'share':>5} verdict"
    for level in (lv for lv in LEVELS if lv in e.levels):
        mine = [c for c in e.components if c.level == level]
        if not mine:
            continue
        lines += ["", _TITLES[level], header]
        shown = mine if show_all else [c for c in mine if c.verdict == "changed"]
        for c in shown:
            lines += _row(c)
        if not show_all:
            lines += _summary(mine, level, r)
    lines.append("")
    if e.residual_ms is not None:
        lines += _wrap(f"residual: {_signed(e.residual_ms)} ms per step of the {_signed(s.delta_ms or 0.0)} ms "
                       f"change is not explained by the changed parts of the step "
                       f"({_signed(e.explained_ms)} ms)", "")
    link = dashboard_link(r)
    if link:
        lines += _wrap(f"dashboard (receipts dashboard): {link}", "")
    return lines


def _summary(mine: list[ComponentDelta], level: str, r: ExplainResult) -> list[str]:
    changed = [c for c in mine if c.verdict == "changed"]
    undecided = [c for c in mine if c.verdict == "inconclusive"]
    quiet = len(mine) - len(changed) - len(undecided)
    out = [] if changed else ["    nothing beyond its own noise"]
    if undecided:
        largest = "; ".join(f"{_cut(c.short_name, 28)} {_signed(c.delta_ms_per_step)}"
                            + (f" (~{c.runs_needed} more runs)" if c.runs_needed else "") for c in undecided[:_SHOWN_UNDECIDED])
        out += _wrap(f"{len(undecided)} inconclusive, largest: {largest}", "    ")
    if quiet:
        out.append(f"    {quiet} with no change")
    if level == "rank" and r.stragglers:
        out += _wrap(f"the candidate's straggler analysis names rank(s) {', '.join(map(str, r.stragglers))} "
                     f"(receipts stragglers {r.run_name})", "    ")
    return out


# ---------------------------------------------------------------------------------------- markdown
def _md(text: object) -> str:
    return (str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")
            .replace("`", "'").replace("\r", " ").replace("\n", " "))


def markdown_lines(r: ExplainResult, *, top: int = 8) -> list[str]:
    """A short section for a pull-request comment: the changed components, largest first (at most `top`), and
    the residual. Nothing for a refusal (a log-only run says nothing here)."""
    e = r.explanation
    if e is None:
        return []
    changed = list(e.changed)
    lines = [f"<details><summary>why {_md(r.run_name)}: {len(changed)} component(s) beyond their own run-to-run "
             f"noise</summary>", ""]
    if r.rules is not None:
        lines += [f"_Kernel-category rules: {_md(rules_note(r))}._", ""]
    if changed:
        lines += ["| level | component | baseline ms | candidate ms | delta ms | share | |", "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
        for c in changed[:top]:
            calls = (f" (a gap there in {_pct(c.baseline_calls_per_step or 0.0)} -> "
                     f"{_pct(c.candidate_calls_per_step or 0.0)} of steps"
                     + (", in every run" if c.evidence == "structural" else "") + ")" if c.level == "gap" else
                     f" ({c.calls_delta_per_step:+g} calls/step"
                     + (", in every run" if c.evidence == "structural" else "") + ")" if c.calls_delta_per_step else "")
            lines.append(f"| {c.level} | {_md(_cut(c.short_name, 80))}{_md(calls)} | {c.baseline_ms_per_step:.2f} | "
                         f"{c.candidate_ms_per_step:.2f} | {c.delta_ms_per_step:+.2f} | {_md(_share(c)) or '-'} | "
                         f"{_md(_label(c))} |")
        if len(changed) > top:
            lines.append(f"\n_{len(changed) - top} more: `receipts explain {_md(r.run_name)} --against {_md(r.against)}`_")
    else:
        lines.append("No component moved beyond its own noise.")
    if e.period_note:
        lines += ["", f"Period: {_md(e.period_note)}."]
    if e.residual_ms is not None:
        lines += ["", f"Residual (not explained by the changed parts of the step): {e.residual_ms:+.2f} ms per step."]
    link = dashboard_link(r)
    if link:
        lines += ["", f"Dashboard (`receipts dashboard`): `{link}`"]
    lines += ["", f"<sub>{_md(e.noise_note)}; Benjamini-Hochberg at {e.fdr:g} over all {e.family} components.</sub>",
              "", "</details>", ""]
    return lines


def markdown(r: ExplainResult) -> str:
    """markdown_lines as one string (what `check --markdown` appends per candidate)."""
    return "\n".join(markdown_lines(r))


def echo(lines: Iterable[str]) -> None:
    """Plain lines on stdout, no markup (names carry brackets and angle brackets)."""
    import sys

    for line in lines:
        sys.stdout.write(line + "\n")
