"""What `receipts list` shows: every current receipt's identity and steady-state headline, as plain rows.

Plain dicts straight from the store (Store.query_rows), never a polars frame, and nothing heavier than the
standard library and orjson imported here: over 10,000 receipts the rows are read and decoded in ~0.065 s,
less than importing polars and numpy took (~0.15 s; benchmarks/bench_gate.py's `list CLI` line).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import orjson

from receipts.schema.lane import FIELDS, Lane

if TYPE_CHECKING:
    from receipts.store import Store


def series_headline(provenance: dict[str, Any]) -> dict[str, Any]:
    """What one point of the receipt's series is (`step`, `epoch`, `block`, `segment`: MLPerf logs have no
    per-iteration record unless NeMo's tracked_stats give one) and, for an MLPerf result, its headline: the
    time to train, run_start -> run_stop, in seconds (None otherwise)."""
    ttt_ms = provenance.get("time_to_train_ms")
    return {"series_unit": provenance.get("step_unit") or "step",
            "time_to_train_s": ttt_ms / 1000.0 if isinstance(ttt_ms, (int, float)) else None}


def unsummarised(store: Store) -> list[str]:
    """The ids of the receipts without a stored steady-state summary (stored before schema 6), which the lane
    and list queries summarise from their steps: passed to them as a value (sql/lane_runs.sql says why)."""
    return [r["id"] for r in store.query_rows("unsummarised_receipts")]


def receipt_list(store: Store, *, include_superseded: bool = False, lane: str | None = None) -> list[dict[str, Any]]:
    """Newest first: sql/list_receipts.sql's columns, with the lane's fields for lane_key, `tags` (a list) for
    tags_json and the series headline (series_unit, time_to_train_s) for provenance_json. `include_superseded`:
    receipts replaced by a later ingest of the same run too; `lane`: only receipts whose host lineage, preset
    family or launch regime contains this text."""
    rows = store.query_rows("list_receipts", {"all": include_superseded, "unsummarised": unsummarised(store)})
    for r in rows:
        r.update(Lane.from_key(r.pop("lane_key")).as_dict())
        r["tags"] = _decoded(r.pop("tags_json"))
        r.update(series_headline(_decoded(r.pop("provenance_json") or "{}")))
    if lane:
        rows = [r for r in rows if any(lane in (r[k] or "") for k in FIELDS)]
    return rows


def _decoded(text: str) -> Any:
    """JSON as the standard module reads it, through orjson (a third of the time over 10,000 rows). orjson
    refuses NaN and Infinity, which json.dumps writes (store/rows.py dumps): those take the standard parser."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)
