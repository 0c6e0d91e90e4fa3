"""Step-time anatomy of one receipt as a typed result: what `anatomy` prints (its --json is this, field for
field) and the dashboard draws."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import polars as pl

from receipts.errors import Remedy, UsageError
from receipts.schema.model import (ANATOMY_KERNEL_SCHEMA, ANATOMY_KERNEL_SHAPE_SCHEMA, ANATOMY_STEP_KERNEL_SCHEMA,
                                   STEP_KERNELS_KEPT,
                                     STEP_KERNELS_REST)

if TYPE_CHECKING:
    from receipts.store import Store


# Past one node's GPUs, a table or chart per rank is a wall of numbers: `anatomy` and the dashboard show each
# category over the ranks instead (across_ranks).
MANY_RANKS = 8


@dataclass(frozen=True)
class AnatomySource:
    """The profiler export the anatomy comes from."""
    sha256: str
    format: str                 # 'nsys' | 'kineto'
    path: str | None
    schema_version: int | None
    step_marker: str | None     # what marked the steps (an NVTX range name, ProfilerStep#)
    attribution: str | None     # how GPU work reached a step
    unattributed: int | None    # GPU activities that reached no step
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class AnatomyReport:
    receipt_id: str
    source: AnatomySource
    other_sources: tuple[str, ...]   # sha256 of the receipt's other attached exports (none when one was chosen)
    step_rows: list[dict[str, Any]]  # rank, step, category, time_ms, warmup: one row per step, rank and category
    window_totals: list[dict[str, Any]]  # rank, category, time_ms: the steady window's totals (never summed with the steps)
    window: list[dict[str, Any]]     # sql/anatomy_window.sql: per rank, phase and category
    steps: list[dict[str, Any]]      # sql/anatomy_steps.sql: per rank and step
    nvtx: list[dict[str, Any]]       # sql/anatomy_nvtx.sql: per rank and NVTX range
    kernels: list[dict[str, Any]]    # sql/anatomy_kernels.sql: the top kernels of each category, steady steps
    across_ranks: list[dict[str, Any]]  # across_ranks(window): per phase and category, the spread over ranks
    gaps: list[dict[str, Any]] = field(default_factory=list)  # sql/anatomy_gap_places.sql: long gaps by place

    @property
    def ranks(self) -> int:
        """The ranks the window holds (a process that launched no GPU work has none)."""
        return len({r["rank"] for r in self.window if r["rank"] is not None})

    @property
    def many_ranks(self) -> bool:
        """Past MANY_RANKS: shown as each category over the ranks, not rank by rank."""
        return self.ranks > MANY_RANKS


def attached_sources(store: "Store", receipt_id: str, source_sha256: str | None = None) -> pl.DataFrame:
    """The receipt's attached exports (sql/anatomy_sources.sql), newest first; the one whose sha256 starts with
    `source_sha256` when given. Raises UsageError when there is none, or the prefix does not name one."""
    sources = store.query("anatomy_sources", {"receipt_id": receipt_id})
    if sources.height == 0:
        raise UsageError(f"receipt {receipt_id} has no profiler export attached",
                         remedy=Remedy("attach", receipt=receipt_id))
    if source_sha256 is None:
        return sources
    match = sources.filter(sources["source_sha256"].str.starts_with(source_sha256))
    if match.height != 1:
        raise UsageError(f"{source_sha256!r} matches {match.height} of the exports attached to {receipt_id}",
                         option="source")
    return match


def anatomy_report(store: "Store", receipt_id: str, *, source_sha256: str | None = None,
                   top_kernels: int = 10) -> AnatomyReport:
    sources = attached_sources(store, receipt_id, source_sha256)
    source = sources.row(0, named=True)
    params = {"receipt_id": receipt_id, "source_sha256": source["source_sha256"]}
    rows = store.query("anatomy_rows", params)
    window = store.query("anatomy_window", params)
    steps = store.query("anatomy_steps", params)
    nvtx = store.query("anatomy_nvtx", params)
    kernels = store.query("anatomy_kernels", {**params, "top": top_kernels})
    # The steady window's totals per rank, kept apart from the per-step rows: summing one list that held both
    # counted every steady step twice.
    steady_totals = [
        {"rank": r["rank"], "category": r["category"], "time_ms": r["time_ms"]}
        for r in window.iter_rows(named=True) if r["phase"] in ("steady", "window")
    ]
    per_step = [{"rank": r["rank"], "step": r["step"], "category": r["category"], "time_ms": r["time_ms"],
                 "warmup": r["warmup"]} for r in rows.iter_rows(named=True) if r["step"] is not None]
    return AnatomyReport(
        receipt_id=receipt_id,
        source=AnatomySource(sha256=source["source_sha256"], format=source["source_format"], path=source["path"],
                             schema_version=source["schema_version"], step_marker=source["step_marker"],
                             attribution=source["attribution"], unattributed=source["unattributed"],
                             warnings=tuple(json.loads(source["warnings_json"]))),
        other_sources=tuple(sources["source_sha256"].to_list()[1:]) if source_sha256 is None else (),
        step_rows=per_step,
        window_totals=steady_totals,
        window=window.to_dicts(),
        steps=steps.to_dicts(),
        nvtx=nvtx.to_dicts(),
        kernels=kernels.to_dicts(),
        across_ranks=across_ranks(window).to_dicts(),
        gaps=store.query_rows("anatomy_gap_places", params),
    )


def across_ranks(window: pl.DataFrame) -> pl.DataFrame:
    """Per phase and category, ms per step over the ranks that had it: how many, the median, the least and the
    most with their rank (the lowest rank of a tie for the least, the highest for the most) and the spread,
    (most - least) / median in %. What a profile of many ranks reads as one table instead of one per rank."""
    phase_order = pl.col("phase").replace_strict({"steady": 0, "window": 1, "warmup": 2}, default=3,
                                                 return_dtype=pl.Int8)
    return (window.filter(pl.col("rank").is_not_null())
            .sort("per_step_ms", "rank")
            .group_by("phase", "category")
            .agg(pl.len().cast(pl.Int64).alias("ranks"), pl.col("per_step_ms").median().alias("median_ms"),
                 pl.col("per_step_ms").first().alias("min_ms"), pl.col("rank").first().alias("min_rank"),
                 pl.col("per_step_ms").last().alias("max_ms"), pl.col("rank").last().alias("max_rank"))
            .with_columns(pl.when(pl.col("median_ms") > 0)
                          .then((pl.col("max_ms") - pl.col("min_ms")) / pl.col("median_ms") * 100.0)
                          .alias("spread_pct"))
            .sort(phase_order, pl.col("median_ms"), pl.col("category"), descending=[False, True, False]))


def steady_kernel_totals(kernel_steps: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """Kernel calls and time by (rank, category, name) over each rank's steady steps (steps marked warm-up by
    the receipt's window are left out), with the number of those steps: ANATOMY_KERNEL_SCHEMA. A capture without
    step markers has one window per rank (step null), steady, counted as one step."""
    steady = steps.filter(~pl.col("warmup")).select("rank", "step")
    n_steps = steady.group_by("rank").agg(pl.len().cast(pl.Int64).alias("steps"))
    return (kernel_steps.join(steady, on=["rank", "step"], nulls_equal=True)
            .group_by("rank", "category", "name")
            # Summed as whole nanoseconds (each per-step time is integer ns / 1e6): that division can differ in
            # its last bit with the frame's length, and a float sum carried it into the stored total.
            .agg(pl.col("calls").sum().cast(pl.Int64),
                 ((pl.col("time_ms") * 1e6).round().cast(pl.Int64).sum() / 1e6).alias("total_ms"))
            .join(n_steps, on="rank")
            .select([pl.col(c).cast(t) for c, t in ANATOMY_KERNEL_SCHEMA.items()])
            .sort("rank", "total_ms", "name", descending=[False, True, False]))


def steady_kernel_shapes(kernel_steps: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """Kernel calls and time by (rank, name, launch shape) over each rank's steady steps, as steady_kernel_totals,
    for the calls whose shape the profile records (kernel_steps' `shape`, null where none): ANATOMY_KERNEL_SHAPE_SCHEMA."""
    if "shape" not in kernel_steps.columns:
        return pl.DataFrame(schema=ANATOMY_KERNEL_SHAPE_SCHEMA)
    steady = steps.filter(~pl.col("warmup")).select("rank", "step")
    n_steps = steady.group_by("rank").agg(pl.len().cast(pl.Int64).alias("steps"))
    return (kernel_steps.filter(pl.col("shape").is_not_null())
            .join(steady, on=["rank", "step"], nulls_equal=True)
            .group_by("rank", "name", "shape")
            .agg(pl.col("calls").sum().cast(pl.Int64),
                 ((pl.col("time_ms") * 1e6).round().cast(pl.Int64).sum() / 1e6).alias("total_ms"))
            .join(n_steps, on="rank")
            .select([pl.col(c).cast(t) for c, t in ANATOMY_KERNEL_SHAPE_SCHEMA.items()])
            .sort("rank", "name", "total_ms", descending=[False, False, True]))


def step_kernel_rows(kernel_steps: pl.DataFrame, kept: int = STEP_KERNELS_KEPT) -> pl.DataFrame:
    """Per rank and step (warm-up steps too), the `kept` longest kernel names with their calls and time, and the
    rest of the step's kernels summed in one STEP_KERNELS_REST row (category null): ANATOMY_STEP_KERNEL_SCHEMA.
    A step's rows sum to its kernel time, so a drill-down can say what the step spent beyond its kept names."""
    if kernel_steps.height == 0:
        return pl.DataFrame(schema=ANATOMY_STEP_KERNEL_SCHEMA)
    ranked = (kernel_steps.with_columns(pl.col("category").cast(pl.Utf8), pl.col("name").cast(pl.Utf8),
                                        # whole nanoseconds, as the steady totals: sums that do not drift in the last bit
                                        (pl.col("time_ms") * 1e6).round().cast(pl.Int64).alias("ns"))
              .group_by("rank", "step", "category", "name")  # a name's launch shapes as one
              .agg(pl.col("calls").sum(), pl.col("ns").sum())
              .with_columns(pl.col("ns").rank("ordinal", descending=True).over("rank", "step").alias("place")))
    kept_rows = ranked.filter(pl.col("place") <= kept)
    rest = (ranked.filter(pl.col("place") > kept).group_by("rank", "step")
            .agg(pl.lit(None, dtype=pl.Utf8).alias("category"), pl.lit(STEP_KERNELS_REST).alias("name"),
                 pl.col("calls").sum(), pl.col("ns").sum()))
    return (pl.concat([kept_rows.select("rank", "step", "category", "name", "calls", "ns"), rest], how="vertical_relaxed")
            .with_columns((pl.col("ns") / 1e6).alias("time_ms"))
            .select([pl.col(c).cast(t) for c, t in ANATOMY_STEP_KERNEL_SCHEMA.items()])
            .sort("rank", "step", "time_ms", descending=[False, False, True], nulls_last=True))


def mean_over_ranks(rows: pl.DataFrame) -> pl.DataFrame:
    """Per step and category, ms averaged over the ranks that ran the step (a rank without the category in it
    counts 0), rank null: each part's mean, so the parts still sum to the mean step. sql/anatomy_rows.sql's
    columns. The per-step view of a profile of many ranks, where a chart per rank ran 24,000 pixels wide."""
    ranks_in_step = rows.group_by("step").agg(pl.col("rank").n_unique().alias("n_ranks"))
    return (rows.group_by("step", "category")
            .agg(pl.col("time_ms").sum(), pl.col("warmup").any())
            .join(ranks_in_step, on="step", how="left", nulls_equal=True)
            .select(pl.lit(None, dtype=rows.schema["rank"]).alias("rank"), "step", "category",
                    (pl.col("time_ms") / pl.col("n_ranks")).alias("time_ms"), "warmup")
            .sort("step", "category", nulls_last=True))

