"""Compare: two receipts. Refused when not the same lane (the refusal is the page), else the verdict
(faster / slower / no change / inconclusive) against the lane's noise floor, the ratio with its interval,
each run's own interval, and drift."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl
import streamlit as st
from receipts.dashboards import charts
from receipts.dashboards.views import explain as explain_view
from receipts.dashboards.views._data import Data
from receipts.dashboards.views.receipt import ended_early_text, pick_receipt

if TYPE_CHECKING:
    from receipts.analysis.compare import Comparison


def _fmt(v) -> str:
    return "—" if v is None else str(v)


def _refusal(c: "Comparison") -> None:
    st.title("Refused: not comparable")
    st.error(c.reason)
    st.markdown(f"**A** {c.a.run_name} ({c.a.id}) and **B** {c.b.run_name} ({c.b.id}) do not share a lane. "
                "A comparison needs both receipts to carry the full identity and the canonical triples to match.")
    st.markdown("#### Differing fields")
    st.dataframe(pl.DataFrame({"field": [d.field for d in c.differences], "A": [_fmt(d.a) for d in c.differences],
                               "B": [_fmt(d.b) for d in c.differences], "why": [d.note for d in c.differences]},
                              schema={"field": pl.Utf8, "A": pl.Utf8, "B": pl.Utf8, "why": pl.Utf8}),
                 hide_index=True, width="stretch")
    st.markdown("#### Alias resolution that led here")
    for note in c.resolution or ["(no notes: values used as claimed)"]:
        st.markdown(f"- {note}")


def _summary_table(c: "Comparison") -> pl.DataFrame:
    def col(s):
        st_ = s.step_ms
        return [_fmt(st_ and round(st_.median, 3)), _fmt(st_ and round(st_.p10, 3)), _fmt(st_ and round(st_.p90, 3)),
                _fmt(s.interval and f"[{s.interval.ci_low:.3f}, {s.interval.ci_high:.3f}]"),
                _fmt(s.interval and s.interval.block_length),
                _fmt(st_ and f"{st_.cv:.2%}"), _fmt(st_ and st_.n), f"{s.first_step}–{s.last_step}",
                f"{s.warmup_steps} ({s.window_rule})"]
    return pl.DataFrame({"": ["median step (ms)", "p10 (ms)", "p90 (ms)", "median's 95% interval (ms)",
                              "bootstrap block (steps)", "step noise (cv)", "steady steps",
                              "window (steps)", "warm-up excluded"], f"A {c.a.run_name}": col(c.a),
                         f"B {c.b.run_name}": col(c.b)})


def _drift(c: "Comparison") -> None:
    st.markdown("#### Drift")
    cols = st.columns(3)
    for col, kind in zip(cols, ("recipe", "runtime", "infrastructure")):
        diffs = (c.drift or {}).get(kind, ())
        col.markdown(f"**{kind}** ({len(diffs)})")
        if diffs:
            col.dataframe(pl.DataFrame({"field": [d.field for d in diffs], "A": [_fmt(d.a) for d in diffs],
                                        "B": [_fmt(d.b) for d in diffs]}), hide_index=True, width="stretch")
        else:
            col.caption("none")


def _more_of_the_lane(data: Data, a: str, b: str) -> dict[str, str]:
    """More runs of A's lane to overlay on A and B (their ids to names), the choice kept in the URL (?more=id,id)
    so the page links; at most charts.MAX_OVERLAID, each its own colour."""
    rows = data.lanes().select("id", "run_name", "lane", "rumor")
    lane = rows.filter(pl.col("id") == a)["lane"]
    rows = rows.filter(~pl.col("rumor"))
    others = rows.filter((pl.col("lane") == lane[0]) & ~pl.col("id").is_in([a, b])) if lane.len() else rows.clear()
    if others.height == 0:
        return {}
    names = dict(zip(others["id"].to_list(), others["run_name"].to_list()))
    linked = [i for i in st.query_params.get("more", "").split(",") if i in names]
    if "compare_more" not in st.session_state:
        st.session_state["compare_more"] = linked[:charts.MAX_OVERLAID]
    chosen = st.multiselect(f"overlay more runs of this lane ({others.height} more)", list(names),
                            format_func=lambda i: f"{names[i]} · {i[:12]}", key="compare_more",
                            max_selections=charts.MAX_OVERLAID)
    st.query_params["more"] = ",".join(chosen)
    return {i: names[i] for i in chosen}


def _overlay(data: Data, a: str, b: str, c: "Comparison") -> None:
    st.markdown("#### Step times, overlaid")
    more = _more_of_the_lane(data, a, b)
    series = data.query("dash_compare_series", a_id=a, b_id=b, more=list(more))
    if series.height == 0:
        st.caption("Neither receipt has steady steps stored: nothing to overlay.")
        return
    st.altair_chart(charts.compare_series(series, c.a.run_name, c.b.run_name, more))
    st.altair_chart(charts.compare_distributions(series, c.a.run_name, c.b.run_name, more=more))
    st.caption("The verdict is about runs, not steps: these show each run's own noise (the dashed line is its "
               "median); the interval above adds the lane's run-to-run noise. More runs of the lane show that "
               "noise directly: where their medians scatter.")


def render(data: Data) -> None:
    st.header("Compare")
    left, right = st.columns(2)
    with left:
        a = pick_receipt(data, "A (baseline)", "a", 0)
    with right:
        any_lane = st.checkbox("any lane (see the refusal)", key="compare_any_lane",
                               value=st.query_params.get("any_lane") == "1")
        st.query_params["any_lane"] = "1" if any_lane else "0"
        b = pick_receipt(data, "B (candidate)", "b", 1 if any_lane else 0, lane_of=None if any_lane or a is None else a)
    if a is None or b is None:
        return
    if a == b:
        st.warning("A and B are the same receipt: pick another run for B (a run compared with itself says nothing).")
        return
    c = data.compare(a, b)
    for label, side in (("A", c.a), ("B", c.b)):
        if side.ended_early:
            st.warning(f"{label}: " + ended_early_text(side.run_name, side.ended_early), icon="⚠️")
    if not c.comparable:
        _refusal(c)
        return
    verdict = c.verdict or "inconclusive"
    why = c.detail.why if c.detail else c.reason
    show = {"faster": st.success, "slower": st.error, "no change": st.info}.get(verdict, st.warning)
    show(f"Same lane. Verdict: **{verdict}** — {why}")
    if c.noise_floor is not None:
        f = c.noise_floor
        cols = st.columns(3)
        cols[0].metric("noise floor", f"{f.floor_pct:.2f}%",
                       help="relative sigma of one run's median, from runs of A's configuration (never B)")
        cols[1].metric("floor from", (f.basis or f"{f.n_runs} runs") if f.source == "lane" else "default (too few runs)")
        cols[2].metric("changes resolvable beyond", f"{c.detail.resolvable_pct:.2f}%" if c.detail else "—")
        st.caption(f"Noise floor: {f.note}.")
    if c.ratio is not None:
        st.altair_chart(charts.ratio_ci(c.ratio.value, c.ratio.ci_low, c.ratio.ci_high, c.ratio.confidence))
        st.caption(f"Interval: {c.ratio.method}.")
    if c.tokens_ratio is not None:
        st.caption(f"tokens/s B/A {c.tokens_ratio.value:.4f} [{c.tokens_ratio.ci_low:.4f}, {c.tokens_ratio.ci_high:.4f}]")
    st.dataframe(_summary_table(c), hide_index=True)
    _overlay(data, a, b, c)
    st.markdown("#### Anatomy, side by side")
    diff = data.query("dash_anatomy_diff", a_id=a, b_id=b)
    if diff.height == 0:
        st.caption("Neither receipt has a profiler export attached.")
    else:
        missing = [n for n, col in (("A", "a_ms_per_step"), ("B", "b_ms_per_step")) if diff[col].is_null().all()]
        if missing:
            st.caption(f"{' and '.join(missing)} has no profiler export attached: no difference to draw.")
        else:
            rules = data.query("explain_profiled", ids=[a, b])["category_rules_json"].drop_nulls()
            if rules.n_unique() > 1:
                st.warning("A and B were categorised under different kernel-category rules: a category below may "
                           "differ by the rules, not the run. The explanation below compares them under A's rules.")
            st.altair_chart(charts.anatomy_side_by_side(diff, c.a.run_name, c.b.run_name))
    explain_view.render(data, a, b)
    _drift(c)
