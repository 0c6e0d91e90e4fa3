"""`receipts check RUN... --against tag:main`: is any run slower than its lane's recent baseline?

The analysis is analysis/check.py; this module formats its result: text, `--json`, a pull-request
comment (`--markdown`, also appended to $GITHUB_STEP_SUMMARY), JUnit XML and GitHub annotations.
Exit 0 when no lane's pooled candidates are slower, 1 when one is (with --each: when any candidate alone
is), 3 when a candidate has no comparable baseline (or no lane, or no steady state), 2 on errors.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.markup import escape

from receipts.analysis.check import DEFAULT_LAST, CandidateCheck, CheckResult, PooledCheck, run_check
from receipts.analysis.commits import to_json as commits_json
from receipts.analysis.noise import floor_json
from receipts.analysis.explain_run import ExplainResult, for_check
from receipts.analysis.verdict import VerdictResult
from receipts.cli.context import console, handle_errors, print_json, settings
from receipts.cli.explain_render import markdown as explain_markdown
from receipts.cli.output import Column, chosen_format, emit, format_option
from receipts.cli.render import UNBOUNDED_SPAN, ratio_interval
from receipts.cli.gate_cmd import escape_data, escape_prop
from receipts.cli.words import with_remedy

# The first line of every comment body: the workflow finds and updates its one comment by it.
MARKER = "<!-- receipts-check -->"
MAX_COMMENT_CHARS = 60_000  # GitHub refuses comment bodies over 65,536 characters


def register(app: typer.Typer) -> None:
    app.command("check")(check)


@handle_errors
def check(
    ctx: typer.Context,
    runs: List[str] = typer.Argument(..., help="Candidate receipts (id, id prefix, run name) or tag:T for every "
                                               "current receipt carrying T."),
    against: str = typer.Option(..., "--against", help="Baseline: tag:NAME, the lane's most recent runs carrying "
                                                       "the tag."),
    last: int = typer.Option(DEFAULT_LAST, "--last", min=1, help="Baseline runs per candidate (the most recent)."),
    each: bool = typer.Option(False, "--each", help="Judge the runs one by one for the exit code (default: a lane's "
                                                    "runs pooled, as one group against the baseline)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output (--format json)."),
    fmt: Optional[str] = format_option(piped="table"),
    markdown: Optional[Path] = typer.Option(None, "--markdown", help="Write a pull-request comment body here (also "
                                                                     "appended to $GITHUB_STEP_SUMMARY when set)."),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Write JUnit XML here: one testcase per candidate."),
    github: bool = typer.Option(False, "--github", help="Also print GitHub Actions annotations."),
) -> None:
    """Check runs against their lane's recent baseline (e.g. tag:main). Exit 1 when a lane's runs, pooled,
    are slower beyond the noise (--each: when any run alone is), 3 when a run has no comparable baseline.

    Example: receipts check tag:pr-123 --against tag:main --last 10 --markdown comment.md --junit check.xml

    A PR's repeated runs are judged as one group (the median of their run medians, each run one sample)
    against the baseline; each run's own verdict is shown beside it. TSV/CSV/JSON Lines: one row per run and
    one per pooled lane (run `pooled`).
    """
    fmt = chosen_format(fmt, as_json=as_json, piped="table")
    with settings(ctx).store(read_only=True) as store:
        result = worded(run_check(store, runs, against=against, last=last, each=each))
        why = explanations(store, result) if markdown is not None or os.environ.get("GITHUB_STEP_SUMMARY") else {}
    body = to_markdown(result, why)
    if markdown is not None:
        markdown.write_text(body, encoding="utf-8")
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as summary:
            summary.write(body + "\n")
    if junit is not None:
        junit.write_text(to_junit(result), encoding="utf-8")
    if fmt == "json":
        print_json(to_json(result))
    elif fmt == "table":
        _render(result)
    else:
        emit(summary_rows(result), SUMMARY_COLUMNS, fmt)
    if github:
        for line in to_github(result):
            print(line)
    raise typer.Exit(result.exit_code)


# ---------------------------------------------------------------------------------------- words
def ratio_text(c: CandidateCheck) -> str:
    """`1.0259x [1.0048, 1.0474] (95%)`, or the ratio with "too few runs to bound this" (cli/render.ratio_interval)."""
    v = c.verdict
    return f"{ratio_interval(v.ratio, v.ci_low, v.ci_high, unit='x')} ({v.confidence:.0%})" if v else "-"



def worded(result: CheckResult) -> CheckResult:
    """Each candidate's message with its remedy said as this command line's options and commands."""
    return replace(result, candidates=tuple(replace(c, message=with_remedy(c.message, c.remedy))
                                            for c in result.candidates))

def baseline_text(c: CandidateCheck) -> str:
    b = c.baseline
    if b is None:
        return "-"
    used = ", ".join(r.run_name for r in b.used) or "none usable"
    centre = f", median {b.median_step_ms:.3f} ms" if b.median_step_ms is not None else ""
    return f"{len(b.used)} run(s) tagged {b.tag!r}: {used}{centre}"


def drift_text(c: CandidateCheck) -> str:
    if c.outcome != "judged":
        return "-"
    if not c.drift:
        return "none"
    parts = []
    for kind, diffs in c.drift.items():
        shown = ", ".join(f"{d.field} {d.a!r} -> {d.b!r}" for d in diffs[:3])
        parts.append(f"{kind}: {shown}" + (f" and {len(diffs) - 3} more" if len(diffs) > 3 else ""))
    return "; ".join(parts)


def change_pct(v: VerdictResult) -> str:
    return f"{100 * (v.ratio - 1):+.2f}%"


def interval_pct(v: VerdictResult) -> str:
    """`[+0.48%, +4.74%]`, or words where the interval bounds nothing (cli/render.UNBOUNDED_SPAN): a headline
    never prints "[-74.59%, +305.13%]" as if it measured."""
    if v.ci_low <= 0 or v.ci_high / v.ci_low > UNBOUNDED_SPAN:
        return "(too few runs to bound this)"
    return f"[{100 * (v.ci_low - 1):+.2f}%, {100 * (v.ci_high - 1):+.2f}%]"


def pooled_text(p: PooledCheck) -> str:
    return (f"{len(p.run_ids)} run(s) pooled ({', '.join(p.run_names)}): {p.verdict_name}, "
            f"{change_pct(p.verdict)} {interval_pct(p.verdict)}")


def headline(result: CheckResult) -> str:
    """One line: the verdict that decides, and for an unsettled one which way it is unsettled (within the noise,
    or beyond it but under the minimum effect: `VerdictResult.reading`)."""
    n = len(result.candidates)
    unjudged = sum(c.outcome != "judged" for c in result.candidates)
    if result.each or not result.pooled:
        slower = sum(c.verdict_name == "slower" for c in result.candidates)
        if slower:
            return f"{slower} of {n} run(s) slower than {result.against} beyond the noise"
        if unjudged:
            return f"{unjudged} of {n} run(s) without a comparable baseline in {result.against}"
        return f"no run slower than {result.against} ({n} checked: {_tally(result.candidates)})"
    verdict = result.pooled_verdict or "inconclusive"
    deciding = [p for p in result.pooled if p.verdict_name == verdict]
    readings = "; ".join(dict.fromkeys(p.verdict.reading for p in deciding))
    said = {"slower": f"slower than {result.against} beyond the noise",
            "faster": f"faster than {result.against} beyond the noise",
            "no change": f"no change against {result.against}",
            "inconclusive": f"inconclusive against {result.against}: {readings}"}[verdict]
    pooled = result.pooled[0]
    detail = (f"{len(pooled.run_ids)} run(s) pooled, {change_pct(pooled.verdict)} {interval_pct(pooled.verdict)}"
              if len(result.pooled) == 1 else f"{len(result.pooled)} lanes, each pooled")
    tail = f"; {unjudged} of {n} run(s) without a comparable baseline" if unjudged else ""
    return f"{said} ({detail}){tail}"


def _tally(candidates: tuple[CandidateCheck, ...]) -> str:
    """'2 no change, 1 inconclusive (beyond the noise, under the 1% minimum effect)': the judged runs by verdict,
    an inconclusive one by its reading."""
    counts: dict[str, int] = {}
    for c in candidates:
        if c.verdict is not None:
            v = c.verdict
            key = f"inconclusive ({v.reading})" if v.verdict == "inconclusive" else v.verdict
            counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{k_n} {k}" for k, k_n in counts.items())


def _state(c: CandidateCheck) -> str:
    return (c.verdict_name or "judged") if c.outcome == "judged" else c.outcome.replace("_", " ")


# ---------------------------------------------------------------------------------------- text
_STYLE = {"slower": "bold red", "faster": "bold green", "no change": "bold", "inconclusive": "bold yellow"}


def _render(result: CheckResult) -> None:
    for c in result.candidates:
        state = _state(c)
        console.prose(f"[{_STYLE.get(state, 'bold red')}]{escape(state.upper())}[/] "
                      + escape(f"{c.run_name} ({c.receipt_id[:12]}), lane {c.lane or '-'}"))
        if c.verdict:
            console.prose("  " + escape(f"step time {c.median_step_ms:.3f} ms vs baseline: {ratio_text(c)}"))
        console.prose("  " + escape(c.message))
        if c.baseline and c.baseline.runs:  # no tagged run at all: the message says so (and any did-you-mean)
            console.prose("  baseline: " + escape(baseline_text(c)))
            for r in c.baseline.excluded:
                console.prose("    excluded " + escape(f"{r.run_name}: {r.excluded}"))
            console.prose("  noise floor: " + escape(c.baseline.floor.note))
        if c.outcome == "judged":
            console.prose("  drift vs the newest baseline run: " + escape(drift_text(c)))
        if c.ended_early:
            console.prose("  [yellow]ended early:[/] " + escape(c.ended_early))
    for p in result.pooled:
        state = p.verdict_name
        console.prose(f"[{_STYLE.get(state, 'bold red')}]POOLED {escape(state.upper())}[/] "
                      + escape(f"{len(p.run_ids)} run(s) of lane {p.lane} as one group: median "
                               f"{p.median_step_ms:.3f} ms vs baseline {p.baseline.median_step_ms:.3f} ms, "
                               f"{p.verdict.ratio:.4f}x [{p.verdict.ci_low:.4f}, {p.verdict.ci_high:.4f}]"))
        console.prose("  " + escape(p.verdict.why))
    if not result.each and result.pooled:
        console.prose("(the exit code follows the pooled verdict; --each judges the runs one by one)")
    console.prose(escape(headline(result)))


SUMMARY_COLUMNS = [Column(k, kind="id" if k == "id" else "text") for k in (
    "run", "id", "lane", "outcome", "verdict", "median_step_ms", "baseline_median_step_ms", "ratio", "ci_low",
    "ci_high", "change_pct", "noise_floor_pct", "runs")]


def summary_rows(result: CheckResult) -> list[dict[str, Any]]:
    """One row per candidate and one per pooled lane (run `pooled`, its runs' ids in `runs`)."""
    def row(run: str, rid: str | None, lane: Any, outcome: str, v: VerdictResult | None, median: float | None,
            b: Any, runs: tuple[str, ...]) -> dict[str, Any]:
        return {"run": run, "id": rid, "lane": str(lane) if lane else None, "outcome": outcome,
                "verdict": v.verdict if v else None, "median_step_ms": median,
                "baseline_median_step_ms": b.median_step_ms if b else None, "ratio": v.ratio if v else None,
                "ci_low": v.ci_low if v else None, "ci_high": v.ci_high if v else None,
                "change_pct": 100 * (v.ratio - 1) if v else None,
                "noise_floor_pct": b.floor.floor_pct if b else None, "runs": runs}
    rows = [row(c.run_name, c.receipt_id, c.lane, c.outcome, c.verdict, c.median_step_ms, c.baseline, ())
            for c in result.candidates]
    rows += [row("pooled", None, p.lane, "judged", p.verdict, p.median_step_ms, p.baseline, p.run_ids)
             for p in result.pooled]
    return rows


# ---------------------------------------------------------------------------------------- json
def to_json(result: CheckResult) -> dict[str, Any]:
    """The stable `check --json` contract."""
    def one(c: CandidateCheck) -> dict[str, Any]:
        v, b = c.verdict, c.baseline
        return {
            "run": c.run_name, "id": c.receipt_id, "ref": c.ref, "lane": c.lane.as_dict() if c.lane else None,
            "outcome": c.outcome, "verdict": c.verdict_name, "reading": v.reading if v else None, "why": c.message,
            "runs_needed": v.runs_needed if v else None, "median_step_ms": c.median_step_ms,
            "ratio": {"value": v.ratio, "ci_low": v.ci_low, "ci_high": v.ci_high, "confidence": v.confidence}
            if v else None,
            "baseline": None if b is None else {
                "tag": b.tag, "runs": [r.id for r in b.used],
                "run_names": [r.run_name for r in b.used],
                "median_step_ms": b.median_step_ms, "noise_floor_pct": b.floor.floor_pct,
                "noise_floor": floor_json(b.floor),
                "excluded": [{"id": r.id, "run_name": r.run_name, "median_step_ms": r.median_step_ms,
                              "why": r.excluded} for r in b.excluded],
            },
            "drift": {k: [{"field": d.field, "a": d.a, "b": d.b} for d in v] for k, v in c.drift.items()},
            "ended_early": c.ended_early,
            "git_rev": c.git_rev,
            "commits": commits_json(c.commits) if c.verdict is not None and c.commits is not None else None,
        }
    def pooled(p: PooledCheck) -> dict[str, Any]:
        v = p.verdict
        return {"lane": p.lane.as_dict(), "verdict": v.verdict, "reading": v.reading, "runs": list(p.run_ids),
                "run_names": list(p.run_names),
                "median_step_ms": p.median_step_ms, "why": v.why, "runs_needed": v.runs_needed,
                "ratio": {"value": v.ratio, "ci_low": v.ci_low, "ci_high": v.ci_high, "confidence": v.confidence},
                "baseline": {"tag": p.baseline.tag, "runs": [r.id for r in p.baseline.used],
                             "median_step_ms": p.baseline.median_step_ms, "noise_floor_pct": p.baseline.floor.floor_pct}}
    return {"passed": result.passed, "exit_code": result.exit_code, "against": result.against, "last": result.last,
            "judged": "each" if result.each else "pooled", "headline": headline(result),
            "pooled": {"verdict": result.pooled_verdict, "runs": [rid for p in result.pooled for rid in p.run_ids],
                       "lanes": [pooled(p) for p in result.pooled]},
            "results": [one(c) for c in result.candidates]}


# ---------------------------------------------------------------------------------------- markdown
def _md(text: object) -> str:
    """Text for a Markdown table cell: no HTML, no cell breaks, no line breaks (run names are user data)."""
    return (str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")
            .replace("`", "'").replace("\r", " ").replace("\n", " "))


_ICON = {"slower": ":x:", "faster": ":rocket:", "no change": ":white_check_mark:", "inconclusive": ":grey_question:"}


def _row(name: str, state: str, v: VerdictResult | None, bold: bool = False) -> str:
    verdict = f"{_ICON.get(state, ':warning:')} " + (f"**{_md(state)}**" if bold else _md(state))
    if v is not None and v.verdict == "inconclusive":
        verdict += f" ({_md(v.reading)})"
    return (f"| {name} | {verdict} | {change_pct(v) if v else '-'} | {interval_pct(v) if v else '-'} |")


def explanations(store, result: CheckResult) -> dict[str, ExplainResult]:
    """`receipts explain` of each judged candidate against its baseline, by receipt id (only those that have one:
    a log-only run, or a lane without profiled runs, gets none)."""
    out = {}
    for c in result.candidates:
        if c.outcome == "judged":
            r = for_check(store, c, against=result.against)
            if r.explanation is not None:
                out[c.receipt_id] = r
    return out


def to_markdown(result: CheckResult, why: dict[str, ExplainResult] | None = None) -> str:
    """One pull-request comment a reviewer reads in ten seconds: the marker line first, the headline, then per
    lane its baseline and noise floor once and one table (the pooled verdict, then a line per run), and the
    per-run details folded in <details>; then, for each run in `why` (it has a profile), the components that
    explain it (explain_render.markdown)."""
    lines = [MARKER, f"### receipts check: {_md(headline(result))}", ""]
    pools = {p.lane: p for p in result.pooled}
    lanes = list(dict.fromkeys(c.lane for c in result.candidates))
    for lane in lanes:
        group = [c for c in result.candidates if c.lane == lane]
        first = next((c for c in group if c.baseline and c.baseline.runs), None)
        if lane is None:
            lines.append("**no lane** (incomplete identity: a rumor, never compared)")
        else:
            head = f"**lane** {_md(lane)}"
            if first and first.baseline:
                b = first.baseline
                centre = f", median {b.median_step_ms:.3f} ms" if b.median_step_ms is not None else ""
                head += (f" · **baseline** {len(b.used)} run(s) tagged `{_md(b.tag)}`{centre}"
                         f" · **noise floor** {b.floor.floor_pct:.2f}%")
            lines.append(head)
        lines += ["", "| run | verdict | change | interval |", "| --- | --- | --- | --- |"]
        pool = pools.get(lane) if lane is not None else None
        if pool is not None:
            label = f"**{len(pool.run_ids)} run(s) pooled**" + (" (decides)" if not result.each else "")
            lines.append(_row(label, pool.verdict_name, pool.verdict, bold=True))
        for c in group:
            lines.append(_row(_md(c.run_name), _state(c), c.verdict))
        lines.append("")
    lines += ["<details><summary>Per-run details</summary>", ""]
    for c in result.candidates:
        detail = f"- **{_md(c.run_name)}** (`{c.receipt_id}`): "
        if c.verdict:
            detail += f"{c.median_step_ms:.3f} ms, {_md(ratio_text(c))}; "
        detail += _md(c.message) + f"; drift: {_md(drift_text(c))}"
        if c.verdict is not None and c.commits is not None:
            detail += f"; {_md(c.commits.note)}"
        if c.ended_early:
            detail += f"; **ended early**: {_md(c.ended_early)}"
        lines.append(detail)
    for lane in lanes:
        first = next((c for c in result.candidates if c.lane == lane and c.baseline and c.baseline.runs), None)
        if first and first.baseline:
            b = first.baseline
            lines.append(f"- baseline of {_md(lane)}: {_md(baseline_text(first))}"
                         + (f"; excluded: {_md('; '.join(f'{r.run_name}: {r.excluded}' for r in b.excluded))}"
                            if b.excluded else ""))
            lines.append(f"- noise floor: {_md(b.floor.note)}")
    for p in result.pooled:
        lines.append(f"- pooled ({_md(p.lane)}): {_md(p.verdict.why)}")
    lines += ["", "</details>", ""]
    for c in result.candidates:  # where a run has a profile: the components that explain it (explain_render)
        if why and c.receipt_id in why:
            lines.append(explain_markdown(why[c.receipt_id]))
    judged = "each run alone decides" if result.each else "a lane's runs pooled decide"
    lines.append(f"<sub>receipts check {_md(' '.join(['--against', result.against, '--last', str(result.last)]))}: "
                 f"run medians with moving-block bootstrap intervals against the lane's run-to-run noise floor; "
                 f"{judged}.</sub>")
    body = "\n".join(lines) + "\n"
    if len(body) > MAX_COMMENT_CHARS:
        cut = body[:MAX_COMMENT_CHARS].rsplit("\n", 1)[0]
        body = cut + "\n\n_(cut to fit a GitHub comment: the job's step summary and `--json` have every run)_\n"
    return body


# ---------------------------------------------------------------------------------------- CI
def to_junit(result: CheckResult) -> str:
    """One testcase per candidate and, unless --each, one per pooled lane: the pool carries the failure, a run
    that is slower alone is reported in its system-out (the pool decided; --each makes each run decide)."""
    cases = result.candidates
    pools = () if result.each else result.pooled
    failures = (sum(c.verdict_name == "slower" for c in cases) if result.each
                else sum(p.verdict_name == "slower" for p in pools))
    errors = sum(c.outcome != "judged" for c in cases)
    total = len(cases) + len(pools)
    suites = ET.Element("testsuites", name="receipts check", tests=str(total), failures=str(failures),
                        errors=str(errors))
    suite = ET.SubElement(suites, "testsuite", name=f"receipts check --against {result.against}",
                          tests=str(total), failures=str(failures), errors=str(errors))
    for p in pools:
        case = ET.SubElement(suite, "testcase", classname=str(p.lane), name=f"{len(p.run_ids)} run(s) pooled")
        detail = f"{pooled_text(p)}: {p.verdict.why}"
        if p.verdict_name == "slower":
            ET.SubElement(case, "failure", message=p.verdict.why, type="slower").text = detail
        else:
            ET.SubElement(case, "system-out").text = detail
    for c in cases:
        case = ET.SubElement(suite, "testcase", classname=str(c.lane or "rumor"), name=c.run_name)
        detail = "\n".join([f"{_state(c)}: {c.message}", f"ratio {ratio_text(c)}", f"baseline {baseline_text(c)}",
                            f"drift {drift_text(c)}"])
        if c.verdict_name == "slower" and result.each:
            ET.SubElement(case, "failure", message=c.message, type="slower").text = detail
        elif c.outcome != "judged":
            ET.SubElement(case, "error", message=c.message, type=c.outcome).text = detail
        else:
            ET.SubElement(case, "system-out").text = detail
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


_LEVEL = {"slower": "error", "inconclusive": "warning", "faster": "notice", "no change": "notice"}


def to_github(result: CheckResult) -> list[str]:
    """Annotations: the pooled verdict of each lane first (unless --each), then one per run; a run slower alone
    under a pool that decided otherwise is a warning, not an error."""
    out = []
    if not result.each:
        for p in result.pooled:
            title = escape_prop(f"receipts check: {len(p.run_ids)} run(s) pooled {p.verdict_name}")
            out.append(f"::{_LEVEL[p.verdict_name]} title={title}::{escape_data(pooled_text(p) + ': ' + p.verdict.why)}")
    for c in result.candidates:
        state = _state(c)
        level = _LEVEL.get(state, "error")
        if state == "slower" and not result.each:
            level = "warning"
        title = escape_prop(f"receipts check: {c.run_name} {state}")
        out.append(f"::{level} title={title}::{escape_data(c.message + ' ' + ratio_text(c))}")
    return out
