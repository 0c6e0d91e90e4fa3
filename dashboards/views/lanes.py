"""Lanes: receipts grouped by identity (host lineage · preset family · launch regime), rumors marked."""

from __future__ import annotations

from datetime import date
from urllib.parse import urlencode

import polars as pl
import streamlit as st

from receipts.analysis.lanes import lane_summary
from receipts.schema.lane import FIELDS, LABEL, URL_PARAM, Lane
from receipts.dashboards import charts
from receipts.dashboards.views._data import Data

GIB = float(1 << 30)
# Rows sent to the browser: a 10k-row grid costs seconds of first paint and nobody scrolls it; the filters
# and search narrow it instead.
MAX_ROWS = 500


def _options(opts: pl.DataFrame, kind: str) -> list[str]:
    return opts.filter(pl.col("kind") == kind)["value"].to_list()


def _from_url(param: str, options: list[str]) -> list[str]:
    """A filter's values from the link (repeated ?host=a&host=b), kept only if this store has them."""
    return [v for v in st.query_params.get_all(param) if v in options]


def _to_url(values: dict[str, str | list[str] | None]) -> None:
    """Write the filters into the link, so a reload keeps them and a filtered view can be shared."""
    for param, value in values.items():
        if value:
            st.query_params[param] = value
        elif param in st.query_params:
            del st.query_params[param]


def _filters(data: Data) -> dict:
    opts = data.query("dash_filter_options", fields=list(FIELDS))
    tags_all = _options(opts, "tag")
    cols = st.columns([3] * len(FIELDS) + [2])
    chosen = {}
    for col, f in zip(cols, FIELDS):
        options = _options(opts, f)
        chosen[f] = col.multiselect(LABEL[f], options, default=_from_url(URL_PARAM[f], options),
                                    key=f"lanes_{URL_PARAM[f]}")
    tag_choices = [None, *tags_all]
    url_tag = st.query_params.get("tag")
    tag = cols[-1].selectbox("lineage tag", tag_choices, format_func=lambda t: t or "any", key="lanes_tag",
                            index=tag_choices.index(url_tag) if url_tag in tag_choices else 0)
    cols = st.columns([3, 5])
    days = [date.fromisoformat(d) for d in _options(opts, "date")]
    since = until = None
    if days:
        lo, hi = min(days), max(days)
        try:
            wanted = (date.fromisoformat(st.query_params.get("since", "")), date.fromisoformat(st.query_params.get("until", "")))
        except ValueError:
            wanted = (lo, hi)
        picked = cols[0].date_input("run date", value=wanted, key="lanes_dates")
        if isinstance(picked, (tuple, list)) and len(picked) == 2 and tuple(picked) != (lo, hi):
            since, until = (d.isoformat() for d in picked)
    search = cols[1].text_input("search (run name, id, hostname, raw identity)", value=st.query_params.get("q", ""),
                                key="lanes_search").strip() or None
    _to_url({**{URL_PARAM[f]: chosen[f] for f in FIELDS}, "tag": tag, "since": since, "until": until, "q": search})
    return {"lane": [chosen[f] or None for f in FIELDS], "tag": tag,
            "since": since, "until": until, "search": search}


def render(data: Data) -> None:
    st.header("Lanes")
    st.caption("A lane is every receipt sharing one identity: host lineage · preset family · launch regime. "
               "A receipt missing any of the three is a **rumor**: listed, never compared.")
    frame = data.lanes(**_filters(data))
    lanes = lane_summary(frame)
    n_rumors = int(frame["rumor"].sum()) if frame.height else 0
    c = st.columns(3)
    c[0].metric("receipts", f"{frame.height:,}")
    c[1].metric("lanes", f"{lanes.filter(~pl.col('rumor')).height:,}")
    c[2].metric("rumors (incomplete identity)", f"{n_rumors:,}")
    if frame.height == 0:
        st.info("No receipt matches these filters.")
        return
    st.altair_chart(charts.lane_counts(lanes))

    st.subheader("Lanes")
    st.dataframe(
        lanes.with_columns(
            pl.struct(*FIELDS, "rumor").map_elements(
                lambda r: None if r["rumor"] else "?" + urlencode(
                    {"view": "history", **Lane.of(r).url_params()}),
                return_dtype=pl.Utf8).alias("history"))
        .select("lane", "n_receipts", "median_step_ms", "last_run_at", "history"),
        hide_index=True, width="stretch",
        column_config={"n_receipts": st.column_config.NumberColumn("receipts"),
                       "median_step_ms": st.column_config.NumberColumn("median step (ms)", format="%.1f"),
                       "last_run_at": st.column_config.DatetimeColumn("last run (UTC)"),
                       "history": st.column_config.LinkColumn("history", display_text="lane history")})

    st.subheader("Receipts")
    if frame.height > MAX_ROWS:
        st.caption(f"Newest {MAX_ROWS:,} of {frame.height:,}: filter or search to narrow.")
    table = frame.head(MAX_ROWS).with_columns(
        ("?view=receipt&id=" + pl.col("id")).alias("open"),
        pl.when(pl.col("rumor")).then("⚠ rumor: missing " + pl.col("missing")).otherwise(pl.lit("✓ complete"))
        .alias("identity"),
        (pl.col("peak_reserved_bytes") / GIB).alias("peak_reserved_gib"),
        pl.col("tags").list.join(", ").alias("tags"),
    ).select("open", "run_name", "identity", "lane", "run_at", "tags", "n_steady_steps", "median_step_ms",
             "peak_reserved_gib", "ended_early")
    st.dataframe(table, hide_index=True, width="stretch", column_config={
        "open": st.column_config.LinkColumn("receipt", display_text=r"id=(.{12})"),
        "run_at": st.column_config.DatetimeColumn("run (UTC)"),
        "n_steady_steps": st.column_config.NumberColumn("steady steps"),
        "median_step_ms": st.column_config.NumberColumn("median step (ms)", format="%.1f"),
        "peak_reserved_gib": st.column_config.NumberColumn("peak reserved (GiB)", format="%.1f"),
        "ended_early": st.column_config.TextColumn("cut short")})
