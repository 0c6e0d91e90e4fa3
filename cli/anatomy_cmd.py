"""`receipts anatomy`: where step time went, per step, per rank, per NVTX range, per kernel."""

from __future__ import annotations

from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from receipts.analysis.anatomy import MANY_RANKS, anatomy_report
from receipts.cli.context import console, handle_errors, print_json, settings
from receipts.errors import UsageError


def register(app: typer.Typer) -> None:
    app.command("anatomy")(anatomy)


@handle_errors
def anatomy(
    ctx: typer.Context,
    ref: str = typer.Argument(..., help="Receipt id, id prefix or run name."),
    by: Optional[str] = typer.Option(
        None, "--by", show_default=False,
        help=f"category | rank | step | nvtx | kernel (default: rank, or category past {MANY_RANKS} ranks: the spread "
             "of each category over the ranks)"),
    top: int = typer.Option(10, "--top", min=1, help="With --by kernel (and in --json): kernels kept per category."),
    source: Optional[str] = typer.Option(None, "--source", help="sha256 prefix of the export (default: newest)."),
    as_json: bool = typer.Option(False, "--json",
                                 help="Machine-readable output (rows, steps, window, nvtx, kernels, across_ranks)."),
) -> None:
    """Step-time anatomy by category (GEMM, attention, MoE, NCCL, memcpy, idle, exposed comm).

    Example: receipts anatomy run_b --by step
    """
    if by not in (None, "category", "step", "rank", "nvtx", "kernel"):
        raise UsageError(f"--by must be category, rank, step, nvtx or kernel (got {by!r})")
    with settings(ctx).read_store() as store:
        report = anatomy_report(store, store.resolve(ref), source_sha256=source, top_kernels=top)
    if by is None:
        by = "category" if report.many_ranks else "rank"
    if as_json:
        print_json(report)
        return
    src = report.source
    console.print(escape(f"anatomy of {report.receipt_id} from {src.format} {src.path} "
                         f"(schema {src.schema_version})"))
    console.print(escape(f"steps: {src.step_marker}; attribution: {src.attribution}; "
                         f"unattributed activities: {src.unattributed}"))
    for w in src.warnings:
        console.print(f"[yellow]warning:[/] {escape(w)}")
    if by == "nvtx":
        table = Table(title="NVTX ranges")
        for c in ("rank", "range", "count", "total ms"):
            table.add_column(c)
        for r in report.nvtx[:60]:
            table.add_row(str(r["rank"]), escape(r["range_name"]), str(r["count"]), f"{r['total_ms']:,.3f}")
        console.print(table)
        return
    if by == "kernel":
        if not report.kernels:
            console.print("no kernel names stored for this export (attached before schema 7, or it ran no kernels "
                          "in the steady window)")
            return
        table = Table(title=f"top {top} kernels per category, steady steps, all ranks (ms/step: per rank-step)")
        for c in ("category", "calls", "ms/step", "% of cat."):
            table.add_column(c, no_wrap=True)
        table.add_column("kernel", overflow="fold")  # last: C++ template names are long, and folding keeps them whole
        for r in report.kernels:
            table.add_row(escape(r["category"]), f"{r['calls']:,}",
                          "-" if r["ms_per_step"] is None else f"{r['ms_per_step']:,.3f}", f"{r['share_pct']:.1f}",
                          escape(r["name"]))
        console.print(table)
        return
    if by == "category":
        for phase in dict.fromkeys(r["phase"] for r in report.across_ranks):
            table = Table(title=f"{phase}: ms per step over {report.ranks} ranks (--by rank: each rank)")
            for c in ("category", "ranks", "median", "min (rank)", "max (rank)", "spread %"):
                table.add_column(c, overflow="fold")
            for r in (r for r in report.across_ranks if r["phase"] == phase):
                table.add_row(escape(r["category"]), str(r["ranks"]), f"{r['median_ms']:,.3f}",
                              f"{r['min_ms']:,.3f} ({r['min_rank']})", f"{r['max_ms']:,.3f} ({r['max_rank']})",
                              "-" if r["spread_pct"] is None else f"{r['spread_pct']:.1f}")
            console.print(table)
        return
    if by == "rank":
        table = Table(title="per rank, ms per step (steady vs warm-up)")
        for c in ("rank", "phase", "category", "ms/step", "total ms", "steps"):
            table.add_column(c)
        for r in report.window:
            table.add_row(str(r["rank"]), r["phase"], escape(r["category"]), f"{r['per_step_ms']:,.3f}", f"{r['time_ms']:,.3f}",
                          str(r["n_steps"]))
        console.print(table)
        return
    table = Table(title="per step")
    for c in ("rank", "step", "wall ms", "gpu ms", "comm ms", "overlap %", "warm-up"):
        table.add_column(c)
    for r in report.steps:
        table.add_row(str(r["rank"]), str(r["step"]), f"{r['wall_ms'] or 0:,.3f}", f"{r['gpu_ms'] or 0:,.3f}",
                      f"{r['comm_ms'] or 0:,.3f}", "-" if r["overlap_pct"] is None else f"{r['overlap_pct']:.1f}",
                      "yes" if r["warmup"] else "")
    console.print(table)
