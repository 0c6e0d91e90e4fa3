"""The anatomy by interval sets: the reference tests/test_intervals_sorted.py holds intervals.anatomy_rows to.

Each number is computed the slow, obvious way from intervals.union_ns and intervals.intersection_ns: every set
(all work, communication, compute, each category, the work clipped to its span) sorted and merged on its own,
the overlap of two sets by an edge sweep. It was receipts' anatomy until the sorted passes replaced it (about
3x faster on real Kineto traces); it is kept here, independent of them, so they can be checked against it."""

from __future__ import annotations

import polars as pl

from receipts.ingest.intervals import STEP_NS, anatomy_from_ns, intersection_ns, islands, union_ns
from receipts.schema.categories import (COMM_CATEGORIES, COMPUTE_CATEGORIES, KERNEL_CATEGORIES, LONG_GAP_NS,
                                       NOT_KERNELS)

KERNEL_ONLY = tuple(c for c in KERNEL_CATEGORIES if c not in NOT_KERNELS)

_KEYS = ["rank", "step"]


def anatomy_by_sets(events: pl.DataFrame, spans: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """intervals.anatomy_rows' result, each interval set merged on its own: time by category (union), idle
    inside the span, exposed comm per (rank, step).

    Returns (rows[rank, step, category, time_ms], per_step[rank, step, gpu_ms, kernels, comm_ms, overlap_pct]).
    """
    ev = events.with_columns(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int64))
    by_cat = union_ns(ev, [*_KEYS, "category"])
    busy = union_ns(ev, _KEYS)
    # Kernels only: memcpy / memset are not kernels, and a CUDA-graph replay holds an unknown number of them.
    counts = (ev.filter(pl.col("category").is_in(KERNEL_ONLY)).group_by(_KEYS)
              .agg(pl.len().cast(pl.Int64).alias("kernels")))
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
    c_in = clipped.filter(pl.col("category").is_in(COMPUTE_CATEGORIES))
    m_in = clipped.filter(pl.col("category").is_in(COMM_CATEGORIES))
    m_union = union_ns(m_in, _KEYS).rename({"union_ns": "m_ns"})
    cm = intersection_ns(m_in, c_in, _KEYS).rename({"both_ns": "cm_ns"})
    totals = sp.select(*_KEYS, "span_start_ns", "span_end_ns")
    for part in (busy, busy_in_span, counts, comm_union, hidden,
                 union_ns(c_in, _KEYS).rename({"union_ns": "c_ns"}), m_union, cm, _long_idle(clipped, sp)):
        totals = totals.join(part, on=_KEYS, how="left", nulls_equal=True)
    return anatomy_from_ns(by_cat, totals.with_columns(pl.col(*STEP_NS).fill_null(0)))


def _long_idle(clipped: pl.DataFrame, spans: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, step), the span's idle held in gaps of at least LONG_GAP_NS: the complement of the work's islands
    inside the span, gap by gap (a span without work is one gap)."""
    isl = islands(clipped, _KEYS)
    edges = (spans.select(*_KEYS, pl.col("span_start_ns").alias("start_ns"), pl.col("span_start_ns").alias("end_ns"))
             .vstack(spans.select(*_KEYS, pl.col("span_end_ns").alias("start_ns"), pl.col("span_end_ns").alias("end_ns")))
             .vstack(isl.select(*_KEYS, "start_ns", "end_ns").cast({"rank": pl.Int32, "step": pl.Int64})))
    gaps = (edges.sort(*_KEYS, "start_ns", nulls_last=True)
            .with_columns((pl.col("start_ns") - pl.col("end_ns").cum_max().shift(1).over(_KEYS)).alias("gap")))
    return (gaps.filter(pl.col("gap") >= LONG_GAP_NS).group_by(_KEYS).agg(pl.col("gap").sum().alias("long_idle_ns")))
