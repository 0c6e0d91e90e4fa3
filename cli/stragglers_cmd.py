"""`receipts stragglers RUN`: which rank holds the step back, and what it costs (analysis/stragglers.py)."""

from __future__ import annotations

from typing import Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from receipts.analysis.straggler_reports import stored_reports
from receipts.cli.context import console, handle_errors, print_json, settings
from receipts.cli.output import Column, chosen_format, emit, format_option
from receipts.errors import UsageError


def register(app: typer.Typer) -> None:
    app.command("stragglers")(stragglers)


@handle_errors
def stragglers(
    ctx: typer.Context,
    ref: str = typer.Argument(..., help="Receipt id, unique id prefix, or run name."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable: matching, ranks, stragglers, per_kind, "
                                                       "per_step, for the newest multi-rank export."),
    fmt: Optional[str] = format_option(),
) -> None:
    """Rank skew per collective, per rank and per step; the straggler named (when the evidence clears the bar)
    with its what-if impact and cause.

    Example: receipts stragglers fsdp2_2gpu_nsys --json

    TSV, CSV and JSON Lines carry the per-rank table of the newest export, its straggler marked.
    """
    fmt = chosen_format(fmt, as_json=as_json)
    with settings(ctx).read_store() as store:
        receipt_id = store.resolve(ref)
        reports = stored_reports(store.query("stragglers", {"receipt_id": receipt_id}).iter_rows(named=True))
    if not reports:
        raise UsageError(f"{ref}: no multi-rank profiler export with communication is attached "
                         "(attach an nsys export of several ranks or a folder of per-rank Kineto traces)")
    if fmt == "json":
        print_json(reports[0])
        return
    if fmt != "table":
        emit(rank_rows(reports[0]), RANK_COLUMNS, fmt)
        return
    for rep in reports:
        _render(rep)


RANK_COLUMNS = [Column(k) for k in ("rank", "last_arrival_share", "wait_imposed_ms_per_step", "wait_ms_per_step",
                                    "straggler", "impact_ms_per_step", "impact_pct", "cause", "source")]


def rank_rows(rep: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per rank: how often it arrived last, the wait it imposed and suffered, and, for a named
    straggler, its what-if impact and cause."""
    named = {s["rank"]: s for s in rep["stragglers"]}
    return [{**r, "straggler": r["rank"] in named, "source": rep["source"],
             **{k: named.get(r["rank"], {}).get(k) for k in ("impact_ms_per_step", "impact_pct", "cause")}}
            for r in rep["ranks"]]


def _render(rep: dict[str, Any]) -> None:
    console.prose(f"[bold]{escape(rep['source'] or '-')}[/] ({rep['source_format']}): {rep['n_ranks']} ranks, "
                  f"{rep['n_collectives']} matched collectives over {rep['n_steps']} steady steps")
    console.prose(escape(f"matching: {rep['matching']}"))
    kinds = Table(title="per collective kind")
    for col in ("kind", "collectives", "median arrival skew ms", "median latency ms", "median end skew ms"):
        kinds.add_column(col)
    for k in rep["per_kind"]:
        kinds.add_row(k["kind"], str(k["collectives"]), f"{k['median_skew_ms']:.3f}", f"{k['median_latency_ms']:.3f}",
                      f"{k['median_end_skew_ms']:.3f}")
    console.print(kinds)
    ranks = Table(title="per rank (steady steps)")
    for col in ("rank", "arrived last", "wait imposed ms/step", "own wait ms/step"):
        ranks.add_column(col)
    for r in rep["ranks"]:
        ranks.add_row(str(r["rank"]), f"{r['last_arrival_share']:.0%}", f"{r['wait_imposed_ms_per_step']:.3f}",
                      f"{r['wait_ms_per_step']:.3f}")
    console.print(ranks)
    steps = Table(title="own wait per step, ms (rank columns)")
    steps.add_column("step")
    rank_ids = sorted({p["rank"] for p in rep["per_step"]})
    for r in rank_ids:
        steps.add_column(f"rank {r}")
    waits = {(p["step"], p["rank"]): p["wait_ms"] for p in rep["per_step"]}
    for step in sorted({p["step"] for p in rep["per_step"]}):
        steps.add_row(str(step), *(f"{waits.get((step, r), 0.0):.3f}" for r in rank_ids))
    console.print(steps)
    if not rep["clock_ok"]:
        console.prose(f"[bold yellow]no straggler named[/]: {escape(rep['note'])}")
    elif not rep["stragglers"]:
        console.prose(f"no straggler: no rank clears the bar ({escape(rep['note'])})")
    for s in rep["stragglers"]:
        console.prose(f"[bold red]straggler: rank {s['rank']}[/] — had it arrived with the median rank, the step "
                      f"would be {s['impact_ms_per_step']:.3f} ms ({s['impact_pct']:.1f}%) shorter; cause: "
                      f"[bold]{escape(s['cause'])}[/] ({escape(s['cause_detail'])})")
        console.prose(escape(f"  ({rep['note']})"))
