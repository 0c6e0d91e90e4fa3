"""Lane history: a lane's steady-state step time and peak memory over time, with the lane's noise floor and
the change points of analysis.history (E-divisive means with a t-test confirmation)."""

from __future__ import annotations

from dataclasses import astuple

import polars as pl
import streamlit as st

from receipts.analysis.lanes import lane_summary
from receipts.schema.lane import FIELDS, LABEL, Lane, display
from receipts.dashboards import charts
from receipts.dashboards.views._data import Data
from receipts.dashboards.views._names import readable


def render(data: Data) -> None:
    st.header("Lane history")
    everything = data.lanes()
    lanes = lane_summary(everything).filter(~pl.col("rumor"))
    if lanes.height == 0:
        st.info("No complete lane yet: rumors (incomplete identity) have no history.")
        return
    keys = list(zip(*(lanes[f] for f in FIELDS)))
    q = st.query_params
    wanted = astuple(Lane.from_url(q))
    if st.session_state.get("history_lane") not in keys:
        st.session_state["history_lane"] = wanted if wanted in keys else keys[0]
    lane = st.selectbox(f"lane ({display(LABEL[f] for f in FIELDS)})", keys, format_func=display,
                        key="history_lane")
    for param, value in Lane(*lane).url_params().items():
        if value is not None:  # a lane in the list is complete
            q[param] = value
    history, floor = data.lane_history(*lane)
    from_ingest = bool((history["run_date_source"] == "ingest").any())
    # Runs without a date of their own are dated by their ingest, a batch's within a second: order spaces them.
    by = st.radio("x axis", ["run_order", "run_at", "git_rev"], index=0 if from_ingest else 1, horizontal=True,
                  key="history_x", format_func={"run_order": "run order", "run_at": "run date",
                                                "git_rev": "source revision"}.__getitem__)
    changes = history.filter(pl.col("change_point"))
    c = st.columns(4)
    c[0].metric("receipts in lane", f"{history.height:,}")
    c[1].metric("change points", f"{changes.height:,}")
    c[2].metric("noise floor", f"{floor.floor_pct:.2f}%",
                help="run-to-run sigma of one run's median: measured from the lane's runs, or the default")
    last = history.filter(pl.col("median_step_ms").is_not_null()).tail(1)
    c[3].metric("latest median step (ms)", f"{last['median_step_ms'][0]:,.2f}" if last.height else "—")
    st.caption(f"Noise floor ({floor.source}): {floor.note}. A change point: the series of run medians splits there "
               "(E-divisive means) and a t-test between the neighbouring segments gives p < 0.001 with a change of at "
               "least 1% (Apache Otava's method). z: a run's distance from the lane's median in noise floors.")
    if from_ingest:
        st.caption("Run order: runs that gave no start time are placed by when they were ingested (a batch in the "
                   "order it was given), not by when they ran.")
    st.altair_chart(charts.history_step_time(history, by))
    st.altair_chart(charts.history_memory(history, by))
    if changes.height:
        st.markdown("#### Change points")
        st.dataframe(readable(changes.select("run_name", "receipt_id", "run_at", "git_rev", "median_step_ms",
                                             "change_pct", "change_pvalue", "z")),
                     hide_index=True, width="stretch")
