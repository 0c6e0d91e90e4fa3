"""The compare view's 'why B differs' section: analysis/explain_run.py's explanation, drawn as each component's
delta with its interval (the component's own noise band), changed ones first, and the same numbers as a table.

Against the lane's tagged baseline when the URL carries `against=tag:T` (the link `receipts check --markdown`
and `receipts explain` print), else the pairwise explanation of B against A (one run each side)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import altair as alt
import polars as pl
import streamlit as st

from receipts.dashboards import charts
from receipts.dashboards.views._data import Data

if TYPE_CHECKING:
    from receipts.analysis.explain import ComponentDelta
    from receipts.analysis.explain_run import ExplainResult

TOP = 15  # components drawn, the largest changed and inconclusive ones
_VERDICT_COLORS = alt.Scale(domain=["changed", "inconclusive", "no change"], range=["#e45756", "#f2cf5b", "#bab0ac"])


def frame(r: "ExplainResult") -> pl.DataFrame:
    """One row per component: level, name, the sides' ms per step, the delta with its interval, share, verdict."""
    e = r.explanation
    assert e is not None
    return pl.DataFrame(
        [{"level": c.level, "component": c.short_name, "baseline_ms": c.baseline_ms_per_step,
          "candidate_ms": c.candidate_ms_per_step, "delta_ms": c.delta_ms_per_step, "low_ms": c.ci_low_ms,
          "high_ms": c.ci_high_ms, "noise_ms": c.noise_ms, "share_pct": None if c.share is None else 100 * c.share,
          "verdict": c.verdict, "evidence": c.evidence, "presence": c.presence or "",
          # a gap's place has no calls: its share of steps with a gap there is in the component's evidence
          "calls_delta": None if c.level == "gap" else c.calls_delta_per_step, "ms_per_added_call": c.ms_per_added_call,
          "calls_by_shape": _by_shape(c)}
         for c in e.components],
        schema={"level": pl.Utf8, "component": pl.Utf8, "baseline_ms": pl.Float64, "candidate_ms": pl.Float64,
                "delta_ms": pl.Float64, "low_ms": pl.Float64, "high_ms": pl.Float64, "noise_ms": pl.Float64,
                "share_pct": pl.Float64, "verdict": pl.Utf8, "evidence": pl.Utf8, "presence": pl.Utf8,
                "calls_delta": pl.Float64, "ms_per_added_call": pl.Float64, "calls_by_shape": pl.Utf8})


def _by_shape(c: "ComponentDelta") -> str:
    """The calls added (removed) by launch shape with their price each, e.g. '+16 of grid (2,66,1) block (384,1,1)
    at 0.175 ms'; empty when the calls kept their shapes or none were recorded."""
    return "; ".join(f"{g.calls_delta_per_step:+g} of {g.shape or 'no recorded shape'} at {g.ms_per_call:.3f} ms"
                     for g in c.shapes if g.ms_per_call is not None)


def chart(rows: pl.DataFrame) -> alt.LayerChart | alt.FacetChart:
    """Horizontal bars of the deltas (ms per step), each with its interval as an error bar, against zero."""
    shown = rows.with_columns((pl.col("level") + " · " + pl.col("component").str.slice(0, 60)).alias("label"))
    order = shown["label"].to_list()
    y = alt.Y("label:N", title=None, sort=order, axis=alt.Axis(labelLimit=charts.LABEL_LIMIT))
    bars = alt.Chart(shown).mark_bar().encode(
        x=alt.X("delta_ms:Q", title="change, ms per step (B - A), with its interval"), y=y,
        color=alt.Color("verdict:N", scale=_VERDICT_COLORS, title="verdict"),
        tooltip=["level", "component", "baseline_ms", "candidate_ms", "delta_ms", "low_ms", "high_ms", "noise_ms",
                 "verdict", "evidence", "presence", "calls_delta"])
    band = alt.Chart(shown).mark_errorbar(thickness=1.5, color="black").encode(x="low_ms:Q", x2="high_ms:Q", y=y)
    zero = alt.Chart(pl.DataFrame({"zero": [0.0]})).mark_rule(color="grey").encode(x="zero:Q")
    return alt.layer(bars, band, zero).properties(height=alt.Step(22), title="why B differs: components, largest first")


def render(data: Data, a: str, b: str) -> None:
    against = st.query_params.get("against")
    r = data.explain(a, b, against if against and against.startswith("tag:") else None)
    st.markdown("#### Why B differs")
    if r is None:
        st.caption("Explained when both receipts have a profiler export attached (receipts ingest PROFILE --attach RUN).")
        return
    e = r.explanation
    if e is None:
        st.info(r.refusal)
        return
    st.caption(f"{'Against ' + r.against + ': ' if r.mode == 'lane' else 'Pairwise (one run each side): '}"
               f"{e.noise_note}; Benjamini-Hochberg at {e.fdr:g} over all {e.family} components of every level; a "
               f"component is named from {e.min_effect_ms:.2f} ms per step, a call count that changed in every run "
               f"(evidence: structural) at any size.")
    if r.rules is not None:
        st.warning(f"Kernel-category rules: {r.rules.note(r.names)}"
                   + (" (attach the exports with `receipts ingest --keep-raw` to re-categorise them)."
                      if r.rules.left_out else "."))
    if e.period_note:
        st.info(f"Period: {e.period_note}.")
    rows = frame(r)
    moving = rows.filter(pl.col("verdict") != "no change").head(TOP)
    if moving.height:
        st.altair_chart(chart(moving), width="stretch")
    else:
        st.success("No component moved beyond its own noise.")
    if e.residual_ms is not None:
        st.caption(f"Residual: {e.residual_ms:+.2f} ms per step of the {e.step.delta_ms or 0.0:+.2f} ms change is not "
                   f"explained by the changed parts of the step (the GPU span's parts and the host gap).")
    with st.expander(f"all {rows.height} components"):
        st.dataframe(rows, hide_index=True, width="stretch")
