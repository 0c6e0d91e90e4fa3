"""Stragglers: which rank holds the step back (analysis/stragglers.py, stored with each multi-rank export)."""

from __future__ import annotations

import polars as pl
import streamlit as st

from receipts.analysis.straggler_reports import stored_reports
from receipts.dashboards import charts
from receipts.dashboards.views._data import Data, seed_from_url
from receipts.dashboards.views._names import readable


def render(data: Data) -> None:
    st.header("Stragglers")
    have = data.query("dash_anatomy_receipts")
    reports: dict[str, dict] = {}
    for rid in have["id"].to_list():
        # the newest multi-rank export's report, with its own path (not the path of whichever export came first)
        found = stored_reports(data.query("stragglers", receipt_id=rid).iter_rows(named=True))
        if found:
            reports[rid] = found[0]
    if not reports:
        st.info("No receipt has a multi-rank profiler export attached (an nsys export of several ranks, or a folder "
                "of per-rank Kineto traces).")
        return
    labels = {r["id"]: f"{r['run_name']} · {r['id'][:12]} · {r['lane']}" for r in have.iter_rows(named=True)}
    ids = list(reports)
    seed_from_url("stragglers_id", "id", ids)
    rid = st.selectbox("receipt with a multi-rank export", ids, format_func=labels.__getitem__, key="stragglers_id")
    st.query_params["id"] = rid
    rep = reports[rid]
    st.caption(f"{rep['source']} · {rep['n_ranks']} ranks · {rep['n_collectives']} matched collectives over "
               f"{rep['n_steps']} steady steps · matching: {rep['matching']}")
    if not rep["clock_ok"]:
        st.warning(rep["note"])
    named = rep["stragglers"]
    cols = st.columns(3)
    if named:
        s = max(named, key=lambda x: x["impact_ms_per_step"])
        cols[0].metric("straggler", f"rank {s['rank']}")
        # No delta: a metric's delta draws an arrow up, which reads as good news; this is time lost.
        cols[1].metric("what-if impact", f"{s['impact_ms_per_step']:.2f} ms/step",
                       help="how much shorter the step would be had this rank arrived with the median rank")
        cols[2].metric("cause", s["cause"])
        st.caption(f"Had rank {s['rank']} arrived with the median rank, the step would be "
                   f"{s['impact_ms_per_step']:.2f} ms ({s['impact_pct']:.1f}% of the step) shorter. "
                   f"{s['cause_detail']}. {rep['note']}.")
    else:
        cols[0].metric("straggler", "none")
        st.caption(f"No rank clears the bar: {rep['note']}.")
    per_step = pl.DataFrame(rep["per_step"])
    if per_step.height:
        st.markdown("#### Wait per rank and step (ms its collectives ran before the last rank arrived)")
        st.altair_chart(charts.rank_wait_heatmap(per_step))
    st.markdown("#### Per rank")
    # as the CLI prints it: the rank first, how often it arrived last as a percentage of the matched collectives
    ranks = pl.DataFrame(rep["ranks"])
    ranks = ranks.select("rank", (pl.col("last_arrival_share") * 100).alias("arrived_last_pct"),
                         pl.exclude("rank", "last_arrival_share"))
    st.dataframe(readable(ranks), hide_index=True, width="stretch",
                 column_config={"arrived last (%)": st.column_config.NumberColumn(format="%.0f%%")})
    st.markdown("#### Per collective kind")
    st.dataframe(readable(pl.DataFrame(rep["per_kind"])), hide_index=True, width="stretch")
