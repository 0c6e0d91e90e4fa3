"""Lane history: a lane's steady-state step time and peak memory over time, regressions marked."""

from __future__ import annotations

import polars as pl
import streamlit as st

from receipts.analysis.lanes import REGRESSION_FACTOR, lane_summary
from receipts.dashboards import charts
from receipts.dashboards.views._data import Data


def render(data: Data) -> None:
    from receipts.analysis.compare import MIN_EFFECT  # scipy: only when this view is drawn

    st.header("Lane history")
    everything = data.query("dash_lanes", hosts=None, presets=None, regimes=None, tag=None, since=None, until=None,
                            search=None)
    lanes = lane_summary(everything).filter(~pl.col("rumor"))
    if lanes.height == 0:
        st.info("No complete lane yet: rumors (incomplete identity) have no history.")
        return
    keys = list(zip(lanes["host_lineage"], lanes["preset_family"], lanes["launch_regime"]))
    q = st.query_params
    wanted = (q.get("host"), q.get("preset"), q.get("regime"))
    if st.session_state.get("history_lane") not in keys:
        st.session_state["history_lane"] = wanted if wanted in keys else keys[0]
    lane = st.selectbox("lane (host lineage · preset family · launch regime)", keys, format_func=" · ".join,
                        key="history_lane")
    q["host"], q["preset"], q["regime"] = lane
    by = st.radio("x axis", ["run_at", "git_rev"], horizontal=True, key="history_x",
                  format_func={"run_at": "run date", "git_rev": "source revision"}.__getitem__)
    history = data.lane_history(*lane)
    regressions = history.filter(pl.col("regression"))
    c = st.columns(3)
    c[0].metric("receipts in lane", f"{history.height:,}")
    c[1].metric("regressions", f"{regressions.height:,}")
    last = history.filter(pl.col("median_step_ms").is_not_null()).tail(1)
    c[2].metric("latest median step (ms)", f"{last['median_step_ms'][0]:,.2f}" if last.height else "—")
    st.caption(f"A regression: steady-state median step time more than {REGRESSION_FACTOR:.2f}× the lane's previous "
               f"receipt AND a significant comparison (bootstrap CI of the ratio wholly above 1, effect ≥ "
               f"{MIN_EFFECT:.0%}). A jump without significance is not marked.")
    st.altair_chart(charts.history_step_time(history, by))
    st.altair_chart(charts.history_memory(history, by))
    if regressions.height:
        st.markdown("#### Regressions")
        st.dataframe(regressions.select("run_name", "receipt_id", "prev_id", "run_at", "git_rev", "median_step_ms",
                                        "step_ratio", "ratio_ci_low", "ratio_ci_high", "verdict"),
                     hide_index=True, width="stretch")
