"""`receipts history RUN|LANE`: a lane's current runs in run order, with intervals, noise-floor z-scores
and change points."""

from __future__ import annotations

from typing import Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from receipts.analysis.compare import floor_json
from receipts.analysis.history import LaneHistory, read_history, resolve_lane
from receipts.cli.context import console, handle_errors, print_json, settings
from receipts.errors import UsageError


def register(app: typer.Typer) -> None:
    app.command("history")(history)


@handle_errors
def history(
    ctx: typer.Context,
    ref: str = typer.Argument(..., help="A receipt (id, id prefix, run name): its lane; or a lane written "
                                        "'HOST_LINEAGE PRESET_FAMILY LAUNCH_REGIME'."),
    tag: Optional[str] = typer.Option(None, "--tag", help="Only receipts carrying this lineage tag."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output: lane, noise_floor, runs."),
) -> None:
    """A lane's current runs in run order: median, interval, z against the lane's noise floor, change points.

    Example: receipts history run_b --tag main
    """
    with settings(ctx).store(read_only=True) as store:
        lane = resolve_lane(store, ref)
        result = read_history(store, lane, tag=tag)
    if not result.runs:
        raise UsageError(f"lane {lane} has no current receipts" + (f" tagged {tag!r}" if tag else "")
                         + " (see `receipts list`)")
    if as_json:
        print_json(to_json(result))
    else:
        _render(result)


def to_json(h: LaneHistory) -> dict[str, Any]:
    return {
        "lane": h.lane.as_dict(), "tag": h.tag, "noise_floor": floor_json(h.floor),
        "change_points": [{"index": c.index, "run": h_run.id, "run_name": h_run.run_name, "pvalue": c.pvalue,
                           "mean_before_ms": c.mean_before, "mean_after_ms": c.mean_after,
                           "change_pct": 100.0 * c.rel_change}
                          for c in h.change_points for h_run in [_run_at(h, c.index)]],
        "method": h.method,
        "runs": [{"id": r.id, "run_name": r.run_name, "run_date": r.run_date.isoformat() + "Z" if r.run_date else None,
                  "run_date_source": r.run_date_source, "n_steps": r.n_steps, "median_step_ms": r.median_step_ms,
                  "ci_low": r.ci_low, "ci_high": r.ci_high, "block_length": r.block_length, "z": r.z,
                  "change_point": r.change_point, "change_pvalue": r.change_pvalue, "change_pct": r.change_pct,
                  "git_rev": r.git_rev, "tags": list(r.tags), "straggler_ranks": list(r.straggler_ranks),
                  "straggler_impact_pct": r.straggler_impact_pct} for r in h.runs],
    }


def _run_at(h: LaneHistory, index: int):
    """Change point indices count only runs with a median."""
    return [r for r in h.runs if r.median_step_ms][index]


def _render(h: LaneHistory) -> None:
    console.print(f"[bold]lane[/] {escape(str(h.lane))}" + (f"  (tag {escape(h.tag)})" if h.tag else ""))
    console.print(f"noise floor: {escape(h.floor.note)}")
    table = Table(show_lines=False)
    columns = ["#", "run", "run date", "median step", "95% interval", "z", "change point"]
    has_stragglers = any(r.straggler_ranks for r in h.runs)
    for col in columns + (["straggler"] if has_stragglers else []):
        table.add_column(col)
    for i, r in enumerate(h.runs, start=1):
        date = f"{r.run_date:%Y-%m-%d %H:%M:%S}" if r.run_date else "-"
        date += " (ingest)" if r.run_date_source == "ingest" else ""
        interval = f"[{r.ci_low:,.3f}, {r.ci_high:,.3f}]" if r.ci_low is not None else "-"
        z = f"{r.z:+.1f}" if r.z is not None else "-"
        cp = f"[bold red]yes[/] {r.change_pct:+.2f}% (p={r.change_pvalue:.1g})" if r.change_point else ""
        median = f"{r.median_step_ms:,.3f} ms" if r.median_step_ms else "-"
        straggler = (f"rank {', '.join(map(str, r.straggler_ranks))} ({r.straggler_impact_pct:.1f}%)"
                     if r.straggler_ranks else "")
        table.add_row(str(i), escape(r.run_name), date, median, escape(interval), z, cp,
                      *([straggler] if has_stragglers else []))
    console.print(table)
    n = len(h.change_points)
    console.print(f"{n} change point{'s' if n != 1 else ''}. {escape(h.method)}")
    if any(r.run_date_source == "ingest" for r in h.runs):
        console.print("(ingest): the run gave no start time; ordered by when it was ingested")
