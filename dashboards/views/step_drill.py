"""The anatomy view's drill-down: from a slow step to its parts and kernels, beside the rank's typical steady
step (analysis/drilldown.py computes it; this draws it). The step and rank live in the URL (?step=, ?rank=)."""

from __future__ import annotations

import polars as pl
import streamlit as st

from receipts.analysis.drilldown import SLOWEST
from receipts.dashboards import charts
from receipts.dashboards.views._data import Data, seed_from_url
from receipts.dashboards.views._names import blank_unknown, number_config
from receipts.schema.model import STEP_KERNELS_KEPT


def _step_label(row: dict, slowest: int | None) -> str:
    kind = "warm-up" if row["warmup"] else ("slowest steady" if row["step"] == slowest else "steady")
    return f"step {row['step']} · {row['wall_ms']:,.1f} ms · {kind}"


def render(data: Data, receipt_id: str, source_sha256: str) -> None:
    st.markdown("#### Drill into a step")
    order = data.slowest_steps(receipt_id, source_sha256, n=100_000)
    if not order:
        st.caption("This export has no step markers: one window, no step to open.")
        return
    by_step = {r["step"]: r for r in order}
    steps = list(by_step)  # slowest steady first, warm-up steps last
    slowest = next((r["step"] for r in order if not r["warmup"]), None)
    if st.query_params.get("step") == SLOWEST:  # as `receipts anatomy RUN --step slowest` takes it
        st.query_params["step"] = str(slowest if slowest is not None else steps[0])
    stale = seed_from_url("drill_step", "step", [str(s) for s in steps])
    if stale is not None:
        st.warning(f"Step {stale} is not in this export (its steps: {min(steps)}-{max(steps)}): showing the "
                   "slowest steady step.")
    left, right = st.columns([3, 1])
    chosen = int(left.selectbox("step (slowest first; the wall time is the slowest rank's step marker)",
                                [str(s) for s in steps], key="drill_step",
                                format_func=lambda s: _step_label(by_step[int(s)], slowest)))
    st.query_params["step"] = str(chosen)
    first = data.drilldown(receipt_id, source_sha256, chosen, None)
    rank = first.rank
    if len(first.ranks) > 1:
        labels = [str(r) for r in first.ranks]
        if st.session_state.get("drill_rank_of") != chosen:  # a new step opens on its own slowest rank
            linked = st.query_params.get("rank") if "drill_rank_of" not in st.session_state else None
            st.session_state["drill_rank"] = linked if linked in labels else str(first.rank)
            st.session_state["drill_rank_of"] = chosen
        rank = int(right.selectbox("rank", labels, key="drill_rank",
                                   help=f"Default: the step's slowest rank ({first.rank})."))
        st.query_params["rank"] = str(rank)
    d = first if rank == first.rank else data.drilldown(receipt_id, source_sha256, chosen, rank)
    cols = st.columns(3)
    cols[0].metric("wall (step marker)", f"{d.wall_ms:,.3f} ms" if d.wall_ms is not None else "unknown",
                   None if d.delta_ms is None else f"{d.delta_ms:+,.3f} ms", delta_color="inverse")
    typical_span = d.typical_span_ms
    cols[1].metric("GPU span", f"{d.span_ms:,.3f} ms",
                   None if typical_span is None else f"{d.span_ms - typical_span:+,.3f} ms", delta_color="inverse")
    cols[2].metric("typical steady step", "—" if d.typical_wall_ms is None else f"{d.typical_wall_ms:,.3f} ms",
                   help=f"The median of rank {d.rank}'s {d.steady_steps} other steady steps.")
    st.altair_chart(charts.step_vs_typical(d.categories, d.step))
    busy = pl.DataFrame([c for c in d.categories if not c["part"]],
                        schema={"category": pl.Utf8, "part": pl.Boolean, "ms": pl.Float64, "typical_ms": pl.Float64,
                                "delta_ms": pl.Float64}).drop("part")
    number = {k: st.column_config.NumberColumn(t, format="%+.3f" if k == "delta_ms" else "%.3f")
              for k, t in (("ms", "this step (ms)"), ("typical_ms", "typical (ms)"), ("delta_ms", "Δ ms"))}
    busy = blank_unknown(busy, {"delta_ms": "%+.3f"})
    with st.expander("busy time by kernel category (overlapping, not additive)"):
        st.dataframe(busy, hide_index=True, width="stretch", column_config=number_config(busy, number))
    if not d.kernels_stored:
        st.info("No per-step kernels stored for this export (attached before schema 12): attach it again "
                f"(`receipts ingest EXPORT --attach {receipt_id[:12]}`) to see this step's kernels.")
        return
    kernels = blank_unknown(pl.DataFrame(d.kernels).select("delta_ms", "ms", "typical_ms", "calls", "typical_calls",
                                                           "category", "name"),
                            {"delta_ms": "%+.3f", "typical_calls": "%.1f"})
    st.markdown(f"**Kernels of step {d.step} on rank {d.rank}**, largest excess over the typical step first")
    st.dataframe(kernels, hide_index=True, width="stretch",
                 column_config=number_config(kernels, {
                     **number, "calls": st.column_config.NumberColumn("calls"),
                     "typical_calls": st.column_config.NumberColumn("typical calls", format="%.1f"),
                     "name": st.column_config.TextColumn("kernel", width="large")}))
    st.caption(f"Sums of kernel durations in the step (as `nsys stats` counts them). The step's {STEP_KERNELS_KEPT} "
               "longest kernels are kept and the rest summed in one row (which kernels fall in it varies from step "
               "to step); typical = the median of the rank's other steady steps.")
