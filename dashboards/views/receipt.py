"""Receipt: identity with alias resolution, provenance, software, env overlay, topology, steps, memory."""

from __future__ import annotations

import polars as pl
import streamlit as st

from receipts.dashboards import charts
from receipts.dashboards.views._data import Data, receipt_label, seed_from_url
from receipts.dashboards.views._names import blank_unknown, readable
from receipts.schema.lane import FIELDS, LABEL, OPTION

GIB = float(1 << 30)


def pick_receipt(data: Data, label: str, param: str, default_index: int = 0, *, lane_of: str | None = None) -> str | None:
    """A receipt picker whose choice lives in the URL (?param=id) so every page can be linked.
    `lane_of`: offer only the receipts of that receipt's lane (itself left out), as a comparison needs."""
    rows = data.lanes().select("id", "run_name", "rumor", "lane")
    if lane_of is not None:
        lane = rows.filter(pl.col("id") == lane_of)["lane"]
        same = rows.filter((pl.col("lane") == lane[0]) & (pl.col("id") != lane_of) & ~pl.col("rumor")) if lane.len() else rows
        linked = st.query_params.get(param)
        # A link naming a B outside A's lane (or A itself) is honoured: the page then says why it is refused.
        if not (linked in rows["id"].to_list() and linked not in same["id"].to_list()):
            rows = same
        if rows.height == 0:
            st.info("No other receipt in A's lane: nothing it can be compared with (tick 'any lane' to see why "
                    "another lane is refused).")
            return None
    if rows.height == 0:
        st.info("The store holds no receipts yet: `receipts ingest run.log`.")
        return None
    ids = rows["id"].to_list()
    labels = {r["id"]: receipt_label(r) for r in rows.iter_rows(named=True)}
    stale = seed_from_url(f"pick_{param}", param, ids, default_index)
    if stale is not None:
        # A link to a receipt this store does not hold never shows someone else's run in its place; a link to
        # an older copy of a run (superseded: a later ingest of the same run replaced it) names its successor.
        older = data.query("receipt", receipt_id=stale)
        successor = older["superseded_by"][0] if older.height and "superseded_by" in older.columns else None
        if successor:
            view = st.query_params.get("view", "receipt")
            st.warning(f"Receipt {stale} ({older['run_name'][0]}) is an older copy of its run, superseded by "
                       f"[{successor}](?view={view}&{param}={successor}) (a later ingest of the same run). "
                       "Open that one, or pick one below.")
        else:
            st.error(f"No receipt {stale} in this store (the link is stale, or points at another store). "
                     "Pick one below to go on.")
    chosen = st.selectbox(label, ids, format_func=labels.__getitem__, key=f"pick_{param}")
    if stale is not None:
        return None  # until the user picks: the URL keeps the id it asked for
    st.query_params[param] = chosen
    return chosen


def _kv(d: dict) -> pl.DataFrame:
    return pl.DataFrame({"field": list(map(str, d)), "value": [str(v) for v in d.values()]},
                        schema={"field": pl.Utf8, "value": pl.Utf8})


def _identity(rep: dict) -> None:
    ident = rep["identity"]
    if ident["complete"]:
        st.success("Identity complete: this receipt belongs to a lane and can be compared within it.")
    else:
        missing = [f for f in FIELDS if not ident[f]]
        st.warning(f"⚠ Rumor: missing {', '.join(missing)}. It is shown but never compared.")
    st.dataframe(pl.DataFrame({
        "field": [LABEL[f] for f in FIELDS],
        "canonical": [ident[f] for f in FIELDS],
        "as claimed": [ident["raw"][OPTION[f]] for f in FIELDS],
    }), hide_index=True)
    st.markdown("**Alias resolution**")
    for note in ident["resolution"] or ["(no notes: values used as claimed)"]:
        st.markdown(f"- {note}")
    # An unknown is said as one, never as Python's None (an MLPerf log names no host).
    regime = ident["regime"]
    if isinstance(regime, dict):  # the parsed launch regime: its parts in words, not a dict's repr
        layout = ", ".join(f"{k}{v}" for k, v in (regime.get("parallel") or {}).items()) or "none"
        regime = f"engine {regime.get('engine')}, compile {regime.get('compile_mode')}, parallel {layout}"
    st.caption(f"hostname {ident['hostname'] or 'not in the log'} · regime {regime or 'not given'} · "
               f"tags {', '.join(rep['tags']) or 'none'}")


def _env(data: Data, receipt_id: str) -> None:
    env = data.query("receipt_env", receipt_id=receipt_id)
    if env.height == 0:
        st.caption("No env overlay recorded.")
        return
    st.dataframe(env.with_columns(
        pl.when(pl.col("redacted")).then(pl.lit("🔒 redacted"))
        .when(~pl.col("is_set")).then(pl.lit("∅ explicitly unset"))
        .otherwise(pl.lit("set")).alias("state")).select("name", "state", "value"),
        hide_index=True, width="stretch")


def _topology(data: Data, receipt_id: str) -> None:
    cells = data.query("dash_topology", receipt_id=receipt_id)
    if cells.height == 0:
        st.caption("No topology recorded (attach `nvidia-smi topo -m` output).")
        return
    bad = cells.filter(pl.col("unhealthy") & (pl.col("row_device") < pl.col("col_device")))
    if bad.height:
        pairs = ", ".join(f"{r['row_device']}–{r['col_device']} {r['cell']}" for r in bad.iter_rows(named=True))
        st.error(f"GPU pairs off NVLink (NV# expected): {pairs}")
    nics = cells.filter(~pl.col("row_device").str.starts_with("GPU")).height
    if nics:
        # An 8-GPU + 10-NIC matrix is unreadable at a glance: GPUs alone by default, NICs one click away.
        gpus_only = st.toggle("GPUs only", value=True, key="topology_gpus_only",
                              help="Hide the NIC rows and columns of the matrix")
        if gpus_only:
            cells = cells.filter(pl.col("row_device").str.starts_with("GPU") & pl.col("col_device").str.starts_with("GPU"))
    st.altair_chart(charts.topology(cells))


def _nccl_tests(rep: dict) -> None:
    """nccl-tests output attached to the receipt (its bus bandwidth is the interconnect's own receipt)."""
    nt = (rep.get("topology") or {}).get("nccl_tests")
    if not nt:
        return
    st.markdown("#### nccl-tests")
    cols = st.columns(3)
    cols[0].metric("avg bus bandwidth", f"{nt['avg_busbw_gbps']:.1f} GB/s" if nt.get("avg_busbw_gbps") is not None else "unknown")
    cols[1].metric("max bus bandwidth", f"{nt['max_busbw_gbps']:.1f} GB/s" if nt.get("max_busbw_gbps") else "unknown")
    cols[2].metric("GPUs in the test", str(nt.get("n_gpus_total") or "unknown"))
    rows = pl.DataFrame(nt.get("rows") or [])
    if rows.height:
        with st.expander("per message size"):
            st.dataframe(readable(rows), hide_index=True, width="stretch")


def _steps(data: Data, rep: dict) -> None:
    ss = rep["steady_state"]
    unit = rep.get("series_unit") or "step"
    steps = data.query("step_series", receipt_id=rep["id"])
    if rep.get("time_to_train_s") is not None:
        # An MLPerf result: the benchmark's own headline first; the series below is per epoch / block.
        ttt = rep["time_to_train_s"]
        st.metric("time to train (MLPerf run_start → run_stop)", f"{ttt / 60:,.2f} min" if ttt >= 120 else f"{ttt:,.1f} s")
    c = st.columns(4)
    c[0].metric(f"median {unit} (ms)", "—" if ss["median_step_ms"] is None else f"{ss['median_step_ms']:,.2f}")
    c[1].metric("p10–p90 (ms)", "—" if ss["p10_step_ms"] is None else f"{ss['p10_step_ms']:,.1f}–{ss['p90_step_ms']:,.1f}")
    c[2].metric(f"steady {unit}s", f"{ss['n_steps']:,}")
    c[3].metric(f"{unit}s outside the window", f"{ss['warmup_steps']:,}")
    if ss["first_step"] is None:  # e.g. an MLPerf result whose one block covers the run: no series to window
        st.caption(f"No steady-state window: the log has no {unit} series to take one from "
                   f"(rule: {ss['window_rule']}).")
    else:
        warmup = (f"warm-up through {unit} {ss['warmup_last_step']} excluded" if ss["warmup_last_step"] is not None
                  else "no warm-up excluded")
        st.caption(f"Steady-state window: {unit}s {ss['first_step']}–{ss['last_step']}; {warmup} "
                   f"(rule: {ss['window_rule']}).")
    if steps.filter(pl.col("step_ms").is_not_null()).height:
        st.altair_chart(charts.step_series(steps, ss["warmup_last_step"]))
    _slowest_profiled(data, rep["id"])
    metrics = charts.training_metrics(steps)
    if metrics is not None:
        st.markdown("**Training metrics the log printed** (loss, tokens/s, MFU; mean over ranks)")
        st.altair_chart(metrics)


def _slowest_profiled(data: Data, receipt_id: str) -> None:
    """Where the receipt has a profile: its slowest steady steps, each a link to its kernels in the anatomy view."""
    sources = data.query("anatomy_sources", receipt_id=receipt_id)
    if sources.height == 0:
        return
    sha = sources["source_sha256"][0]
    slow = [r for r in data.slowest_steps(receipt_id, sha, n=3) if not r["warmup"]]  # steady steps come first
    if slow:
        links = " · ".join(f"[step {r['step']} ({r['wall_ms']:,.1f} ms)](?view=anatomy&id={receipt_id}&step={r['step']})"
                           for r in slow)
        st.markdown(f"Slowest steady steps in the profile, each opened to its kernels: {links}")


def _memory(data: Data, rep: dict) -> None:
    mem = data.query("dash_memory_steps", receipt_id=rep["id"])
    if mem.height:
        drift = data.query("dash_memory_drift", receipt_id=rep["id"]).row(0, named=True)
        if drift["drift"]:
            st.error(f"Fragmentation drift: the reserved − allocated gap grew by "
                     f"{drift['gap_growth_bytes'] / GIB:,.2f} GiB over the steady window while allocated memory "
                     f"stayed flat ({drift['allocated_first_bytes'] / GIB:,.2f} → "
                     f"{drift['allocated_last_bytes'] / GIB:,.2f} GiB).")
        elif drift["drift"] is None:
            st.caption("Too few steady steps with memory to judge drift.")
        else:
            st.caption("No fragmentation drift: the reserved − allocated gap did not grow while allocated stayed flat.")
        st.altair_chart(charts.memory_series(mem))
        return
    m = rep["memory"]
    if m["peak_allocated_bytes"] is None and m["peak_reserved_bytes"] is None:
        st.caption("No memory recorded.")
        return
    if m["peak_reserved_bytes"] is None or m["peak_allocated_bytes"] is None:
        # An unknown is shown as unknown: a gap against a missing peak would be a number about nothing.
        known = "allocated" if m["peak_allocated_bytes"] is not None else "reserved"
        st.caption(f"Per-step memory not logged; peaks only. Fragmentation gap at peak: unknown (only the "
                   f"{known} peak was recorded).")
    else:
        gap = m["peak_reserved_bytes"] - m["peak_allocated_bytes"]
        st.caption(f"Per-step memory not logged; peaks only. Fragmentation gap at peak: {gap / GIB:,.2f} GiB "
                   "(reserved − allocated).")
    st.altair_chart(charts.memory_peaks(pl.DataFrame(m["per_rank"])))


def _telemetry(t: dict) -> None:
    """Per rank, what NVML said while the run ran (analysis/telemetry.py): medians over the busy samples."""
    rows = [{"rank": g["rank"], "SM clock (MHz)": g["sm_clock_mhz"],
             "SM clock range (MHz)": "—" if g["sm_clock_min_mhz"] is None else
             f"{g['sm_clock_min_mhz']:,.0f}–{g['sm_clock_max_mhz']:,.0f}",
             "memory clock (MHz)": g["mem_clock_mhz"], "power (W)": g["power_w"], "power limit (W)": g["power_limit_w"],
             "temperature (C)": g["temperature_c"], "busy (%)": g["gpu_util_pct"],
             "clocks held by": ", ".join(f"{k} {v:.0%}" for k, v in g["throttle_share"].items() if k != "gpu_idle")
             or "none",
             "ECC errors added": g["ecc_uncorrected_added"], "Xid": ", ".join(map(str, g["xids"])) or "none",
             "busy samples": f"{g['busy_samples']} of {g['samples']}"} for g in t["ranks"]]
    st.dataframe(blank_unknown(pl.DataFrame(rows), {"SM clock (MHz)": "%.0f", "memory clock (MHz)": "%.0f",
                                                    "power (W)": "%.0f", "power limit (W)": "%.0f"}),
                 hide_index=True, width="stretch")
    st.caption(f"Sampled every {t['ranks'][0]['interval_s']:g} s beside the run (NVML); a busy sample has the GPU "
               "busy at least half the interval. Clocks held by: the share of busy samples under each throttle "
               "reason. `receipts compare` lists a moved clock as infrastructure drift.")


def ended_early_text(run_name: str, reason: str) -> str:
    """The warning a crashed or stopped run carries on every page that shows it."""
    return (f"**Ended early** — {run_name} is a crashed or stopped run: {reason}. "
            "Its figures cover only the steps it logged.")


def render(data: Data) -> None:
    st.header("Receipt")
    receipt_id = pick_receipt(data, "receipt", "id")
    if receipt_id is None:
        return
    rep = data.report(receipt_id)
    st.subheader(f"{rep['run_name']} · {rep['id']}")
    st.caption(f"{rep['source_format']} · {rep['machine']['machine_class'] or 'machine unknown'} · "
               f"started {rep['started_at'] or 'unknown'} · ingested {rep['ingested_at']}")
    if rep["ended_early"]:
        st.warning(ended_early_text(rep["run_name"], rep["ended_early"]), icon="⚠️")
    left, right = st.columns(2)
    with left:
        st.markdown("#### Identity")
        _identity(rep)
        st.markdown("#### Provenance")
        st.dataframe(_kv(rep["provenance"]), hide_index=True, width="stretch")
        st.dataframe(pl.DataFrame(rep["sources"]).select("path", "format", "role", "sha256"),
                     hide_index=True, width="stretch")
    with right:
        st.markdown("#### Software stack")
        st.dataframe(_kv(rep["software"]), hide_index=True, width="stretch")
        st.markdown("#### Env overlay")
        _env(data, receipt_id)
        st.markdown("#### Topology")
        _topology(data, receipt_id)
        _nccl_tests(rep)
    st.markdown("#### Step time")
    _steps(data, rep)
    st.markdown("#### Memory")
    _memory(data, rep)
    if rep.get("telemetry"):
        st.markdown("#### GPU telemetry")
        _telemetry(rep["telemetry"])
