"""Our Kineto anatomy over the window HolisticTraceAnalysis analyses, in HTA's units: what the benchmark
prints beside HTA's numbers. The same comparison as tests/test_kineto.py's golden tests (its module
docstring gives the definitions): HTA keeps the activities launched before the LAST ProfilerStep when
there are two or more, so our steps except the last are summed (with fewer, everything, the step-less
window included); HTA's kernel_time is a span = our busy + idle; its busy is the union of GPU work =
our summed gpu_ms; its overlap |comm ∩ compute| / |comm| = our per-step overlap_pct weighted by comm_ms."""

from __future__ import annotations

import polars as pl


def _hta_steps(anatomy, rank: int) -> pl.DataFrame:
    st = anatomy.steps.filter(pl.col("rank") == rank).sort("start_ns")
    return st.head(st.height - 1) if st["step"].drop_nulls().len() >= 2 else st


def hta_comparable(anatomy, rank: int) -> dict:
    """Our numbers over the window HTA analyses, in microseconds."""
    st = _hta_steps(anatomy, rank)
    rows = anatomy.rows.join(st.select("rank", "step"), on=["rank", "step"], nulls_equal=True)
    idle_us = rows.filter(pl.col("category").is_in(["idle", "idle_long"]))["time_ms"].sum() * 1e3
    busy_us = st["gpu_ms"].fill_null(0).sum() * 1e3
    comm = st["comm_ms"].fill_null(0)
    overlap = (st["overlap_pct"].fill_null(0) * comm).sum() / comm.sum() if comm.sum() > 0 else None
    return {"busy_us": busy_us, "idle_us": idle_us, "kernel_time_us": busy_us + idle_us, "overlap_pct": overlap}
