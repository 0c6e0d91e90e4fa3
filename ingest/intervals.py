"""Interval arithmetic shared by the profiler parsers: busy time is a union, never a sum.

Summing kernel durations over-counts wherever streams overlap (nsys-ai PR #158); exposed
communication is the part of the NCCL union not covered by the compute union on the same device.

Input `events`: one row per GPU activity with columns
    rank (i32), step (i64, null = not attributed to a step), category (str), start_ns, end_ns (i64).
Input `spans`: one row per (rank, step) with span_start_ns, span_end_ns: the window idle is measured
in (the caller says which: the GPU span of the step's own work, or the step marker's window).
"""

from __future__ import annotations

import polars as pl

from receipts.schema.categories import COMM_CATEGORIES, KERNEL_CATEGORIES

COMPUTE_CATEGORIES = tuple(c for c in KERNEL_CATEGORIES if c not in COMM_CATEGORIES)
_KEYS = ["rank", "step"]


def islands(events: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Merge overlapping intervals per key into disjoint islands (start_ns, end_ns)."""
    if events.height == 0:
        return pl.DataFrame(schema={**{k: events.schema[k] for k in keys}, "start_ns": pl.Int64, "end_ns": pl.Int64})
    ordered = events.select(*keys, "start_ns", "end_ns").sort([*keys, "start_ns"])
    prev_end = pl.col("end_ns").cum_max().shift(1).over(keys)
    return (
        ordered.with_columns(((pl.col("start_ns") > prev_end) | prev_end.is_null()).cum_sum().over(keys).alias("_isl"))
        .group_by([*keys, "_isl"])
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .drop("_isl")
    )


def union_ns(events: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Length of the union of intervals per key, as column `union_ns`."""
    return islands(events, keys).group_by(keys).agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("union_ns"))


def intersection_ns(a: pl.DataFrame, b: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Per key, the time covered by both interval sets (each first merged into islands)."""
    def edges(frame: pl.DataFrame, tag: str) -> pl.DataFrame:
        isl = islands(frame, keys)
        return pl.concat([
            isl.select(*keys, pl.col("start_ns").alias("t"), pl.lit(1).alias(tag), pl.lit(0).alias("o" if tag == "a" else "a")),
            isl.select(*keys, pl.col("end_ns").alias("t"), pl.lit(-1).alias(tag), pl.lit(0).alias("o" if tag == "a" else "a")),
        ]).rename({"o": "b"} if tag == "a" else {})
    ea = edges(a, "a").select(*keys, "t", "a", "b")
    eb = edges(b, "b").select(*keys, "t", "a", "b")
    sweep = (
        pl.concat([ea, eb])
        .group_by([*keys, "t"]).agg(pl.col("a").sum(), pl.col("b").sum())
        .sort([*keys, "t"])
        .with_columns(pl.col("a").cum_sum().over(keys).alias("na"), pl.col("b").cum_sum().over(keys).alias("nb"),
                      (pl.col("t").shift(-1).over(keys) - pl.col("t")).alias("dt"))
    )
    return (sweep.filter((pl.col("na") > 0) & (pl.col("nb") > 0) & pl.col("dt").is_not_null())
            .group_by(keys).agg(pl.col("dt").sum().alias("both_ns")))


def anatomy_rows(events: pl.DataFrame, spans: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per (rank, step): time by category (union), idle inside the span, exposed comm.

    Returns (rows[rank, step, category, time_ms], per_step[rank, step, gpu_ms, kernels, comm_ms, overlap_pct]).
    """
    ev = events.with_columns(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int64))
    by_cat = union_ns(ev, [*_KEYS, "category"]).select(*_KEYS, "category", (pl.col("union_ns") / 1e6).alias("time_ms"))
    busy = union_ns(ev, _KEYS)
    counts = ev.group_by(_KEYS).agg(pl.len().cast(pl.Int64).alias("kernels"))
    comm = ev.filter(pl.col("category").is_in(COMM_CATEGORIES))
    compute = ev.filter(pl.col("category").is_in(COMPUTE_CATEGORIES))
    comm_union = union_ns(comm, _KEYS).rename({"union_ns": "comm_ns"})
    hidden = intersection_ns(comm, compute, _KEYS)
    sp = spans.with_columns(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int64))
    # Busy time inside the span only, so idle never goes negative when work spills past the marker.
    clipped = (
        ev.join(sp, on=_KEYS, how="inner", nulls_equal=True)
        .with_columns(pl.max_horizontal("start_ns", "span_start_ns").alias("start_ns"),
                      pl.min_horizontal("end_ns", "span_end_ns").alias("end_ns"))
        .filter(pl.col("end_ns") > pl.col("start_ns"))
    )
    busy_in_span = union_ns(clipped, _KEYS).rename({"union_ns": "busy_in_span_ns"})
    per_step = (
        sp.join(busy, on=_KEYS, how="left", nulls_equal=True)
        .join(busy_in_span, on=_KEYS, how="left", nulls_equal=True)
        .join(counts, on=_KEYS, how="left", nulls_equal=True)
        .join(comm_union, on=_KEYS, how="left", nulls_equal=True)
        .join(hidden, on=_KEYS, how="left", nulls_equal=True)
        .with_columns(pl.col("union_ns", "busy_in_span_ns", "kernels", "comm_ns", "both_ns").fill_null(0))
        .with_columns(
            (pl.col("union_ns") / 1e6).alias("gpu_ms"),
            ((pl.col("span_end_ns") - pl.col("span_start_ns") - pl.col("busy_in_span_ns")).clip(0) / 1e6).alias("idle_ms"),
            (pl.col("comm_ns") / 1e6).alias("comm_ms"),
            ((pl.col("comm_ns") - pl.col("both_ns")) / 1e6).alias("exposed_ms"),
            pl.when(pl.col("comm_ns") > 0).then(100.0 * pl.col("both_ns") / pl.col("comm_ns")).otherwise(None).alias("overlap_pct"),
        )
    )
    derived = pl.concat([
        per_step.select(*_KEYS, pl.lit("idle").alias("category"), pl.col("idle_ms").alias("time_ms")),
        per_step.select(*_KEYS, pl.lit("exposed_comm").alias("category"), pl.col("exposed_ms").alias("time_ms")),
    ])
    rows = pl.concat([by_cat, derived]).sort([*_KEYS, "category"], nulls_last=True)
    return rows, per_step.select(*_KEYS, "gpu_ms", "kernels", "comm_ms", "overlap_pct")
