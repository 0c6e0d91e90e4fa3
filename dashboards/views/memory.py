"""Memory geometry: where a rank's memory goes, measured beside estimated, the three gaps (estimate -> allocated,
allocated -> reserved, reserved -> device), a snapshot's categories at its peak, and which bucket moved
against another receipt. Every number comes from analysis/memory_geometry.py (through the receipt's report)."""

from __future__ import annotations

import altair as alt
import polars as pl
import streamlit as st

from receipts.dashboards.views._data import Data
from receipts.dashboards.views._names import blank_unknown
from receipts.dashboards.views.receipt import pick_receipt

GIB = float(1 << 30)


def _gib(value: int | None) -> float | None:
    return None if value is None else value / GIB


def render(data: Data) -> None:
    st.header("Memory geometry")
    receipt_id = pick_receipt(data, "Receipt", "id")
    if receipt_id is None:
        return
    g = data.report(receipt_id)["memory_geometry"]
    if g["source"] is None:
        st.info("No memory recorded for this receipt: record it with `Recorder.watch_memory(optimizer, model)`, "
                "attach a snapshot (`receipts ingest snapshot.pickle --attach RUN`) or an estimate "
                "(`receipts estimate ... --attach RUN`).")
        return
    where = f"rank {g['rank']}" if g["rank"] is not None else "the run"
    estimates = g.get("estimates") or []
    st.caption(f"Measured by {g['source']} ({where}: the rank with the highest peak allocated)"
               + ("; estimated by " + ", ".join(f"{e['label']} ({e['path']})" for e in estimates) if estimates
                  else "; no estimate attached")
               + (". From other sources: " + ", ".join(f"{k} ({v})" for k, v in g["filled_from"].items())
                  if g["filled_from"] else ""))
    gaps = g["gaps"]
    cols = st.columns(4)
    cols[0].metric("peak allocated", _fmt(g["peak_allocated_bytes"]))
    cols[1].metric("estimate → allocated", _fmt(gaps["estimate_to_allocated_bytes"], signed=True))
    cols[2].metric("allocated → reserved (fragmentation)", _fmt(gaps["fragmentation_bytes"]))
    cols[3].metric("reserved → device (headroom)", _fmt(gaps["headroom_bytes"]))
    if gaps["fragmentation_rule"]:
        st.caption(f"Fragmentation: {gaps['fragmentation_rule']}.")
    if g["buckets"]:
        # the same rows as `show`: each bucket measured (capture, or a snapshot's categories mapped onto the
        # buckets) beside every attached estimate, the last estimate's error
        labels = [e["label"] for e in estimates]
        table = pl.DataFrame([{"bucket": r["bucket"], "measured by": r.get("measured_by"),
                               "measured GiB": _gib(r["measured_bytes"]),
                               **{f"{label} GiB": _gib((r.get("estimated") or {}).get(label)) for label in labels},
                               "estimated GiB": _gib(r["estimated_bytes"]), "estimate error %": r["error_pct"]}
                              for r in g["buckets"]],
                             schema={"bucket": pl.Utf8, "measured by": pl.Utf8, "measured GiB": pl.Float64,
                                     **{f"{label} GiB": pl.Float64 for label in labels},
                                     "estimated GiB": pl.Float64, "estimate error %": pl.Float64})
        st.dataframe(blank_unknown(table.drop("estimated GiB") if labels else table, {"estimate error %": "%+.1f"}),
                     hide_index=True)
        st.altair_chart(_bucket_chart(table.select("bucket", "measured GiB", "estimated GiB")),
                        use_container_width=True)
    for s in g["sources"]:
        if s["kind"] != "snapshot" or g["source"] == "snapshot":   # a lead snapshot's categories are the rows above
            continue
        for r in s["ranks"]:
            st.markdown(f"**Snapshot** `{s['path'] or s['source_sha256'][:12]}` (device {r['device']}): "
                        f"at its peak of {_fmt(r['peak_allocated_bytes'])}, by the phase that allocated it")
            st.dataframe(pl.DataFrame({"category": list(r["categories"]),
                                       "GiB": [v / GIB for v in r["categories"].values()]}), hide_index=True)
            for w in r["warnings"]:
                st.warning(w)
    _drift(data, receipt_id, g)


def _bucket_chart(table: pl.DataFrame) -> alt.Chart:
    long = table.unpivot(index="bucket", on=["measured GiB", "estimated GiB"], variable_name="side", value_name="GiB")
    return alt.Chart(long.drop_nulls("GiB")).mark_bar().encode(
        x=alt.X("GiB:Q"), y=alt.Y("bucket:N", sort=None), color="side:N", yOffset="side:N")


def _drift(data: Data, receipt_id: str, g: dict) -> None:
    from receipts.analysis.memory_geometry import drift, moved

    st.markdown("#### Against another receipt")
    other = pick_receipt(data, "Compare with", "b", default_index=_same_lane_index(data, receipt_id))
    if other is None or other == receipt_id:
        st.caption("Pick another receipt to see which bucket moved.")
        return
    changes = drift(g, data.report(other)["memory_geometry"])
    if not changes:
        st.caption("Neither has measured memory to compare.")
        return
    bucket = moved(changes)
    st.markdown(f"The **{bucket.replace('_', ' ')}** bucket moved most." if bucket else "No bucket moved.")
    st.dataframe(pl.DataFrame([{"category": d["category"], "kind": d["kind"], "A GiB": d["a_bytes"] / GIB,
                                "B GiB": d["b_bytes"] / GIB, "B - A GiB": d["delta_bytes"] / GIB} for d in changes]),
                 hide_index=True)


def _same_lane_index(data: Data, receipt_id: str) -> int:
    """The picker's default: the first other receipt of the same lane (the run it is most likely set against), else
    the first other receipt; a rumor's or a lane of one: the first other receipt."""
    rows = data.lanes().select("id", "lane", "rumor").to_dicts()
    lane = next((r["lane"] for r in rows if r["id"] == receipt_id and not r["rumor"]), None)
    others = [i for i, r in enumerate(rows) if r["id"] != receipt_id]
    same = [i for i in others if lane is not None and rows[i]["lane"] == lane]
    return (same or others or [0])[0]


def _fmt(value: int | None, *, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value / GIB:+,.3f} GiB" if signed else f"{value / GIB:,.3f} GiB"
