"""`receipts anatomy`: where step time went, per step, per rank, per NVTX range, per kernel, per long gap."""

from __future__ import annotations

from typing import Any, Optional

import typer
from rich.markup import escape

from receipts.analysis.anatomy import MANY_RANKS, anatomy_report, attached_sources
from receipts.analysis.drilldown import SLOWEST, step_drilldown
from receipts.cli.context import console, err_console, handle_errors, print_json, settings
from receipts.cli.kernel_names import short_kernel_name
from receipts.cli.output import Column, chosen_format, emit, format_option
from receipts.errors import UsageError


def register(app: typer.Typer) -> None:
    app.command("anatomy")(anatomy)


@handle_errors
def anatomy(
    ctx: typer.Context,
    ref: str = typer.Argument(..., help="Receipt id, id prefix or run name."),
    by: Optional[str] = typer.Option(
        None, "--by", show_default=False,
        help=f"category | rank | step | nvtx | kernel | gap (default: rank, or category past {MANY_RANKS} ranks: the "
             "spread of each category over the ranks; gap: where the GPU sat idle 0.5 ms or more, after which call "
             "of which kernel)"),
    top: int = typer.Option(10, "--top", min=1, help="With --by kernel (and in --json): kernels kept per category; with --step: kernels shown."),
    source: Optional[str] = typer.Option(None, "--source", help="sha256 prefix of the export (default: newest)."),
    step: Optional[str] = typer.Option(
        None, "--step", show_default=False,
        help="Open one step: its parts, kernel categories and kernels beside the rank's typical steady step "
             "(the median of its other steady steps), largest excess first. A step number, or `slowest`."),
    rank: Optional[int] = typer.Option(None, "--rank", show_default=False,
                                       help="With --step: the rank to open (default: the step's slowest)."),
    as_json: bool = typer.Option(False, "--json",
                                 help="The whole report as JSON: step_rows (per step) and window_totals (the steady "
                                      "window) apart, steps, window, nvtx, kernels, across_ranks, gaps."),
    fmt: Optional[str] = format_option(),
) -> None:
    """Step-time anatomy by category (GEMM, attention, MoE, NCCL, memcpy, idle, exposed comm).

    Example: receipts anatomy run_b --by step --format csv; receipts anatomy run_b --step slowest
    """
    if by not in (None, "category", "step", "rank", "nvtx", "kernel", "gap"):
        raise UsageError(f"--by must be category, rank, step, nvtx, kernel or gap (got {by!r})")
    if step is not None and step != SLOWEST and not step.lstrip("-").isdigit():
        raise UsageError(f"--step takes a step number or `slowest` (got {step!r})")
    if rank is not None and step is None:
        raise UsageError("--rank opens one rank of a step: give --step too")
    fmt = chosen_format(fmt, as_json=as_json)
    with settings(ctx).read_store() as store:
        receipt_id = store.resolve(ref)
        if step is not None:  # one step: its rows only, not the whole report
            from receipts.cli import drilldown_render

            sha256 = attached_sources(store, receipt_id, source)["source_sha256"][0]
            drill = step_drilldown(store, receipt_id, sha256, SLOWEST if step == SLOWEST else int(step), rank)
            run_name = store.query("receipt", {"receipt_id": receipt_id})["run_name"][0]
            drilldown_render.render(drill, run_name, fmt, top=top)
            return
        report = anatomy_report(store, receipt_id, source_sha256=source, top_kernels=top)
    if by is None:
        by = "category" if report.many_ranks else "rank"
    if fmt == "json":
        print_json(report)
        return
    src = report.source
    if fmt == "table":
        console.prose(escape(f"anatomy of {report.receipt_id} from {src.format} {src.path} "
                             f"(schema {src.schema_version})"))
        console.prose(escape(f"steps: {src.step_marker}; attribution: {src.attribution}; "
                             f"unattributed activities: {src.unattributed}"))
        for w in src.warnings:
            err_console.prose(f"[yellow]warning:[/] {escape(w)}")
    if by == "kernel" and not report.kernels and fmt == "table":
        console.prose("no kernel names stored for this export (attached before schema 7, or it ran no kernels "
                      "in the steady window)")
        return
    if by == "gap" and not report.gaps and fmt == "table":
        console.prose("no GPU gap of 0.5 ms or more in a steady step (or the export was attached before schema 17: "
                      "attach it again to place its gaps)")
        return
    if by == "category" and fmt != "table":  # one table of every phase, the phase a column
        emit(report.across_ranks, BY_CATEGORY, fmt)
        return
    if by == "category":
        for phase in dict.fromkeys(r["phase"] for r in report.across_ranks):
            rows = [r for r in report.across_ranks if r["phase"] == phase]
            emit(rows, BY_CATEGORY, fmt, title=f"{phase}: ms per step over {report.ranks} ranks (--by rank: each rank)")
        return
    rows, columns, title = {
        "nvtx": (report.nvtx[:60] if fmt == "table" else report.nvtx, BY_NVTX, "NVTX ranges"),
        "kernel": (report.kernels, BY_KERNEL, f"top {top} kernels per category, " + (
            "the capture's one window (no step markers), all ranks (ms/step: per rank-window)"
            if (src.step_marker or "").startswith("none") else "steady steps, all ranks (ms/step: per rank-step)")),
        "rank": (report.window, BY_RANK, "per rank, ms per step (steady vs warm-up)"),
        "step": (report.steps, BY_STEP, "per step"),
        "gap": (report.gaps, BY_GAP, "long GPU gaps (0.5 ms or more) by place, steady steps, all ranks"),
    }[by]
    emit(rows, columns, fmt, title=title)


def _ms(key: str, digits: int = 3) -> Any:
    return lambda r: "-" if r.get(key) is None else f"{r[key]:,.{digits}f}"


BY_NVTX = [Column("rank"), Column("range_name", "range"), Column("count"), Column("total_ms", "total ms", show=_ms("total_ms"))]
# The kernel's name last: C++ template names are long, and folding keeps them whole.
BY_KERNEL = [Column("category"), Column("calls", drop=1, show=lambda r: f"{r['calls']:,}"),
             Column("ms_per_step", "ms/step", show=_ms("ms_per_step")),
             Column("share_pct", "% of cat.", drop=2, show=_ms("share_pct", 1)), Column("total_ms", only="data"),
             Column("name", "kernel", fold=28, show=lambda r: short_kernel_name(r["name"]))]


BY_CATEGORY = [Column("phase", only="data"), Column("category"), Column("ranks"), Column("median_ms", "median", show=_ms("median_ms")),
               Column("min_ms", "min (rank)", show=lambda r: f"{r['min_ms']:,.3f} ({r['min_rank']})"),
               Column("min_rank", only="data"),
               Column("max_ms", "max (rank)", show=lambda r: f"{r['max_ms']:,.3f} ({r['max_rank']})"),
               Column("max_rank", only="data"), Column("spread_pct", "spread %", show=_ms("spread_pct", 1))]
BY_RANK = [Column("rank"), Column("phase"), Column("category"), Column("per_step_ms", "ms/step", show=_ms("per_step_ms")),
           Column("time_ms", "total ms", show=_ms("time_ms")), Column("n_steps", "steps")]
# The place last, folded: a kernel name and which call of it in the step.
BY_GAP = [Column("steps", show=lambda r: f"{r['steps']}/{r['steady_steps']}"), Column("steady_steps", only="data"),
          Column("share_pct", "% steps", drop=2, show=_ms("share_pct", 0)),
          Column("ms_per_step", "ms/step", show=_ms("ms_per_step")), Column("mean_ms", "mean ms", show=_ms("mean_ms")),
          Column("max_ms", "max ms", drop=1, show=_ms("max_ms")),
          Column("place", "after (call N of)", fold=28,
                 show=lambda r: "(the span's start)" if r["after"] is None
                 else f"{short_kernel_name(r['after'])} #{r['call']}")]
BY_STEP = [Column("rank"), Column("step"), Column("wall_ms", "wall ms", show=_ms("wall_ms")),
           Column("gpu_ms", "gpu ms", show=_ms("gpu_ms")), Column("comm_ms", "comm ms", show=_ms("comm_ms")),
           Column("overlap_pct", "overlap %", show=_ms("overlap_pct", 1)),
           Column("warmup", "warm-up", show=lambda r: "yes" if r["warmup"] else "")]
