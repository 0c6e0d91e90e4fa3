"""`receipts check RUN... --against tag:main`: is any run slower than its lane's recent baseline?

The analysis is analysis/check.py; this module formats its result: text, `--json`, a pull-request
comment (`--markdown`, also appended to $GITHUB_STEP_SUMMARY), JUnit XML and GitHub annotations.
Exit 0 when no candidate is slower, 1 when any is, 3 when a candidate has no comparable baseline
(or no lane, or no steady state), 2 on errors.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.markup import escape

from receipts.analysis.check import DEFAULT_LAST, CandidateCheck, CheckResult, run_check
from receipts.analysis.compare import floor_json
from receipts.cli.context import console, handle_errors, print_json, settings
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
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    markdown: Optional[Path] = typer.Option(None, "--markdown", help="Write a pull-request comment body here (also "
                                                                     "appended to $GITHUB_STEP_SUMMARY when set)."),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Write JUnit XML here: one testcase per candidate."),
    github: bool = typer.Option(False, "--github", help="Also print GitHub Actions annotations."),
) -> None:
    """Check runs against their lane's recent baseline (e.g. tag:main). Exit 1 when any run is slower
    beyond the noise, 3 when a run has no comparable baseline.

    Example: receipts check tag:pr-123 --against tag:main --last 10 --markdown comment.md --junit check.xml
    """
    with settings(ctx).store(read_only=True) as store:
        result = worded(run_check(store, runs, against=against, last=last))
    body = to_markdown(result)
    if markdown is not None:
        markdown.write_text(body, encoding="utf-8")
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as summary:
            summary.write(body + "\n")
    if junit is not None:
        junit.write_text(to_junit(result), encoding="utf-8")
    if as_json:
        print_json(to_json(result))
    else:
        _render(result)
    if github:
        for line in to_github(result):
            print(line)
    raise typer.Exit(result.exit_code)


# ---------------------------------------------------------------------------------------- words
def ratio_text(c: CandidateCheck) -> str:
    v = c.verdict
    return f"{v.ratio:.4f}x [{v.ci_low:.4f}, {v.ci_high:.4f}] ({v.confidence:.0%})" if v else "-"



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


def headline(result: CheckResult) -> str:
    n = len(result.candidates)
    slower = sum(c.verdict_name == "slower" for c in result.candidates)
    unjudged = sum(c.outcome != "judged" for c in result.candidates)
    if slower:
        return f"{slower} of {n} run(s) slower than {result.against} beyond the noise"
    if unjudged:
        return f"{unjudged} of {n} run(s) without a comparable baseline in {result.against}"
    return f"no run slower than {result.against} ({n} checked)"


def _state(c: CandidateCheck) -> str:
    return (c.verdict_name or "judged") if c.outcome == "judged" else c.outcome.replace("_", " ")


# ---------------------------------------------------------------------------------------- text
_STYLE = {"slower": "bold red", "faster": "bold green", "no change": "bold", "inconclusive": "bold yellow"}


def _render(result: CheckResult) -> None:
    for c in result.candidates:
        state = _state(c)
        console.print(f"[{_STYLE.get(state, 'bold red')}]{escape(state.upper())}[/] "
                      + escape(f"{c.run_name} ({c.receipt_id[:12]}), lane {c.lane or '-'}"))
        if c.verdict:
            console.print("  " + escape(f"step time {c.median_step_ms:.3f} ms vs baseline: {ratio_text(c)}"))
        console.print("  " + escape(c.message))
        if c.baseline:
            console.print("  baseline: " + escape(baseline_text(c)))
            for r in c.baseline.excluded:
                console.print("    excluded " + escape(f"{r.run_name}: {r.excluded}"))
            console.print("  noise floor: " + escape(c.baseline.floor.note))
        if c.outcome == "judged":
            console.print("  drift vs the newest baseline run: " + escape(drift_text(c)))
        if c.ended_early:
            console.print("  [yellow]ended early:[/] " + escape(c.ended_early))
    console.print(escape(headline(result)))


# ---------------------------------------------------------------------------------------- json
def to_json(result: CheckResult) -> dict[str, Any]:
    """The stable `check --json` contract."""
    def one(c: CandidateCheck) -> dict[str, Any]:
        v, b = c.verdict, c.baseline
        return {
            "run": c.run_name, "id": c.receipt_id, "ref": c.ref, "lane": c.lane.as_dict() if c.lane else None,
            "outcome": c.outcome, "verdict": c.verdict_name, "why": c.message,
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
        }
    return {"passed": result.passed, "exit_code": result.exit_code, "against": result.against, "last": result.last,
            "results": [one(c) for c in result.candidates]}


# ---------------------------------------------------------------------------------------- markdown
def _md(text: object) -> str:
    """Text for a Markdown table cell: no HTML, no cell breaks, no line breaks (run names are user data)."""
    return (str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")
            .replace("`", "'").replace("\r", " ").replace("\n", " "))


_ICON = {"slower": ":x:", "faster": ":rocket:", "no change": ":white_check_mark:", "inconclusive": ":grey_question:"}


def to_markdown(result: CheckResult) -> str:
    """One pull-request comment: the marker line first, a headline, then a table per candidate."""
    lines = [MARKER, f"### receipts check: {_md(headline(result))}", ""]
    for c in result.candidates:
        state = _state(c)
        floor = c.baseline.floor if c.baseline else None
        lines += [
            f"#### {_ICON.get(state, ':warning:')} {_md(c.run_name)}: **{_md(state)}**", "",
            "| | |", "| --- | --- |",
            f"| lane | {_md(c.lane or 'none (incomplete identity)')} |",
            f"| baseline | {_md(baseline_text(c))} |",
        ]
        if c.baseline and c.baseline.excluded:
            lines.append("| excluded | " + _md("; ".join(f"{r.run_name}: {r.excluded}" for r in c.baseline.excluded))
                         + " |")
        if c.verdict:
            lines.append(f"| step time | {c.median_step_ms:.3f} ms; candidate / baseline {_md(ratio_text(c))} |")
        lines += [
            f"| verdict | {_md(c.message)} |",
            f"| noise floor | {_md(f'{floor.floor_pct:.2f}% ({floor.note})') if floor else '-'} |",
            f"| drift | {_md(drift_text(c))} |",
        ]
        if c.ended_early:
            lines.append(f"| ended early | {_md(c.ended_early)} |")
        lines.append("")
    lines.append(f"<sub>receipts check {_md(' '.join(['--against', result.against, '--last', str(result.last)]))}: "
                 "run medians with moving-block bootstrap intervals against the lane's run-to-run noise floor.</sub>")
    body = "\n".join(lines) + "\n"
    if len(body) > MAX_COMMENT_CHARS:
        cut = body[:MAX_COMMENT_CHARS].rsplit("\n", 1)[0]
        body = cut + "\n\n_(cut to fit a GitHub comment: the job's step summary and `--json` have every run)_\n"
    return body


# ---------------------------------------------------------------------------------------- CI
def to_junit(result: CheckResult) -> str:
    cases = result.candidates
    failures = sum(c.verdict_name == "slower" for c in cases)
    errors = sum(c.outcome != "judged" for c in cases)
    suites = ET.Element("testsuites", name="receipts check", tests=str(len(cases)), failures=str(failures),
                        errors=str(errors))
    suite = ET.SubElement(suites, "testsuite", name=f"receipts check --against {result.against}",
                          tests=str(len(cases)), failures=str(failures), errors=str(errors))
    for c in cases:
        case = ET.SubElement(suite, "testcase", classname=str(c.lane or "rumor"), name=c.run_name)
        detail = "\n".join([f"{_state(c)}: {c.message}", f"ratio {ratio_text(c)}", f"baseline {baseline_text(c)}",
                            f"drift {drift_text(c)}"])
        if c.verdict_name == "slower":
            ET.SubElement(case, "failure", message=c.message, type="slower").text = detail
        elif c.outcome != "judged":
            ET.SubElement(case, "error", message=c.message, type=c.outcome).text = detail
        else:
            ET.SubElement(case, "system-out").text = detail
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def to_github(result: CheckResult) -> list[str]:
    level = {"slower": "error", "inconclusive": "warning", "faster": "notice", "no change": "notice"}
    out = []
    for c in result.candidates:
        state = _state(c)
        title = escape_prop(f"receipts check: {c.run_name} {state}")
        out.append(f"::{level.get(state, 'error')} title={title}::{escape_data(c.message + ' ' + ratio_text(c))}")
    return out
