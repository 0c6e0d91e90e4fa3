"""`receipts list` and `receipts show`.

`list --json` is what scripts and CI run over whole stores, so it imports only what it reads and prints with
(the store, analysis/listing.py, orjson); the table's rich and `show`'s report (polars, numpy) are imported
where they are used.
"""

from __future__ import annotations

from typing import Optional

import typer

from receipts.analysis.listing import receipt_list
from receipts.cli.context import handle_errors, settings
from receipts.cli.output import chosen_format, emit, emit_record, format_option


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
    as_json: bool = typer.Option(False, "--json", help="A JSON array, one object per receipt (--format json)."),
    fmt: Optional[str] = format_option(),
    limit: Optional[int] = typer.Option(None, "--limit", min=0, help="At most N receipts, newest first; 0: all. "
                                        f"Default: the newest {TABLE_ROWS} in a terminal table, all otherwise."),
) -> None:
    """List current receipts with identity and steady-state step time; rumors (incomplete identity) are marked.

    Example: receipts list --all --format tsv | cut -f1,2
    """
    fmt = chosen_format(fmt, as_json=as_json)
    with settings(ctx).read_store() as store:
        rows = receipt_list(store, include_superseded=show_all, lane=lane)
    total = len(rows)
    # A terminal table of 10,000 rows takes rich ~10 s to lay out and nobody reads it: the newest TABLE_ROWS,
    # saying how many are left out. Other formats are for programs: all of them unless asked.
    limit = limit if limit is not None else (TABLE_ROWS if fmt == "table" else 0)
    rows = rows[:limit] if limit else rows
    from receipts.cli.render import list_columns, list_json, list_title

    emit(rows, list_columns(rows, show_all=show_all), fmt, title=list_title(rows, total=total, show_all=show_all),
         json_rows=(list_json(r) for r in rows))


@handle_errors
def show(
    ctx: typer.Context,
    ref: str = typer.Argument(..., help="Receipt id, unique id prefix, or run name."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output (--format json)."),
    fmt: Optional[str] = format_option(piped="table"),
) -> None:
    """Show one receipt: identity with alias resolution, window, steady state, memory, env, sources.

    Example: receipts show run_b --json

    The report is text on a terminal and in a pipe (no colour there); --format tsv or csv gives it as
    field/value rows with dotted field names, jsonl as one line.
    """
    from receipts.analysis.report import receipt_report

    fmt = chosen_format(fmt, as_json=as_json, piped="table")
    with settings(ctx).read_store() as store:
        report = receipt_report(store, store.resolve(ref))
    if fmt != "table":
        emit_record(report, fmt)
        return
    from receipts.cli.render import render_report

    render_report(report)
