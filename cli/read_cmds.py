"""`receipts list` and `receipts show`."""

from __future__ import annotations

import json
from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from receipts.analysis.report import receipt_report, series_headline
from receipts.cli.context import console, handle_errors, print_json, settings
from receipts.cli.render import fmt_bytes, fmt_duration, fmt_ms


TABLE_ROWS = 200  # `list` without --json or --limit


def register(app: typer.Typer) -> None:
    app.command("list")(list_receipts)
    app.command("show")(show)


@handle_errors
def list_receipts(
    ctx: typer.Context,
    lane: Optional[str] = typer.Option(None, "--lane", help="Only receipts whose host lineage, preset or regime contains this."),
    show_all: bool = typer.Option(False, "--all", help="Include receipts superseded by a later ingest of the same "
                                                       "run (marked), kept for audit."),
    as_json: bool = typer.Option(False, "--json", help="A JSON array, one object per receipt."),
    limit: Optional[int] = typer.Option(None, "--limit", min=0, help="At most N receipts, newest first; 0: all. "
                                        f"Default: all with --json, the newest {TABLE_ROWS} in the table."),
) -> None:
    """List current receipts with identity and steady-state step time; rumors (incomplete identity) are marked.

    Example: receipts list --all --json
    """
    with settings(ctx).read_store() as store:
        frame = store.query("list_receipts", {"all": show_all})
    rows = [{**r, **series_headline(json.loads(r["provenance_json"] or "{}"))} for r in frame.to_dicts()]
    if lane:
        rows = [r for r in rows if any(lane in (r[k] or "") for k in ("host_lineage", "preset_family", "launch_regime"))]
    total = len(rows)
    # A terminal table of 10,000 rows takes rich ~10 s to lay out and nobody reads it: the newest TABLE_ROWS,
    # saying how many are left out. --json is for programs: all of them unless asked.
    limit = limit if limit is not None else (0 if as_json else TABLE_ROWS)
    rows = rows[:limit] if limit else rows
    if as_json:
        print_json([{
            "id": r["id"], "run_name": r["run_name"],
            "identity": {"host_lineage": r["host_lineage"], "preset_family": r["preset_family"],
                         "launch_regime": r["launch_regime"], "complete": r["identity_complete"]},
            "machine_class": r["machine_class"], "source_format": r["source_format"], "tags": json.loads(r["tags_json"]),
            "n_steady_steps": r["n_steady_steps"], "median_step_ms": r["median_step_ms"],
            "series_unit": r["series_unit"], "time_to_train_s": r["time_to_train_s"],
            "peak_allocated_bytes": r["peak_allocated_bytes"], "peak_reserved_bytes": r["peak_reserved_bytes"],
            "ended_early": r["ended_early"], "started_at": r["started_at"], "ingested_at": r["ingested_at"],
            "superseded_by": r["superseded_by"],
        } for r in rows])
        return
    n_superseded = sum(1 for r in rows if r["superseded_by"])
    title = f"{total} receipts" + (f" ({n_superseded} superseded, marked in the last column)" if show_all
                                    else " (current; --all adds superseded ones)")
    if len(rows) < total:
        title += f"; the newest {len(rows)} shown (--limit N, --limit 0 for all)"
    table = Table(title=title, show_lines=False)
    # Time to train is MLPerf's headline; a store without MLPerf receipts gets no column of dashes.
    with_ttt = any(r["time_to_train_s"] is not None for r in rows)
    for col in ("id", "run", "host lineage", "preset family", "regime", "machine", "steady n", "median step",
                *(["time to train"] if with_ttt else []), "peak alloc"):
        table.add_column(col)
    if show_all:
        table.add_column("superseded by")
    for r in rows:
        rumor = "" if r["identity_complete"] else " [yellow](rumor)[/]"
        table.add_row(r["id"][:12], escape(r["run_name"]) + rumor, *(escape(r[k] or "-") for k in
                      ("host_lineage", "preset_family", "launch_regime", "machine_class")),
                      f"{r['n_steady_steps']} {r['series_unit']}s" if r["series_unit"] != "step" else str(r["n_steady_steps"]),
                      fmt_ms(r["median_step_ms"]) + (f"/{r['series_unit']}" if r["series_unit"] != "step" else ""),
                      *([fmt_duration(r["time_to_train_s"])] if with_ttt else []), fmt_bytes(r["peak_allocated_bytes"]),
                      *([(r["superseded_by"] or "-")[:12]] if show_all else []))
    console.print(table)


@handle_errors
def show(
    ctx: typer.Context,
    ref: str = typer.Argument(..., help="Receipt id, unique id prefix, or run name."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Show one receipt: identity with alias resolution, window, steady state, memory, env, sources.

    Example: receipts show run_b --json
    """
    with settings(ctx).read_store() as store:
        report = receipt_report(store, store.resolve(ref))
    if as_json:
        print_json(report)
        return
    from receipts.cli.render import render_report

    render_report(report)
