"""Lanes: counts per identity for the dashboard, and a lane's current runs with their noise floor.

`lane_runs` and `lane_floor` are the one way anything (compare, the gate, `check`, `history`, the
dashboard) reads a lane's runs: current receipts only (superseded_by IS NULL), optionally one lineage
tag, optionally the most recent N (sql/lane_runs.sql).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Iterable

from receipts.analysis.noise import FLOOR_WINDOW, NoiseFloor, noise_floor
from receipts.schema.lane import FIELDS, Lane, lane_of

if TYPE_CHECKING:
    import polars as pl

    from receipts.store import Store

# `tag:main` (a claim's baseline, `check --against`, `explain --against`) names no receipt: the baseline is the
# candidate lane's most recent runs carrying the tag (analysis.check's selection), `last` of them. 10 by default:
# on the real H100 runs of tests/data/noise (floor 0.75%), 5 baseline runs resolve only changes over ~2.2%, and a
# planted 2.5% slowdown read as +2.07..2.25% against the five most recent main runs was inconclusive 2 times in 3;
# against 10 every one is `slower`, with A/A false alarms still <= 5% (analysis/verdict.py).
TAG_PREFIX = "tag:"
DEFAULT_BASELINE_LAST = 10

__all__ = ["TAG_PREFIX", "DEFAULT_BASELINE_LAST", "Lane", "lane_of", "lane_named", "lane_runs", "lane_run_rows",
           "floors_from_runs", "lane_floors", "lane_summary"]

_LANE_SPLIT = re.compile(r"\s*·\s*|\s+")


def lane_named(text: str | None) -> Lane | None:
    """A lane written as its fields separated by spaces or ' · ' (as `list` and the dashboard write lanes); None for
    text that does not have one word per field."""
    parts = [p for p in _LANE_SPLIT.split((text or "").strip()) if p]
    return Lane(*parts) if len(parts) == len(FIELDS) else None


def lane_runs(store: "Store", lanes: Iterable[Lane], *, tag: str | None = None, last: int | None = None) -> pl.DataFrame:
    """Current runs of the lanes in run order (columns: sql/lane_runs.sql), one query for all of them (and one
    for the receipts without a stored summary, whose medians it takes from their steps)."""
    return store.query("lane_runs", _lane_params(store, lanes, tag=tag, last=last))


def lane_run_rows(store: "Store", lanes: Iterable[Lane], *, tag: str | None = None, last: int | None = None
                  ) -> list[dict[str, Any]]:
    """lane_runs as plain rows: what a noise floor reads (a few dozen runs), without polars."""
    return store.query_rows("lane_runs", _lane_params(store, lanes, tag=tag, last=last))


def _lane_params(store: "Store", lanes: Iterable[Lane], *, tag: str | None, last: int | None) -> dict[str, Any]:
    from receipts.analysis.listing import unsummarised  # orjson: not for the claims file's reader (analysis/claims.py)

    lanes = list(dict.fromkeys(lanes))
    return {"lane_keys": [ln.key for ln in lanes], "tag": tag, "last": last, "unsummarised": unsummarised(store)}


def floors_from_runs(runs: "pl.DataFrame | list[dict[str, Any]]", lanes: Iterable[Lane]) -> dict[Lane, NoiseFloor]:
    """The noise floor of each lane from lane_runs rows, a frame or plain rows (a lane without rows gets the
    default floor)."""
    by_lane: dict[Lane, list[tuple[str, float]]] = {lane: [] for lane in lanes}
    for r in (runs if isinstance(runs, list) else runs.iter_rows(named=True)):
        lane = Lane.from_key(r["lane_key"])
        if lane in by_lane:
            by_lane[lane].append((r["receipt_id"], r["median_step_ms"]))
    return {lane: noise_floor(rows) for lane, rows in by_lane.items()}


def lane_floors(store: "Store", lanes: Iterable[Lane], *, tag: str | None = None,
                last: int | None = FLOOR_WINDOW) -> dict[Lane, NoiseFloor]:
    """Each lane's noise floor from its most recent `last` current runs (optionally carrying `tag`)."""
    lanes = list(dict.fromkeys(lanes))
    if not lanes:
        return {}
    # plain rows: a floor is a few medians per lane, and `show` imports no polars for it
    return floors_from_runs(lane_run_rows(store, lanes, tag=tag, last=last), lanes)


def lane_summary(receipts: pl.DataFrame) -> pl.DataFrame:
    """One row per lane (rumors pooled in one 'rumor' lane) from dash_lanes rows.

    Columns: lane, the lane's fields (schema/lane.py FIELDS), rumor (bool), n_receipts, last_run_at,
             median_step_ms (ms, median over the lane's receipts' steady medians).
    """
    import polars as pl

    if receipts.height == 0:
        return pl.DataFrame(schema={"lane": pl.Utf8, **dict.fromkeys(FIELDS, pl.Utf8), "rumor": pl.Boolean,
                                    "n_receipts": pl.UInt32, "last_run_at": pl.Datetime("us"),
                                    "median_step_ms": pl.Float64})
    keyed = receipts.with_columns(*(pl.when(pl.col("rumor")).then(None).otherwise(pl.col(c)).alias(c) for c in FIELDS))
    return (keyed.group_by("lane", *FIELDS, "rumor")
            .agg(pl.len().alias("n_receipts"), pl.col("run_at").max().alias("last_run_at"),
                 pl.col("median_step_ms").median().alias("median_step_ms"))
            .sort(["rumor", "n_receipts", "lane"], descending=[False, True, False]))

