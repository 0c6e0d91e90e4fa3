"""`receipts history RUN|LANE`: a lane's current runs in run order, with intervals, noise-floor z-scores
and change points."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import typer
from rich.markup import escape

from receipts.analysis.commits import to_json as commits_json
from receipts.analysis.noise import floor_json
from receipts.cli.context import console, handle_errors, print_json, settings
from receipts.cli.output import Column, chosen_format, emit, format_option
from receipts.errors import UsageError

if TYPE_CHECKING:  # the history's statistics (numpy, polars) load when it is read, not for `history --help`
    from receipts.analysis.history import LaneHistory


def register(app: typer.Typer) -> None:
    app.command("history")(history)


@handle_errors
def history(
    ctx: typer.Context,
    ref: str = typer.Argument(..., help="A receipt (id, id prefix, run name): its lane; or a lane written "
                                        "'HOST_LINEAGE PRESET_FAMILY LAUNCH_REGIME'."),
    tag: Optional[str] = typer.Option(None, "--tag", help="Only receipts carrying this lineage tag."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output: lane, noise_floor, runs."),
    fmt: Optional[str] = format_option(),
) -> None:
    """A lane's current runs in run order: median, interval, z against the lane's noise floor, change points.

    Example: receipts history run_b --tag main
    """
    from receipts.analysis.history import read_history, resolve_lane

    fmt = chosen_format(fmt, as_json=as_json)
    with settings(ctx).store(read_only=True) as store:
        lane = resolve_lane(store, ref)
        result = read_history(store, lane, tag=tag)
    if not result.runs:
        raise UsageError(f"lane {lane} has no current receipts" + (f" tagged {tag!r}" if tag else "")
                         + " (see `receipts list`)")
    if fmt == "json":
        print_json(to_json(result))
    elif fmt == "table":
        _render(result)
    else:
        runs = to_json(result)["runs"]
        emit([{"index": i, **r} for i, r in enumerate(runs, start=1)], RUN_COLUMNS, fmt, json_rows=runs)


def to_json(h: LaneHistory) -> dict[str, Any]:
    return {
        "lane": h.lane.as_dict(), "tag": h.tag, "noise_floor": floor_json(h.floor), "order": h.order,
        "change_points": [{"index": c.index, "run": h_run.id, "run_name": h_run.run_name, "pvalue": c.pvalue,
                           "mean_before_ms": c.mean_before, "mean_after_ms": c.mean_after,
                           "change_pct": 100.0 * c.rel_change, "commits": commits_json(h.commits(c))}
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


def _interval(r: dict[str, Any]) -> str:
    return f"[{r['ci_low']:,.3f}, {r['ci_high']:,.3f}]" if r["ci_low"] is not None else "-"


def _date(r: dict[str, Any]) -> str:
    if not r["run_date"]:
        return "-"
    if r["run_date_source"] == "ingest":  # a batch is ingested within a second: its milliseconds show the order
        return r["run_date"][:23].replace("T", " ") + " (ingest)"
    return r["run_date"][:19].replace("T", " ")


RUN_COLUMNS = [
    Column("index", "#"), Column("id", only="data"), Column("run_name", "run"),
    Column("run_date", "run date", drop=2, kind="time", show=_date), Column("run_date_source", only="data"),
    Column("n_steps", only="data"),
    Column("median_step_ms", "median step", show=lambda r: f"{r['median_step_ms']:,.3f} ms" if r["median_step_ms"] else "-"),
    Column("ci_low", "95% interval", drop=3, show=_interval), Column("ci_high", only="data"),
    Column("block_length", only="data"),
    Column("z", "z", drop=4, show=lambda r: f"{r['z']:+.1f}" if r["z"] is not None else "-"),
    Column("change_point", "change point",
           show=lambda r: f"yes {r['change_pct']:+.2f}% (p={r['change_pvalue']:.1g})" if r["change_point"] else ""),
    Column("change_pvalue", only="data"), Column("change_pct", only="data"), Column("git_rev", only="data"),
    Column("tags", only="data"), Column("straggler_ranks", only="data"), Column("straggler_impact_pct", only="data"),
]


def _render(h: LaneHistory) -> None:
    console.prose(f"[bold]lane[/] {escape(str(h.lane))}" + (f"  (tag {escape(h.tag)})" if h.tag else ""))
    console.prose(f"noise floor: {escape(h.floor.note)}")
    runs = [{"index": i, **r} for i, r in enumerate(to_json(h)["runs"], start=1)]
    columns = list(RUN_COLUMNS)
    if any(r.straggler_ranks for r in h.runs):
        columns.append(Column("straggler", "straggler", drop=1, show=lambda r: (
            f"rank {', '.join(map(str, r['straggler_ranks']))} ({r['straggler_impact_pct']:.1f}%)"
            if r["straggler_ranks"] else "")))
    n = len(h.change_points)
    notes = [f"{n} change point{'s' if n != 1 else ''}. {h.method}"]
    for c in h.change_points:
        notes.append(f"change point at {_run_at(h, c.index).run_name} ({100.0 * c.rel_change:+.2f}%): "
                     f"{h.commits(c).note}")
    notes.append(ORDER_NOTE[h.order])
    emit(runs, columns, "table", notes=notes)


ORDER_NOTE = {
    "runs": "run order: each run's own start time (from its log, header or export).",
    "ingest": "run order: from ingest, not from the runs: no run gave a start time, so they are ordered by when "
              "they were ingested (a batch in the order it was given). A change point here dates ingests, not runs.",
    "mixed": "run order: (ingest) marks runs that gave no start time, placed by when they were ingested; the others "
             "by their own start time.",
}
