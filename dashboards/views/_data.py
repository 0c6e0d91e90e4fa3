"""The views' only way to the store: queries by name, cached per (store url, store version).

Store.version() changes whenever something is ingested, so a cached result is never stale and a
10k-receipt store is queried once per version, not once per click. A read-only connection is opened
per script run and closed after it: a DuckDB file held open by the dashboard would block `receipts ingest`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl
import streamlit as st

from receipts.schema.lane import FIELDS
from receipts.store import Store, open_store

if TYPE_CHECKING:
    from receipts.analysis.anatomy import AnatomyReport
    from receipts.analysis.compare import Comparison
    from receipts.analysis.drilldown import StepDrilldown
    from receipts.analysis.explain_run import ExplainResult
    from receipts.analysis.noise import NoiseFloor

# The analysis imports below sit inside the cached functions: compare pulls in the explanation's modules and numpy,
# and the lane view (the first paint) never needs them.

_TTL_S = 3600  # entries of older versions age out; the key already makes them unreachable


class Data:
    def __init__(self, url: str):
        self.url = url
        self._store: Store | None = open_store(url, read_only=True)
        self.version = self._store.version()

    @property
    def store(self) -> Store:
        assert self._store is not None, "Data used after close()"
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def query(self, name: str, **params: Any) -> pl.DataFrame:
        return _query(self.url, self.version, name, _key(params), self)

    def lanes(self, **filters: Any) -> pl.DataFrame:
        """sql/dash_lanes.sql under `filters` (lane: the values wanted of each lane field, in FIELDS' order, None =
        any; tag, since, until, search; None = any), with each lane field and `missing` (the absent ones, by
        name) for its lane_key."""
        lane = filters.pop("lane", None)
        frame = self.query("dash_lanes", **{"lane_filter": lane if lane and any(lane) else None, "tag": None,
                                            "since": None, "until": None, "search": None, **filters},
                           unsummarised=self.unsummarised)
        values = pl.col("lane_key").str.json_decode(pl.List(pl.Utf8))
        return frame.with_columns(*(values.list.get(i).alias(f) for i, f in enumerate(FIELDS))).with_columns(
            pl.concat_str([pl.when(pl.col(f).is_null()).then(pl.lit(f)) for f in FIELDS], separator=", ",
                          ignore_nulls=True).alias("missing"))

    @property
    def unsummarised(self) -> list[str]:
        """Receipts without a stored summary (the lane queries take them as a value), cached per store version as
        every query here."""
        return self.query("unsummarised_receipts")["id"].to_list()

    def report(self, receipt_id: str) -> dict[str, Any]:
        return _report(self.url, self.version, receipt_id, self)

    def anatomy(self, receipt_id: str, source_sha256: str | None = None) -> "AnatomyReport":
        return _anatomy(self.url, self.version, receipt_id, source_sha256, self)

    def drilldown(self, receipt_id: str, source_sha256: str, step: int, rank: int | None) -> "StepDrilldown":
        return _drilldown(self.url, self.version, receipt_id, source_sha256, step, rank, self)

    def slowest_steps(self, receipt_id: str, source_sha256: str, n: int = 10) -> list[dict[str, Any]]:
        return _slowest_steps(self.url, self.version, receipt_id, source_sha256, n, self)

    def compare(self, a_id: str, b_id: str) -> "Comparison":
        return _compare(self.url, self.version, a_id, b_id, self)

    def explain(self, a_id: str, b_id: str, against: str | None) -> "ExplainResult | None":
        """B explained against `against` (tag:T, the lane's baseline) or, when None, against A (pairwise); None
        when a side of the pair has no profile."""
        return _explain(self.url, self.version, a_id, b_id, against, self)

    def lane_history(self, *lane: str) -> "tuple[pl.DataFrame, NoiseFloor]":
        """lane_history rows (memory too) joined with analysis.history's intervals, z and change points; `lane`: the
        lane's values (schema/lane.py FIELDS)."""
        return _history(self.url, self.version, lane, self)


def _key(params: dict[str, Any]) -> tuple:
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in params.items()))


# `_data` is not hashed (leading underscore): the url and version are the key.
@st.cache_data(ttl=_TTL_S, max_entries=512, show_spinner=False)
def _query(url: str, version: str, name: str, params: tuple, _data: Data) -> pl.DataFrame:
    return _data.store.query(name, {k: list(v) if isinstance(v, tuple) else v for k, v in params})


@st.cache_data(ttl=_TTL_S, max_entries=128, show_spinner=False)
def _report(url: str, version: str, receipt_id: str, _data: Data) -> dict[str, Any]:
    from receipts.analysis.report import receipt_report

    return receipt_report(_data.store, receipt_id)


@st.cache_data(ttl=_TTL_S, max_entries=64, show_spinner=False)
def _anatomy(url: str, version: str, receipt_id: str, source_sha256: str | None, _data: Data) -> "AnatomyReport":
    from receipts.analysis.anatomy import anatomy_report

    return anatomy_report(_data.store, receipt_id, source_sha256=source_sha256)


@st.cache_data(ttl=_TTL_S, max_entries=64, show_spinner=False)
def _drilldown(url: str, version: str, receipt_id: str, source_sha256: str, step: int, rank: int | None,
               _data: Data) -> "StepDrilldown":
    from receipts.analysis.drilldown import step_drilldown

    return step_drilldown(_data.store, receipt_id, source_sha256, step, rank)


@st.cache_data(ttl=_TTL_S, max_entries=64, show_spinner=False)
def _slowest_steps(url: str, version: str, receipt_id: str, source_sha256: str, n: int,
                   _data: Data) -> list[dict[str, Any]]:
    from receipts.analysis.drilldown import slowest_steps

    return slowest_steps(_data.store, receipt_id, source_sha256, n)


@st.cache_data(ttl=_TTL_S, max_entries=128, show_spinner=False)
def _compare(url: str, version: str, a_id: str, b_id: str, _data: Data) -> "Comparison":
    from receipts.analysis.compare import compare_in_store

    return compare_in_store(_data.store, a_id, b_id)


@st.cache_data(ttl=_TTL_S, max_entries=64, show_spinner=False)
def _explain(url: str, version: str, a_id: str, b_id: str, against: str | None, _data: Data) -> "ExplainResult | None":
    from receipts.analysis.check import DEFAULT_LAST
    from receipts.analysis.explain_run import explain_in_store, for_comparison

    if against is not None:
        return explain_in_store(_data.store, b_id, against=against, last=DEFAULT_LAST)
    comparison = _compare(url, version, a_id, b_id, _data)
    return for_comparison(_data.store, comparison, against=a_id) if comparison.comparable else None


@st.cache_data(ttl=_TTL_S, max_entries=64, show_spinner=False)
def _history(url: str, version: str, lane: tuple[str, ...], _data: Data) -> "tuple[pl.DataFrame, NoiseFloor]":
    from receipts.analysis.history import read_history
    from receipts.analysis.lanes import Lane

    history = _data.store.query("lane_history", {"lane_key": Lane(*lane).key, "unsummarised": _data.unsummarised})
    h = read_history(_data.store, Lane(*lane))
    marks = pl.DataFrame([{"receipt_id": r.id, "ci_low": r.ci_low, "ci_high": r.ci_high, "z": r.z,
                           "change_point": r.change_point, "change_pct": r.change_pct, "change_pvalue": r.change_pvalue,
                           "run_date_source": r.run_date_source} for r in h.runs],
                         schema={"receipt_id": pl.Utf8, "ci_low": pl.Float64, "ci_high": pl.Float64, "z": pl.Float64,
                                 "change_point": pl.Boolean, "change_pct": pl.Float64, "change_pvalue": pl.Float64,
                                 "run_date_source": pl.Utf8})
    frame = history.join(marks, on="receipt_id", how="left", maintain_order="left").with_columns(
        pl.col("change_point").fill_null(False), pl.int_range(1, pl.len() + 1).alias("run_order"))
    return frame, h.floor


def receipt_label(row: dict[str, Any]) -> str:
    """How a receipt is named in pickers: run name, short id, and a rumor mark."""
    mark = " ⚠ rumor" if row.get("rumor") else ""
    return f"{row['run_name']} · {row['id'][:12]}{mark}"


def seed_from_url(key: str, param: str, options: list, default_index: int = 0) -> str | None:
    """Give the widget `key` its first value from the URL (?param=...), once per session.

    Widgets keep their own state after that; passing a URL-derived `index` instead would change the
    widget's identity on every choice and throw the user's click away. Returns the URL's value when it is
    not among the options (a stale link: the caller says so instead of silently showing the default).
    """
    if key in st.session_state and st.session_state[key] in options:
        return None
    wanted = st.query_params.get(param)
    st.session_state[key] = wanted if wanted in options else options[min(default_index, len(options) - 1)]
    return wanted if wanted is not None and wanted not in options else None
