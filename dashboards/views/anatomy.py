"""Anatomy: where step time went, per step and rank by category, per NVTX range, warm-up vs steady."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl
import streamlit as st

from receipts.analysis.anatomy import mean_over_ranks
from receipts.dashboards import charts
from receipts.dashboards.views._data import Data, seed_from_url
from receipts.dashboards.views import step_drill
from receipts.dashboards.views._names import blank_unknown, number_config, readable

if TYPE_CHECKING:
    from receipts.analysis.anatomy import AnatomySource

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
    _open_the_source(src)
    params = {"receipt_id": receipt_id, "source_sha256": src.sha256}
    rows = data.query("anatomy_rows", **params)
    window = pl.DataFrame(rep.window)
    st.caption("Stacked charts show parts that sum to the step's GPU span: compute only, communication hidden "
               "under compute, exposed communication, memory work under neither, idle. The busy time of each kernel "
               "category is shown apart and not stacked: categories overlap (communication runs under compute).")

    if rep.many_ranks:  # a chart per rank is unreadable past a node's ranks: their mean, per step
        st.markdown("#### Per step, the mean of the ranks")
        st.altair_chart(charts.anatomy_by_step(mean_over_ranks(rows), ranks_label=f"mean of {rep.ranks} ranks"))
    else:
        st.markdown("#### Per step and rank")
        st.altair_chart(charts.anatomy_by_step(rows))
    step_drill.render(data, receipt_id, src.sha256)
    st.markdown("#### Per rank, steady state")
    steady = window.filter(pl.col("phase").is_in(["steady", "window"]))
    st.altair_chart(charts.anatomy_by_rank(steady))
    st.markdown("#### Busy time by category, steady state (overlapping, not additive)")
    if rep.many_ranks:  # a bar per rank and category is unreadable past a node's ranks: their spread instead
        st.altair_chart(charts.anatomy_spread(pl.DataFrame(rep.across_ranks)))
        st.caption(f"{rep.ranks} ranks: each category from its least to its most busy rank, the median ticked; "
                   "`receipts anatomy RUN --by category` prints the ranks at each end.")
    else:
        st.altair_chart(charts.anatomy_categories(steady))
    st.markdown("#### Warm-up vs steady")
    if not window.filter(pl.col("phase") == "warmup").height:
        st.caption("This export has no warm-up steps marked (no step markers, or the capture began after warm-up): "
                   "only one phase to show.")
    st.altair_chart(charts.anatomy_phases(window))
    st.markdown("#### Top kernels per category, steady state")
    if not rep.kernels:
        st.caption("No kernel names stored for this export (attached before schema 7, or no kernels in the "
                   "steady window).")
    else:
        kernels = blank_unknown(pl.DataFrame(rep.kernels).select("category", "name", "calls", "ms_per_step",
                                                                  "share_pct", "total_ms"),
                                {"share_pct": "%.1f", "total_ms": "%.2f"})
        st.dataframe(kernels, hide_index=True, width="stretch", column_config=number_config(kernels, {
            "name": st.column_config.TextColumn("kernel", width="large"),
            "ms_per_step": st.column_config.NumberColumn("ms per rank-step", format="%.3f"),
            "share_pct": st.column_config.NumberColumn("% of category", format="%.1f"),
            "total_ms": st.column_config.NumberColumn("total ms (all ranks)", format="%.2f")}))
        st.caption("Sum of kernel durations (as `nsys stats` cuda_gpu_kern_sum reports), over the receipt's steady "
                   "steps; the top 10 of each category, longest categories first.")
    st.markdown("#### Long GPU gaps by place, steady state")
    if not rep.gaps:
        st.caption("No GPU gap of 0.5 ms or more in a steady step (or the export was attached before schema 17).")
    else:
        gaps = pl.DataFrame(rep.gaps).select("place", "steps", "steady_steps", "share_pct", "ms_per_step", "mean_ms",
                                            "max_ms")
        st.dataframe(gaps, hide_index=True, width="stretch", column_config=number_config(gaps, {
            "place": st.column_config.TextColumn("after (call N of)", width="large"),
            "share_pct": st.column_config.NumberColumn("% of steps", format="%.0f"),
            "ms_per_step": st.column_config.NumberColumn("ms per rank-step", format="%.3f"),
            "mean_ms": st.column_config.NumberColumn("mean gap ms", format="%.3f"),
            "max_ms": st.column_config.NumberColumn("max gap ms", format="%.3f")}))
        st.caption("Where the GPU sat idle 0.5 ms or more (idle_long), by the call of the kernel or copy it finished "
                   "last before: a stall the loop makes is one place in every step, a profiler's pause a place in "
                   "some. `receipts explain` compares places between runs.")
    st.markdown("#### Per NVTX range")
    families = data.query("dash_nvtx_families", **params)
    if families.height == 0:
        st.caption("No NVTX ranges in this export.")
    else:
        top = families.group_by("family").agg(pl.col("total_ms").sum()).sort("total_ms", descending=True).head(TOP_NVTX)
        st.altair_chart(charts.nvtx_families(families.filter(pl.col("family").is_in(top["family"].implode()))))
    steps = data.query("anatomy_steps", **params)
    with st.expander("per-step table (wall, GPU busy, communication, overlap)"):
        st.dataframe(readable(steps.drop("start_ns", strict=False)), hide_index=True, width="stretch")


# Offered for download up to this size: a browser holds the whole file. Read only when clicked.
MAX_DOWNLOAD_BYTES = 512 << 20


def _open_the_folder(src: "AnatomySource", folder: Path) -> None:
    """A profile read from a folder: its files, and how to see them side by side in the tool that made them."""
    files = sorted(p.name for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    if src.format == "nsys":
        reports = [n for n in files if n.endswith((".nsys-rep", ".sqlite", ".sqlite.gz"))]
        st.markdown(f"{len(reports)} Nsight Systems exports of one job, one per rank or node: open their reports "
                    "together in `nsys-ui` (File → Open, all of them: one timeline, the sessions aligned), or "
                    f"`nsys recipe ... --input {folder}` for NVIDIA's own multi-report analyses.")
    else:
        reports = [n for n in files if ".pt.trace." in n or n.endswith((".json", ".json.gz"))]
        st.markdown(f"{len(reports)} PyTorch profiler traces, one per rank: open one in "
                    "[Perfetto](https://ui.perfetto.dev) or HolisticTraceAnalysis on the folder.")
    st.caption(", ".join(reports[:16]) + (f" and {len(reports) - 16} more" if len(reports) > 16 else ""))


def _open_the_source(src: "AnatomySource") -> None:
    """Where the numbers come from, and how to look at it in the tool that made it."""
    with st.expander("Open the source export"):
        st.code(str(src.path), language=None)
        path = Path(str(src.path)) if src.path else None
        if path is not None and path.is_dir():  # one profile of several files: per-rank traces, a job's exports
            _open_the_folder(src, path)
            return
        if src.format == "nsys":
            stem = Path(str(src.path or "run.sqlite")).name.removesuffix(".gz").removesuffix(".sqlite")
            report = Path(str(src.path or "")).with_name(stem + ".nsys-rep")
            if report.is_file():
                st.markdown(f"Nsight Systems: open the report in the GUI, `nsys-ui {report}` (the .sqlite is its "
                            "export; `nsys stats` on either gives the same kernel totals).")
            else:  # only the export was kept: never name a report that is not there
                st.markdown(f"Nsight Systems: no `{report.name}` beside this export (only the .sqlite was kept), so "
                            "there is no report for `nsys-ui` to open here; `nsys stats` reads the .sqlite itself "
                            "for the kernel totals.")
        else:
            st.markdown("PyTorch profiler trace: open it in [Perfetto](https://ui.perfetto.dev) (Open trace file) "
                        "or in `chrome://tracing`; HolisticTraceAnalysis reads the same files.")
        if path is not None and path.is_file() and path.stat().st_size <= MAX_DOWNLOAD_BYTES:
            st.download_button(f"download {path.name}", data=path.read_bytes, file_name=path.name,
                               key=f"download_{src.sha256[:12]}")
        elif path is not None and not path.is_file():
            st.caption("The file is not at this path on the dashboard's machine (ingested elsewhere, or moved); "
                       f"its sha256 is {src.sha256}.")
