"""The full picture of one receipt, as plain data: what `show --json` prints and the dashboard shows."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from receipts.analysis.listing import series_headline
from receipts.analysis.memory_geometry import geometry, load_sources
from receipts.analysis.record import load_many
from receipts.schema.lane import FIELDS, OPTION, Lane
from receipts.schema.version import IDENTITY_FIELDS

if TYPE_CHECKING:
    from receipts.store import Store


def receipt_report(store: "Store", receipt_id: str) -> dict[str, Any]:
    r = load_many(store, [receipt_id], series=False)[receipt_id]
    # The same summary compare prints (analysis.stats.summarize over the steady steps, stored at ingest by
    # analysis/summary.py): one statistics path, deterministic to the last bit, no step rows read.
    steps, tokens = r.step_summary, r.tokens_summary
    # plain rows (store.query_rows): `show` imports neither polars nor numpy
    memory = store.query_rows("receipt_memory", {"receipt_id": receipt_id})
    geo = geometry(load_sources(store, [receipt_id])[receipt_id], peak_allocated_bytes=r.peak_allocated_bytes,
                   peak_reserved_bytes=r.peak_reserved_bytes)
    sources = store.query_rows("receipt_sources", {"receipt_id": receipt_id})
    row = store.query_rows("receipt", {"receipt_id": receipt_id})[0]
    history = store.query_rows("identity_history", {"receipt_id": receipt_id})
    return {
        "id": r.id,
        "run_name": r.run_name,
        "source_format": row["source_format"],
        "identity": {
            **Lane.of(r).as_dict(), "complete": r.complete,
            "raw": {OPTION[f]: getattr(r.raw, f) for f in FIELDS},
            "hostname": r.hostname,
            "resolution": list(r.resolution),
            "regime": {"engine": row["engine"], "compile_mode": row["compile_mode"],
                       "parallel": json.loads(row["parallel_json"] or "{}")},
        },
        "tags": list(r.tags),
        "superseded_by": row["superseded_by"],
        "identity_history": [_history_entry(h) for h in history],
        **series_headline(r.provenance),
        "machine": {"machine_class": r.machine_class, "gpu_model": r.gpu_model, "gpu_count": r.gpu_count,
                    "world_size": r.world_size, "ranks_traced": r.ranks_traced, "gpus_on_host": r.gpus_on_host},
        "steady_state": {
            "median_step_ms": steps.median if steps else None, "p10_step_ms": steps.p10 if steps else None,
            "p90_step_ms": steps.p90 if steps else None, "mean_step_ms": steps.mean if steps else None,
            "cv": steps.cv if steps else None, "n_steps": steps.n if steps else 0,
            "first_step": r.window_first_step, "last_step": r.window_last_step,
            "warmup_steps": r.warmup_steps, "warmup_last_step": r.warmup_last_step,
            "window_rule": r.window_rule, "median_tokens_per_s": tokens.median if tokens else None,
        },
        "memory": _memory(r, memory, geo),
        "memory_geometry": geo,
        "telemetry": _telemetry(store, receipt_id),
        "phases": json.loads(row["phases_json"]),
        "ended_early": r.ended_early,
        "features": r.features,
        "software": r.software,
        "env": r.env,
        "topology": r.topology,
        "provenance": r.provenance,
        "sources": sources,
        "warnings": list(r.warnings),
        "started_at": r.started_at,
        "ingested_at": r.ingested_at,
        "noise_floor": _lane_floor(store, r),
    }


def _memory(r, per_rank: list[dict[str, Any]], geo: dict[str, Any]) -> dict[str, Any]:
    """The run's peaks: its log's where it has them, else what a memory source measured (a receipt made from a
    snapshot or a capture alone has no log peak). `source` names which."""
    out: dict[str, Any] = {"source": "receipt" if r.peak_allocated_bytes is not None else geo["source"]}
    for m, own in (("peak_allocated_bytes", r.peak_allocated_bytes), ("peak_reserved_bytes", r.peak_reserved_bytes)):
        out[m] = own if own is not None else geo.get(m)
    out["per_rank"] = per_rank
    return out


def _lane_floor(store: "Store", r) -> dict[str, Any] | None:
    """The run-to-run noise floor of the receipt's lane (analysis.noise); None for a rumor (no lane)."""
    from receipts.analysis.lanes import lane_floors, lane_of
    from receipts.analysis.noise import floor_json

    lane = lane_of(r)
    return floor_json(lane_floors(store, [lane])[lane]) if lane is not None else None


_HISTORY_FIELDS = tuple("tags" if f == "tags_json" else f for f in IDENTITY_FIELDS)


def _history_entry(h: dict[str, Any]) -> dict[str, Any]:
    """One retag: who, when, why, and the identity fields before and after (tags as lists)."""
    def side(age: str) -> dict[str, Any]:
        out = {f: h[f"{age}_{f}"] for f in _HISTORY_FIELDS if f != "tags"}
        out["tags"] = json.loads(h[f"{age}_tags_json"] or "[]")
        return out

    return {"seq": h["seq"], "changed_at": h["changed_at"], "changed_by": h["changed_by"], "why": h["why"],
            "old": side("old"), "new": side("new")}


def _telemetry(store: "Store", receipt_id: str) -> dict[str, Any] | None:
    """What NVML said while the run ran, per rank and across them (analysis/telemetry.py); None without it."""
    from receipts.analysis import telemetry

    return telemetry.to_json(telemetry.summarise(telemetry.load(store, [receipt_id]).get(receipt_id, ())))
