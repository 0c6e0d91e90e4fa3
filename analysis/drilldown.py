"""One step of one rank opened up: where its time went and which kernels it ran, each beside the same rank's
typical steady step. What `receipts anatomy RUN --step N` prints and the dashboard's anatomy view draws when a
reader goes from a slow step to its kernels.

"Typical" is the median over the rank's other steady steps: a step's wall time, each part and category of its
anatomy, each kernel's calls and time. A median, not a mean, because slow steps come in ones and twos: with two
planted slow steps in 20, a mean made the other one's extra kernels look like a shortfall in this one. (The
typical parts are each a median, so they need not add up to exactly the typical span.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import polars as pl

from receipts.errors import UsageError
from receipts.schema.categories import DECOMPOSITION
from receipts.schema.model import STEP_KERNELS_REST

if TYPE_CHECKING:
    from receipts.store import Store

# The step offered first when none is named: the slowest steady step.
SLOWEST = "slowest"


@dataclass(frozen=True)
class StepDrilldown:
    receipt_id: str
    source_sha256: str
    step: int
    rank: int | None
    warmup: bool
    wall_ms: float | None          # the step marker's duration on this rank
    typical_wall_ms: float | None  # median over the rank's other steady steps
    steady_steps: int              # the rank's steady steps the typical values are over (this one left out)
    ranks: list[int | None]        # the ranks that ran the step, for a picker
    # category, part (True: one of the parts that sum to the step's GPU span; False: a kernel category's busy
    # time, which overlaps others), ms, typical_ms, delta_ms
    categories: list[dict[str, Any]]
    # name, category (null on the '(other kernels)' row), calls, typical_calls, ms, typical_ms, delta_ms:
    # the step's longest kernels and the rest in one row, largest excess over the typical step first
    kernels: list[dict[str, Any]]
    kernels_stored: bool           # False: the export was attached before per-step kernels were kept
    span_ms: float                 # the step's GPU span on this rank: its parts' sum
    typical_span_ms: float | None  # the median span of the rank's other steady steps

    @property
    def delta_ms(self) -> float | None:
        if self.wall_ms is None or self.typical_wall_ms is None:
            return None
        return self.wall_ms - self.typical_wall_ms


def slowest_steps(store: "Store", receipt_id: str, source_sha256: str, n: int = 10) -> list[dict[str, Any]]:
    """The receipt's steps by their slowest rank's wall time, slowest first: step, rank (the slowest), wall_ms,
    warmup. Steady steps before warm-up ones: a warm-up step is slow by design."""
    steps = store.query("anatomy_steps", {"receipt_id": receipt_id, "source_sha256": source_sha256})
    steps = steps.filter(pl.col("step").is_not_null() & pl.col("wall_ms").is_not_null())
    if steps.height == 0:
        return []
    worst = (steps.sort("wall_ms", "rank", descending=[True, False], nulls_last=True)
             .group_by("step", maintain_order=True).first()
             .sort("warmup", "wall_ms", descending=[False, True]))
    return worst.select("step", "rank", "wall_ms", "warmup").head(n).to_dicts()


def step_drilldown(store: "Store", receipt_id: str, source_sha256: str, step: int | str = SLOWEST,
                   rank: int | None = None) -> StepDrilldown:
    """Step `step` (or the slowest steady step) of `rank` (default: the step's slowest rank) beside the rank's
    typical steady step. Raises UsageError when the export has no step markers or no such step or rank."""
    params = {"receipt_id": receipt_id, "source_sha256": source_sha256}
    steps = store.query("anatomy_steps", params).filter(pl.col("step").is_not_null())
    if steps.height == 0:
        raise UsageError(f"the export attached to {receipt_id} has no step markers: the capture is one window, "
                         "with no steps to drill into", option="step")
    if step == SLOWEST:
        slowest = slowest_steps(store, receipt_id, source_sha256, n=1)
        step, slow_rank = int(slowest[0]["step"]), slowest[0]["rank"]
        rank = slow_rank if rank is None else rank
    step = int(step)
    of_step = steps.filter(pl.col("step") == step)
    if of_step.height == 0:
        lo, hi = steps["step"].min(), steps["step"].max()
        raise UsageError(f"{step} is not a step of the export attached to {receipt_id} (its steps: {lo!s}-{hi!s})",
                         option="step")
    ranks = sorted(of_step["rank"].to_list(), key=lambda r: (r is None, r))
    if rank is None:
        rank = of_step.sort("wall_ms", "rank", descending=[True, False], nulls_last=True)["rank"][0]
    elif rank not in ranks:
        raise UsageError(f"{rank} did not run step {step} in this export (its ranks: "
                         f"{', '.join(map(str, ranks))})", option="rank")
    mine = steps.filter(pl.col("rank").eq_missing(rank))
    this = mine.filter(pl.col("step") == step).row(0, named=True)
    others = mine.filter(~pl.col("warmup") & (pl.col("step") != step))["step"]
    typical_wall = _median(mine.filter(pl.col("step").is_in(others.implode()))["wall_ms"])
    rows = store.query("anatomy_rows", params).filter(pl.col("rank").eq_missing(rank) & pl.col("step").is_not_null())
    kernel_rows = store.query("step_kernels", {**params, "rank": rank})
    span, typical_span = _spans(rows, step, others)
    return StepDrilldown(
        receipt_id=receipt_id, source_sha256=source_sha256, step=step, rank=rank, warmup=bool(this["warmup"]),
        wall_ms=this["wall_ms"], typical_wall_ms=typical_wall, steady_steps=others.len(), ranks=ranks,
        categories=_categories(rows, step, others), kernels=_kernels(kernel_rows, step, others),
        kernels_stored=kernel_rows.height > 0, span_ms=span, typical_span_ms=typical_span)


def _median(values: pl.Series) -> float | None:
    values = values.drop_nulls()
    return float(cast(float, values.median())) if values.len() else None


def _spans(rows: pl.DataFrame, step: int, typical_steps: pl.Series) -> tuple[float, float | None]:
    """The step's GPU span (its parts' sum) and the median span of the typical steps."""
    spans = (rows.filter(pl.col("category").is_in(list(DECOMPOSITION))).group_by("step")
             .agg(pl.col("time_ms").sum()))
    this = spans.filter(pl.col("step") == step)["time_ms"]
    return float(this.sum()) if this.len() else 0.0, _median(spans.filter(pl.col("step").is_in(typical_steps.implode()))["time_ms"])


def _categories(rows: pl.DataFrame, step: int, typical_steps: pl.Series) -> list[dict[str, Any]]:
    """Each category's ms in the step and its median over the typical steps (a step without it counts 0)."""
    this = rows.filter(pl.col("step") == step).group_by("category").agg(pl.col("time_ms").sum().alias("ms"))
    grid = (pl.DataFrame({"step": typical_steps}).join(rows.select("category").unique(), how="cross")
            .join(rows.group_by("step", "category").agg(pl.col("time_ms").sum()), on=["step", "category"], how="left"))
    typical = grid.group_by("category").agg(pl.col("time_ms").fill_null(0.0).median().alias("typical_ms"))
    both = (this.join(typical, on="category", how="full", coalesce=True)
            .with_columns(pl.col("ms").fill_null(0.0), pl.col("category").is_in(list(DECOMPOSITION)).alias("part"))
            .with_columns((pl.col("ms") - pl.col("typical_ms")).alias("delta_ms"))
            .sort("part", "delta_ms", descending=[True, True], nulls_last=True))
    return both.select("category", "part", "ms", "typical_ms", "delta_ms").to_dicts()


def _kernels(rows: pl.DataFrame, step: int, typical_steps: pl.Series) -> list[dict[str, Any]]:
    """The step's kept kernels and its '(other kernels)' row, each beside its median over the typical steps. In
    a typical step a kernel is its stored row; missing, it is 0 where the step kept every kernel (no rest row),
    else unknown (it fell among that step's rest): the median is over the steps that know."""
    this = rows.filter(pl.col("step") == step)
    if this.height == 0:
        return []
    names = this.select("category", "name")
    with_rest = rows.filter(pl.col("name") == STEP_KERNELS_REST)["step"].unique()
    known = (pl.col("calls").is_not_null() | (pl.col("name") == STEP_KERNELS_REST)
             | ~pl.col("step").is_in(with_rest.implode()))
    grid = (pl.DataFrame({"step": typical_steps}).join(names, how="cross")
            .join(rows, on=["step", "category", "name"], how="left", nulls_equal=True)
            .with_columns(pl.when(known).then(pl.col("calls").fill_null(0)).alias("calls"),
                          pl.when(known).then(pl.col("time_ms").fill_null(0.0)).alias("time_ms")))
    typical = grid.group_by("category", "name").agg(pl.col("calls").median().alias("typical_calls"),
                                                    pl.col("time_ms").median().alias("typical_ms"))
    frame = (this.join(typical, on=["category", "name"], how="left", nulls_equal=True).rename({"time_ms": "ms"})
             .with_columns((pl.col("ms") - pl.col("typical_ms")).alias("delta_ms"))
             .sort("delta_ms", "ms", descending=True, nulls_last=True))
    return frame.select("name", "category", "calls", "typical_calls", "ms", "typical_ms", "delta_ms").to_dicts()
