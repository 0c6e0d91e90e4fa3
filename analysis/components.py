"""Per-run component summaries: what one profiled run spends per steady step in each component, computed once
when its profile is stored (as the steady-state step summary is) and read by `receipts explain`.

One row per (level, name), all levels in one frame (COMPONENT_SCHEMA), from the anatomy frames the profile was
stored as (the same function at ingest, over the parser's frames, and in `receipts db upgrade`, over the stored
rows, so both give the same numbers):

  category  each anatomy category's ms per step: the exact non-overlapping decomposition of the step's GPU span
            (compute_only + comm_hidden + exposed_comm + memcpy_only + idle + idle_long, which sum to it; idle_long
            the idle held in gaps of 0.5 ms or more, a host stall, schema/categories.py), the host gap (the
            step marker's range less that span: a stall before the first launch, launch gaps; with the span's parts
            it sums to the step's range), the time between steps (BETWEEN_STEPS: from the end of the step's
            range to the start of the next one, a data loader's wait the step's range never holds; with the
            step's range, the step-to-step period) and each busy category (gemm, attention, each nccl_* collective, memcpy by direction, memset, cuda_graph, other;
            unions, which overlap one another). A step's value is the mean over the ranks that ran it (a rank
            without the category counts 0, so the parts still sum to the mean span); the run's value is the median
            over its steady steps.
  kernel    per kernel name as the export states it: calls and summed durations over the steady steps of every
            rank, per rank-step (the time one rank spends in it per step, as sql/anatomy_kernels.sql's
            ms_per_step). A mean, not a median: ms_per_step = calls_per_step x mean ms per call exactly, so a
            change splits into more calls and slower calls (analysis/explain.py). The stored kernel totals hold
            no per-step series, so `db upgrade` could not give a median anyway.
  gap       per place of a long GPU gap (ingest/gap_places.py: after which call of which kernel or copy, 'NAME
            #CALL'), its gap time per rank-step, the mean over the steady rank-steps (a step without a gap there
            counts 0, so the places sum to idle_long's mean), with the share of rank-steps that have one there as
            its calls_per_step: a stall planted in the loop is one place in every step, a profiler's pause a place
            in a few. Within-run variance from the steps' own series (step_spread).
  nvtx      per NVTX range name, its CPU-side durations summed over the whole capture (the anatomy stores NVTX
            ranges per rank over the capture, warm-up included, as nsys nvtx_sum reports them) per profiled
            rank-step, with its count per rank-step. A range seen once per rank (a step marker, an init) is left
            out: it is no per-step work.
  rank      per rank of a multi-rank profile, its exposed communication (communication not hidden under compute:
            the rank's wait for its peers plus transfers nothing overlapped), median over the steady steps: which
            rank's exposed wait grew (analysis/stragglers.py says who arrived late).

A profile without steady steps (no step markers, or every step in the warm-up) gives no rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import polars as pl

from receipts.analysis.explain_inputs import EXPOSED as _EXPOSED, GAP_START, RULE, mean_spread, series_spread
from receipts.schema.categories import BETWEEN_STEPS, DECOMPOSITION, HOST_GAP, PERIOD_PARTS
from receipts.schema.model import COMPONENT_SCHEMA

if TYPE_CHECKING:
    from receipts.schema.categories import CategoryRules
    from receipts.store import Store



def components(rows: pl.DataFrame, steps: pl.DataFrame, kernels: pl.DataFrame | None,
               nvtx: pl.DataFrame | None, gaps: pl.DataFrame | None = None) -> pl.DataFrame:
    """COMPONENT_SCHEMA rows of one profile from its anatomy frames: `rows` (rank, step, category, time_ms),
    `steps` (rank, step, warmup: the receipt's window), `kernels` (ANATOMY_KERNEL_SCHEMA, steady totals; None when
    the export kept no kernel names), `nvtx` (ANATOMY_NVTX_SCHEMA) and `gaps` (ANATOMY_GAP_SCHEMA; None: the
    profile's gaps were not placed)."""
    steady = _steady(steps)
    if steady.height == 0:
        return pl.DataFrame(schema=COMPONENT_SCHEMA)
    parts = [_categories(rows, steps), _ranks(rows, steps)]
    if kernels is not None and kernels.height:
        parts.append(_kernels(kernels))
    if nvtx is not None and nvtx.height:
        parts.append(_nvtx(nvtx, steps))
    if gaps is not None and gaps.height:
        parts.append(_gaps(gaps, steady))
    kept = [p.with_columns(pl.lit(RULE).alias("rule")).select([pl.col(c).cast(t) for c, t in COMPONENT_SCHEMA.items()])
            for p in parts if p.height]
    return pl.concat(kept) if kept else pl.DataFrame(schema=COMPONENT_SCHEMA)


def _steady_rows(rows: pl.DataFrame, steady: pl.DataFrame) -> pl.DataFrame:
    return (rows.select(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int64), pl.col("category").cast(pl.Utf8),
                        "time_ms")
            .join(steady, on=["rank", "step"], how="semi"))


def _with_host_gap(rows: pl.DataFrame, steps: pl.DataFrame, steady: pl.DataFrame) -> pl.DataFrame:
    """The steady rows plus each rank-step's host gap: its step range (the marker's wall time) less its GPU span
    (the decomposition's parts), signed so that the parts and the gap sum to the step's range. Without a marker's
    wall time (a hand-made frame) there is no gap."""
    steady_rows = _steady_rows(rows, steady)
    if "wall_ms" not in steps.columns:
        return steady_rows
    span = (steady_rows.filter(pl.col("category").is_in(DECOMPOSITION)).group_by("rank", "step")
            .agg(pl.col("time_ms").sum().alias("span_ms")))
    gap = (steps.select(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int64), "wall_ms")
           .join(steady, on=["rank", "step"], how="semi").filter(pl.col("wall_ms").is_not_null())
           .join(span, on=["rank", "step"], how="left")
           .select("rank", "step", pl.lit(HOST_GAP).alias("category"),
                   (pl.col("wall_ms") - pl.col("span_ms").fill_null(0.0)).alias("time_ms")))
    return pl.concat([steady_rows, gap.cast(steady_rows.schema)]) if gap.height else steady_rows


def category_steps(rows: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """Per steady step and category (host_gap included), the mean over the ranks that ran the step (a rank without
    the category counts 0): columns step, category, ms. The category level's series (a run's value is its
    median) and what its within-run spread is measured from (step_spread)."""
    steady = _steady(steps)
    steady_rows = _with_host_gap(rows, steps, steady)
    ranks_in_step = steady.group_by("step").agg(pl.len().alias("n_ranks"))
    grid = ranks_in_step.select("step").join(steady_rows.select("category").unique(), how="cross")
    parts = (steady_rows.group_by("step", "category").agg(pl.col("time_ms").sum())
             .join(grid, on=["step", "category"], how="right")
             .join(ranks_in_step, on="step")
             .select("step", "category", (pl.col("time_ms").fill_null(0.0) / pl.col("n_ranks")).alias("ms")))
    between = _between_steps(steps, steady)
    return pl.concat([parts, between.cast(parts.schema)]) if between.height else parts


def _between_steps(steps: pl.DataFrame, steady: pl.DataFrame) -> pl.DataFrame:
    """Per steady step that has a next step marker on its rank: the time from the end of its range to the start of
    the next one (BETWEEN_STEPS), the mean over the ranks that have one. Columns step, category, ms."""
    if "wall_ms" not in steps.columns or "start_ns" not in steps.columns:
        return pl.DataFrame(schema={"step": pl.Int64, "category": pl.Utf8, "ms": pl.Float64})
    marked = (steps.filter(pl.col("step").is_not_null() & pl.col("start_ns").is_not_null()
                           & pl.col("wall_ms").is_not_null())
              .select(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int64), "start_ns", "wall_ms")
              .sort("rank", "start_ns"))
    gaps = (marked.with_columns(((pl.col("start_ns").shift(-1).over("rank") - pl.col("start_ns")) / 1e6
                                 - pl.col("wall_ms")).alias("ms"))
            .filter(pl.col("ms").is_not_null()).join(steady, on=["rank", "step"], how="semi"))
    return (gaps.group_by("step").agg(pl.col("ms").mean())
            .select("step", pl.lit(BETWEEN_STEPS).alias("category"), "ms").sort("step"))


def rank_steps(rows: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """Per steady rank-step of a multi-rank profile, its exposed communication: columns rank, step, ms."""
    steady = _steady(steps)
    exposed = _steady_rows(rows, steady).filter(pl.col("category") == _EXPOSED).select("rank", "step", "time_ms")
    return (steady.join(exposed, on=["rank", "step"], how="left")
            .select("rank", "step", pl.col("time_ms").fill_null(0.0).alias("ms")))


def step_spread(rows: pl.DataFrame, steps: pl.DataFrame, gaps: pl.DataFrame | None = None
                ) -> dict[tuple[str, str], tuple[float, int]]:
    """Per (level, name) of the category, rank and gap levels: (the within-run variance of the run's value, ms², the
    effective number of independent steps it rests on), from a profile's frames: analysis/explain_inputs.py's
    series_spread over category_steps and rank_steps, and mean_spread over gap_steps (every steady step, 0 where
    no gap lies there), what `explain` reads from the stored rows (spread_many)."""
    out: dict[tuple[str, str], tuple[float, int]] = {}
    if gaps is not None and gaps.height:
        steady = _steady(steps)
        all_steps = steady.select("step").unique().sort("step")
        for (name,), part in gap_steps(gaps, steady).partition_by("name", as_dict=True, maintain_order=True).items():
            x = all_steps.join(part, on="step", how="left")["ms"].fill_null(0.0).to_list()
            out[("gap", str(name))] = mean_spread(x)
    per = [("category", category_steps(rows, steps).rename({"category": "name"})),
           ("rank", rank_steps(rows, steps).with_columns(pl.format("rank {}", pl.col("rank")).alias("name")))]
    for level, frame in per:
        if frame.height == 0 or (level == "rank" and frame["rank"].n_unique() < 2):
            continue
        for (name,), part in frame.sort("step").partition_by("name", as_dict=True, maintain_order=True).items():
            out[(level, str(name))] = series_spread(part["ms"].to_list())
    return out


def _steady(steps: pl.DataFrame) -> pl.DataFrame:
    return (steps.filter(pl.col("step").is_not_null() & ~pl.col("warmup").fill_null(False))
            .select(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int64)).unique())


def _categories(rows: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    per_step = category_steps(rows, steps)
    return (per_step.group_by("category")
            .agg(pl.col("ms").median().alias("ms_per_step"), pl.len().alias("n_steps"))
            .select(pl.lit("category").alias("level"), pl.col("category").alias("name"), pl.lit(None).alias("category"),
                    "ms_per_step", pl.lit(None).alias("calls_per_step"), "n_steps")
            .sort("name"))


def _ranks(rows: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    per_step = rank_steps(rows, steps)
    if per_step["rank"].n_unique() < 2:
        return pl.DataFrame(schema=COMPONENT_SCHEMA)
    return (per_step.group_by("rank")
            .agg(pl.col("ms").median().alias("ms_per_step"), pl.len().alias("n_steps"))
            .sort("rank")
            .select(pl.lit("rank").alias("level"), pl.format("rank {}", pl.col("rank")).alias("name"),
                    pl.lit(_EXPOSED).alias("category"), "ms_per_step", pl.lit(None).alias("calls_per_step"),
                    "n_steps"))


def _kernels(kernels: pl.DataFrame) -> pl.DataFrame:
    rank_steps = int(cast(int, kernels.select("rank", "steps").unique()["steps"].sum()))
    if not rank_steps:
        return pl.DataFrame(schema=COMPONENT_SCHEMA)
    return (kernels.group_by("name")
            .agg(pl.col("category").first(), pl.col("calls").sum(), pl.col("total_ms").sum())
            .sort("name")
            .select(pl.lit("kernel").alias("level"), "name", "category",
                    (pl.col("total_ms") / rank_steps).alias("ms_per_step"),
                    (pl.col("calls") / rank_steps).alias("calls_per_step"),
                    pl.lit(int(cast(int, kernels["steps"].max()))).alias("n_steps")))


def _place() -> pl.Expr:
    """A gap's place as one name: 'NAME #CALL' (GAP_START for a gap before the span's first activity)."""
    return (pl.when(pl.col("after").is_null()).then(pl.lit(GAP_START))
            .otherwise(pl.format("{} #{}", pl.col("after"), pl.col("call"))).alias("name"))


def gap_steps(gaps: pl.DataFrame, steady: pl.DataFrame) -> pl.DataFrame:
    """Per steady step and gap place, the gap time there, the mean over the steady ranks of the step (a rank-step
    without one counts 0): columns step, name, ms. Steps without a gap anywhere have no rows."""
    ranks_in_step = steady.group_by("step").agg(pl.len().alias("n_ranks"))
    placed = (gaps.select(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int64), _place(), "gap_ms")
              .join(steady, on=["rank", "step"], how="semi"))
    return (placed.group_by("step", "name").agg(pl.col("gap_ms").sum())
            .join(ranks_in_step, on="step").select("step", "name", (pl.col("gap_ms") / pl.col("n_ranks")).alias("ms")))


def _gaps(gaps: pl.DataFrame, steady: pl.DataFrame) -> pl.DataFrame:
    rank_steps = steady.height
    placed = (gaps.select(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int64), _place(), "gap_ms")
              .join(steady, on=["rank", "step"], how="semi"))
    if not rank_steps or placed.height == 0:
        return pl.DataFrame(schema=COMPONENT_SCHEMA)
    per_rank = int(cast(int, steady.group_by("rank").len()["len"].max()))
    return (placed.group_by("name").agg(pl.col("gap_ms").sum(), pl.len().alias("n"))
            .sort("name")
            .select(pl.lit("gap").alias("level"), "name", pl.lit(None).alias("category"),
                    (pl.col("gap_ms") / rank_steps).alias("ms_per_step"), (pl.col("n") / rank_steps).alias("calls_per_step"),
                    pl.lit(per_rank).alias("n_steps")))


def _nvtx(nvtx: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    profiled = (steps.filter(pl.col("step").is_not_null() & pl.col("rank").is_not_null())
                .group_by("rank").agg(pl.col("step").n_unique().alias("steps")))
    rank_steps = int(cast(int, profiled["steps"].sum()))
    if not rank_steps:
        return pl.DataFrame(schema=COMPONENT_SCHEMA)
    ranged = nvtx.join(profiled, on="rank", how="semi").filter(pl.col("count") > 1)
    return (ranged.group_by("range_name")
            .agg(pl.col("count").sum(), pl.col("total_ms").sum())
            .sort("range_name")
            .select(pl.lit("nvtx").alias("level"), pl.col("range_name").alias("name"), pl.lit(None).alias("category"),
                    (pl.col("total_ms") / rank_steps).alias("ms_per_step"),
                    (pl.col("count") / rank_steps).alias("calls_per_step"),
                    pl.lit(int(cast(int, profiled["steps"].max()))).alias("n_steps")))


# ---------------------------------------------------------------------------------------- the store
def computed(store: "Store", receipt_id: str) -> pl.DataFrame:
    """The components of a receipt's newest export computed from its stored anatomy rows: what a receipt stored
    before receipt_components existed reads until `receipts db upgrade` stores them (the same numbers)."""
    sources = store.query("anatomy_sources", {"receipt_id": receipt_id})
    if sources.height == 0:
        return pl.DataFrame(schema=COMPONENT_SCHEMA).drop("rule")
    return _from_store(store, receipt_id, sources["source_sha256"][0]).drop("rule")


def _from_store(store: "Store", receipt_id: str, source_sha256: str) -> pl.DataFrame:
    params = {"receipt_id": receipt_id, "source_sha256": source_sha256}
    return components(store.query("anatomy_rows", params), store.query("anatomy_steps", params),
                      store.query("explain_kernel_totals", params), store.query("anatomy_nvtx", params),
                      store.query("anatomy_gaps", params))


def busy_from_raw(store: "Store", receipt_id: str, source_sha256: str, raw_events_path: str | None,
                  rules: "CategoryRules") -> pl.DataFrame | None:
    """The busy-category rows (level 'category': gemm, attention, ...) of one export under other category rules,
    from its raw events (analysis/recategorise.py busy_rows); None when it kept none, or they are gone."""
    from pathlib import Path

    from receipts.analysis.recategorise import busy_rows

    if raw_events_path is None or not Path(raw_events_path).is_file():
        return None
    raw = pl.read_parquet(raw_events_path, columns=["rank", "step", "category", "name", "start_ns", "end_ns"])
    steps = store.query("anatomy_steps", {"receipt_id": receipt_id, "source_sha256": source_sha256})
    made = components(busy_rows(raw, rules), steps, None, None)
    return made.filter((pl.col("level") == "category") & ~pl.col("name").is_in(PERIOD_PARTS))


def recompute(store: "Store", *, batch: int = 50) -> int:
    """Give every attached export with steady steps component rows made under this build's RULE, from its stored
    anatomy rows, by the function the ingest uses; `receipts db upgrade` calls it. A receipt's rows are replaced
    whole (every export of it recomputed). Returns how many exports lacked rows under the rule."""
    stale = store.query_rows("explain_stale_components", {"rule": RULE})
    receipts = list(dict.fromkeys(r["receipt_id"] for r in stale))
    for start in range(0, len(receipts), batch):
        out: dict[str, list[dict]] = {}
        for rid in receipts[start:start + batch]:
            out[rid] = []
            for sha in store.query("anatomy_sources", {"receipt_id": rid})["source_sha256"].to_list():
                out[rid] += stored_rows(rid, sha, _from_store(store, rid, sha))
        store.replace_components(out)
    return len(stale)


def stored_rows(receipt_id: str, source_sha256: str, frame: pl.DataFrame) -> list[dict]:
    """receipt_components rows of one export: its component frame with the keys."""
    return [{"receipt_id": receipt_id, "source_sha256": source_sha256, **row} for row in frame.to_dicts()]
