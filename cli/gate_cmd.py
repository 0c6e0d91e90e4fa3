"""`receipts gate CLAIMS.yaml`: accept a benchmark claim only when its receipts support it.

Exit 0 when every claim is accepted, 1 when any is rejected, 2 when a claims file is malformed.
The analysis lives in analysis/gate.py; this module only formats its results (text, JSON, JUnit XML,
GitHub Actions annotations).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Optional

import typer
from rich.markup import escape

from receipts.cli.context import EXIT_OK, EXIT_REJECTED, console, handle_errors, print_json, settings
from receipts.cli.words import with_remedy

if TYPE_CHECKING:  # the engine (NumPy, polars, YAML) loads when a claim is judged, not for `gate --help`
    from receipts.analysis.gate import ClaimResult, GateResult, Measured


def register(app: typer.Typer) -> None:
    app.command("gate")(gate)


@handle_errors
def gate(
    ctx: typer.Context,
    claims: List[Path] = typer.Argument(..., help="Claims files (YAML, version 1; see docs/claims-format.md)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Also write JUnit XML here: one testcase per claim."),
    github: bool = typer.Option(False, "--github", help="Also print GitHub Actions annotations (::error / ::notice)."),
) -> None:
    """Check benchmark claims against stored receipts. Exit 1 when any claim is rejected.

    Example: receipts gate examples/claims/true_claims.yaml --junit gate.xml --github
    """
    from receipts.analysis.claims import load_claims
    from receipts.analysis.gate_inputs import run_gate

    files = [load_claims(p) for p in claims]  # every file is validated before any is judged
    with settings(ctx).read_store() as store:
        results = [worded(run_gate(store, f)) for f in files]
    if junit is not None:
        junit.write_text(to_junit(results), encoding="utf-8")
    if as_json:
        print_json(to_json(results))
    else:
        _render(results)
    if github:
        for line in to_github(results):
            print(line)
    raise typer.Exit(EXIT_OK if all(r.accepted for r in results) else EXIT_REJECTED)



def worded(result: GateResult) -> GateResult:
    """Each reason with its remedy said as this command line's options and commands."""
    return replace(result, results=tuple(
        replace(r, reasons=tuple(replace(x, message=with_remedy(x.message, x.remedy)) for x in r.reasons))
        for r in result.results))

def fmt_measured(m: Measured | None) -> str:
    if m is None or m.value is None:
        return "not measured"
    if m.unit == "x":
        return f"speedup {m.value:.3f}x [{m.ci_low:.3f}, {m.ci_high:.3f}] ({m.confidence:.0%} CI)"
    return f"change {m.value / 2**30:+.3f} GiB ({m.note})"


def fmt_claimed(r: ClaimResult) -> str:
    c = r.claim
    if c.is_speed:
        return f"claimed {c.speedup:.3f}x +- {c.tolerance:.1%}"
    tol = f"{c.tolerance_bytes / 2**30:.3f} GiB" if c.tolerance_bytes is not None else f"{c.tolerance:.1%}"
    parts = [f"{c.bucket} bucket"] if c.bucket else []
    if c.change_bytes is not None:
        parts.append(f"claimed {c.change_bytes / 2**30:+.3f} GiB +- {tol}")
    if c.at_most_bytes is not None:
        parts.append(f"at most {c.at_most_bytes / 2**30:.3f} GiB")
    return ", ".join(parts)


def _render(results: list[GateResult]) -> None:
    n_ok = n_bad = 0
    for g in results:
        for r in g.results:
            c = r.claim
            where = f"{c.path}:{c.line}"
            if r.accepted:
                n_ok += 1
                console.print("[green]ACCEPTED[/] " + escape(f"{c.name} ({c.metric}, {where}): "
                                                                f"{fmt_measured(r.measured)}; {fmt_claimed(r)}"))
            else:
                n_bad += 1
                console.print("[bold red]REJECTED[/] " + escape(f"{c.name} ({c.metric}, {where}): "
                                                                    f"{fmt_measured(r.measured)}; {fmt_claimed(r)}"))
                for reason in r.reasons:
                    console.print("  - " + escape(reason.message))
            for x in r.baseline_excluded:
                console.print("    baseline run left out: " + escape(x))
            for w in r.windows:
                console.print("    " + escape(w))
    console.print(f"{n_ok + n_bad} claim(s): {n_ok} accepted, {n_bad} rejected")


def _claim_json(r: ClaimResult) -> dict[str, Any]:
    c, m = r.claim, r.measured
    return {
        "name": c.name, "file": c.path, "line": c.line, "metric": c.metric,
        "baseline": c.baseline, "candidate": c.candidate, "baseline_id": r.baseline_id, "candidate_id": r.candidate_id,
        "baseline_tag": c.baseline_tag, "last": c.last, "baseline_ids": list(r.baseline_ids),
        "baseline_excluded": list(r.baseline_excluded),
        "claimed": {"speedup": c.speedup, "change_bytes": c.change_bytes, "bucket": c.bucket,
                    "at_most_bytes": c.at_most_bytes, "tolerance": c.tolerance,
                    "tolerance_bytes": c.tolerance_bytes, "declared_drift": list(c.declared_drift),
                    "min_steps": c.min_steps, "max_cv": c.max_cv, "min_effect": c.min_effect,
                    "allow_ended_early": c.allow_ended_early},
        "accepted": r.accepted,
        "reasons": [x.message for x in r.reasons],
        "reason_codes": [x.code for x in r.reasons],
        "measured": {"value": m.value if m else None, "ci_low": m.ci_low if m else None,
                     "ci_high": m.ci_high if m else None, "confidence": m.confidence if m else None,
                     "unit": m.unit if m else None, "note": m.note if m else None},
        "windows": list(r.windows),
    }


def to_json(results: list[GateResult]) -> dict[str, Any]:
    """The stable `gate --json` contract."""
    return {"accepted": all(g.accepted for g in results),
            "claims": [_claim_json(r) for g in results for r in g.results]}


def to_junit(results: list[GateResult]) -> str:
    every = [r for g in results for r in g.results]
    failures = sum(not r.accepted for r in every)
    suites = ET.Element("testsuites", name="receipts gate", tests=str(len(every)), failures=str(failures))
    for g in results:
        suite = ET.SubElement(suites, "testsuite", name=g.path, tests=str(len(g.results)),
                              failures=str(sum(not r.accepted for r in g.results)), errors="0")
        for r in g.results:
            case = ET.SubElement(suite, "testcase", classname=Path(g.path).stem, name=r.claim.name,
                                 file=g.path, line=str(r.claim.line))
            detail = "\n".join([fmt_measured(r.measured) + "; " + fmt_claimed(r), *r.windows])
            if r.accepted:
                ET.SubElement(case, "system-out").text = detail
            else:
                failure = ET.SubElement(case, "failure", message="; ".join(x.message for x in r.reasons),
                                        type="rejected")
                failure.text = "\n".join([*(x.message for x in r.reasons), detail])
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def escape_data(s: str) -> str:
    # GitHub's workflow-command encoding (actions/toolkit command.ts): data escapes %, CR, LF ...
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_prop(s: str) -> str:
    # ... and property values also escape ':' and ','.
    return escape_data(s).replace(":", "%3A").replace(",", "%2C")


def to_github(results: list[GateResult]) -> list[str]:
    out = []
    for g in results:
        for r in g.results:
            c = r.claim
            where = f"file={escape_prop(c.path)},line={c.line}"
            if r.accepted:
                out.append(f"::notice {where},title={escape_prop('claim accepted: ' + c.name)}::"
                           f"{escape_data(fmt_measured(r.measured) + '; ' + fmt_claimed(r))}")
            else:
                out.append(f"::error {where},title={escape_prop('claim rejected: ' + c.name)}::"
                           f"{escape_data(chr(10).join(x.message for x in r.reasons))}")
    return out
