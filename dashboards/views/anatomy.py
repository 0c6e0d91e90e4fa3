"""Anatomy: where step time went, per step and rank by category, per NVTX range, warm-up vs steady."""

from __future__ import annotations

import polars as pl
import streamlit as st

from receipts.dashboards import charts
from receipts.dashboards.views._data import Data, seed_from_url

TOP_NVTX = 30


def render(data: Data) -> None:
    st.header("Anatomy")
    have = data.query("dash_anatomy_receipts")
    if have.height == 0:
        st.info("No receipt has a profiler export attached (`receipts ingest run.sqlite --attach RECEIPT`).")
        return
    ids = have["id"].to_list()
    labels = {r["id"]: f"{r['run_name']} · {r['id'][:12]} · {r['lane']}" for r in have.iter_rows(named=True)}
    stale = seed_from_url("anatomy_id", "id", ids)
    if stale is not None:
        st.error(f"No receipt {stale} with a profiler export in this store (the link is stale, or the receipt has "
                 "no export attached). Pick one below.")
    receipt_id = st.selectbox("receipt with a profiler export", ids, format_func=labels.__getitem__, key="anatomy_id")
    if stale is not None:
        return
    st.query_params["id"] = receipt_id
    rep = data.anatomy(receipt_id)
    src = rep.source
    st.caption(f"{src.format} export {src.path} (schema {src.schema_version}) · steps: {src.step_marker} · "
               f"attribution: {src.attribution} · unattributed activities: {src.unattributed}")
    for w in src.warnings:
        st.warning(w)
    params = {"receipt_id": receipt_id, "source_sha256": src.sha256}
    rows = data.query("anatomy_rows", **params)
    window = pl.DataFrame(rep.window)
    st.caption("Stacked charts show parts that sum to the step's GPU span: compute only, communication hidden "
               "under compute, exposed communication, memory work under neither, idle. The busy time of each kernel "
               "category is shown apart and not stacked: categories overlap (communication runs under compute).")

    st.markdown("#### Per step and rank")
    st.altair_chart(charts.anatomy_by_step(rows))
    st.markdown("#### Per rank, steady state")
    steady = window.filter(pl.col("phase").is_in(["steady", "window"]))
    st.altair_chart(charts.anatomy_by_rank(steady))
    st.markdown("#### Busy time by category, steady state (overlapping, not additive)")
    st.altair_chart(charts.anatomy_categories(steady))
    st.markdown("#### Warm-up vs steady")
    if not window.filter(pl.col("phase") == "warmup").height:
        st.caption("This export has no warm-up steps marked (no step markers, or the capture began after warm-up): "
                   "only one phase to show.")
    st.altair_chart(charts.anatomy_phases(window))
    st.markdown("#### Per NVTX range")
    families = data.query("dash_nvtx_families", **params)
    if families.height == 0:
        st.caption("No NVTX ranges in this export.")
    else:
        top = families.group_by("family").agg(pl.col("total_ms").sum()).sort("total_ms", descending=True).head(TOP_NVTX)
        st.altair_chart(charts.nvtx_families(families.filter(pl.col("family").is_in(top["family"].implode()))))
    steps = data.query("anatomy_steps", **params)
    with st.expander("per-step table (wall, GPU busy, communication, overlap)"):
        st.dataframe(steps, hide_index=True, width="stretch")
