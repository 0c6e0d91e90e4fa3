"""`receipts list` and `receipts show`.

`list --json` is what scripts and CI run over whole stores, so it imports only what it reads and prints with
(the store, analysis/listing.py, orjson); the table's rich and `show`'s report (polars, numpy) are imported
where they are used.
"""

from __future__ import annotations

from typing import Optional

import typer

from receipts.analysis.listing import receipt_list
from receipts.cli.context import handle_errors, print_json, settings


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
        rows = receipt_list(store, include_superseded=show_all, lane=lane)
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
            "machine_class": r["machine_class"], "source_format": r["source_format"], "tags": r["tags"],
            "n_steady_steps": r["n_steady_steps"], "median_step_ms": r["median_step_ms"],
            "series_unit": r["series_unit"], "time_to_train_s": r["time_to_train_s"],
            "peak_allocated_bytes": r["peak_allocated_bytes"], "peak_reserved_bytes": r["peak_reserved_bytes"],
            "ended_early": r["ended_early"], "started_at": r["started_at"], "ingested_at": r["ingested_at"],
            "superseded_by": r["superseded_by"],
        } for r in rows])
        return
    from receipts.cli.render import render_receipt_list

    render_receipt_list(rows, total=total, show_all=show_all)


@handle_errors
def show(
    ctx: typer.Context,
    ref: str = typer.Argument(..., help="Receipt id, unique id prefix, or run name."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Show one receipt: identity with alias resolution, window, steady state, memory, env, sources.

    Example: receipts show run_b --json
    """
    from receipts.analysis.report import receipt_report

    with settings(ctx).read_store() as store:
        report = receipt_report(store, store.resolve(ref))
    if as_json:
        print_json(report)
        return
    from receipts.cli.render import render_report

    render_report(report)
