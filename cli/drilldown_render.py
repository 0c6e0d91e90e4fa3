"""`receipts anatomy RUN --step N`: one step of one rank beside the rank's typical steady step, as text, a
kernel table (TSV/CSV) or JSON. The numbers are analysis/drilldown.py's; this module only words them."""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from receipts.analysis.drilldown import StepDrilldown
from receipts.cli.kernel_names import short_kernel_name
from receipts.cli.context import console, print_json
from receipts.cli.output import Column, emit
from receipts.schema.model import STEP_KERNELS_KEPT

# The kernel table as TSV/CSV print it: full names, every column.
KERNEL_COLUMNS = [Column("delta_ms"), Column("ms"), Column("typical_ms"), Column("calls"), Column("typical_calls"),
                  Column("category"), Column("name")]


def _ms(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+,.3f}" if signed else f"{value:,.3f}"


def _calls(r: dict[str, Any]) -> str:
    typical = r["typical_calls"]
    return f"{r['calls']:,}" if typical is None else f"{r['calls']:,} / {typical:,.4g}"


PART_COLUMNS = [Column("category", "part"), Column("ms", "this step", show=lambda r: _ms(r["ms"])),
                Column("typical_ms", "typical", show=lambda r: _ms(r["typical_ms"])),
                Column("delta_ms", "Δ ms", show=lambda r: _ms(r["delta_ms"], signed=True))]
BUSY_COLUMNS = [Column("category"), *PART_COLUMNS[1:]]
KERNEL_TABLE = [Column("delta_ms", "Δ ms", show=lambda r: _ms(r["delta_ms"], signed=True)),
                Column("ms", "ms", show=lambda r: _ms(r["ms"])),
                Column("typical_ms", "typical", drop=2, show=lambda r: _ms(r["typical_ms"])),
                Column("calls", "calls / typ.", drop=1, show=_calls),
                Column("category", drop=3, show=lambda r: r["category"] or ""),
                Column("name", "kernel", fold=28, show=lambda r: short_kernel_name(r["name"]))]


def headline(d: StepDrilldown, run_name: str) -> str:
    kind = "warm-up" if d.warmup else "steady"
    ranks = ", ".join(map(str, d.ranks))
    head = f"step {d.step} of {run_name}, rank {d.rank} (ranks {ranks}), {kind}:"
    if d.typical_wall_ms is None or d.typical_span_ms is None:
        return (f"{head} {_ms(d.wall_ms)} ms wall (step marker), GPU span {_ms(d.span_ms)} ms; no other steady step "
                "to hold it against")
    return (f"{head} {_ms(d.wall_ms)} ms wall (step marker, {_ms(d.delta_ms, signed=True)}), GPU span "
            f"{_ms(d.span_ms)} ms ({_ms(d.span_ms - d.typical_span_ms, signed=True)}) against the rank's typical "
            f"steady step ({_ms(d.typical_wall_ms)} ms wall, {_ms(d.typical_span_ms)} ms GPU span: the median of its "
            f"{d.steady_steps} other steady steps)")


def render(d: StepDrilldown, run_name: str, fmt: str, top: int) -> None:
    if fmt == "json":
        print_json(d)
        return
    if fmt != "table":  # the kernel table as data: the --top kernels with the largest excess, names whole
        emit(d.kernels[:top], KERNEL_COLUMNS, fmt)
        return
    console.prose(escape(headline(d, run_name)))
    parts = [c for c in d.categories if c["part"]]
    busy = [c for c in d.categories if not c["part"]]
    emit(parts, PART_COLUMNS, fmt, title="where the step's GPU span went (parts that sum to it), ms")
    emit(busy, BUSY_COLUMNS, fmt, title="busy time by kernel category (overlapping, not additive), ms")
    if not d.kernels_stored:
        console.prose("no per-step kernels stored for this export (attached before schema 12): attach it again "
                      "to see this step's kernels")
        return
    shown = d.kernels[:top]
    emit(shown, KERNEL_TABLE, fmt,
         title="kernels, largest excess over the typical step first",
         notes=[f"The step's {STEP_KERNELS_KEPT} longest kernels are kept, the rest summed in one row"
                + (f"; {len(d.kernels) - len(shown)} more rows: --top {len(d.kernels)}" if len(d.kernels) > len(shown)
                   else "") + "."])
