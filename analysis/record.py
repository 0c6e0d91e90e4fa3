"""A stored receipt as the analysis layer sees it: identity, context and the steady-state series."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from receipts.analysis import summary
from receipts.analysis.figures import RunInterval, Summary
from receipts.schema.lane import FIELDS, RAW, Lane

if TYPE_CHECKING:  # analysis reads through the Store interface; it never imports a backend
    import numpy as np

    from receipts.store import Store


@dataclass(frozen=True)
class StoredReceipt:
    id: str
    run_name: str
    lane: Lane  # canonical; a rumor's missing values are None
    raw: Lane   # as claimed (schema/lane.py RAW's columns)
    complete: bool
    resolution: tuple[str, ...]
    hostname: str | None
    machine_class: str | None
    gpu_model: str | None
    gpu_count: int | None
    world_size: int | None
    ranks_traced: int | None
    gpus_on_host: int | None
    features: dict[str, Any]
    software: dict[str, Any]
    topology: dict[str, Any]
    provenance: dict[str, Any]
    env: dict[str, str | None]           # unset knobs map to None; redacted values to '<redacted>'
    tags: tuple[str, ...]
    window_first_step: int | None
    window_last_step: int | None
    warmup_steps: int
    warmup_last_step: int | None
    window_rule: str
    ended_early: str | None
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    started_at: str | None
    ingested_at: str
    # The steady series; None when loaded with series=False and a stored summary (show, compare need no more)
    steady_step_ms: np.ndarray | None = field(repr=False)
    steady_tokens_per_s: np.ndarray | None = field(repr=False)
    # The steady-state statistics (analysis/summary.py): stored at ingest, else computed from the series.
    step_summary: Summary | None = None
    step_interval: RunInterval | None = None
    tokens_summary: Summary | None = None
    tokens_interval: RunInterval | None = None
    warnings: tuple[str, ...] = ()
    phases: tuple[tuple[str, int | None, int | None], ...] = ()  # (phase, first_step, last_step)
    superseded_by: str | None = None     # a later ingest of the same run replaced this receipt
    source_format: str | None = None     # the log's format ('megatron', 'receipt+nanochat', 'receipt', ...)

    @property
    def step_series(self) -> np.ndarray:
        """The steady step times (ms), as load_many reads them by default (series=True)."""
        return _loaded(self, self.steady_step_ms)

    @property
    def tokens_series(self) -> np.ndarray:
        """The steady tokens/s, as load_many reads them by default (series=True)."""
        return _loaded(self, self.steady_tokens_per_s)


def _loaded(r: StoredReceipt, series: np.ndarray | None) -> np.ndarray:
    if series is None:  # a caller's mistake, never the input's: it asked for a summary-only read
        raise ValueError(f"{r.run_name} ({r.id[:12]}) was read without its step series (load_many(series=False))")
    return series


def load(store: "Store", receipt_id: str) -> StoredReceipt:
    return load_many(store, [receipt_id])[receipt_id]


def load_many(store: "Store", receipt_ids: list[str], *, series: bool = True) -> dict[str, StoredReceipt]:
    """Several receipts in a few queries, whatever their number (the gate loads hundreds). `series=False`: the
    step series are read only for receipts without a stored summary (show and compare need no more)."""
    ids = list(dict.fromkeys(receipt_ids))
    # Plain rows, not frames: a read of stored figures (`show`, `compare`) imports neither polars nor numpy.
    rows = store.query_rows("receipts_many", {"ids": ids})
    env_rows = store.query_rows("receipt_env_many", {"ids": ids})
    stored = summary.stored_many(store, ids)
    need = ids if series else [i for i in ids if i not in stored]
    series_of = summary.series_by_receipt(store.query("steady_steps_many", {"ids": need}), need) if need else {}
    envs: dict[str, dict[str, str | None]] = {i: {} for i in ids}
    for r in env_rows:
        envs[r["receipt_id"]][r["name"]] = ("<redacted>" if r["redacted"] else r["value"]) if r["is_set"] else None
    out = {}
    for row in rows:
        rid = row["id"]
        step_ms, tokens = series_of.get(rid) or (None, None)
        stats = stored.get(rid) or summary.summarise(*series_of[rid])
        step_summary, step_interval = summary.parts(stats, "step_ms")
        tokens_summary, tokens_interval = summary.parts(stats, "tokens_per_s")
        out[rid] = replace(_from_row(row, envs.get(rid, {}), step_ms, tokens), step_summary=step_summary,
                           step_interval=step_interval, tokens_summary=tokens_summary, tokens_interval=tokens_interval)
    missing = [i for i in ids if i not in out]
    if missing:
        from receipts.errors import ReceiptNotFound

        raise ReceiptNotFound(missing[0])
    return out


def _from_row(row: dict, env: dict, step_ms: np.ndarray | None, tokens: np.ndarray | None) -> StoredReceipt:
    return StoredReceipt(
        id=row["id"], run_name=row["run_name"],
        lane=Lane.of(row), raw=Lane(*(row[RAW[f]] for f in FIELDS)),
        complete=bool(row["identity_complete"]), resolution=tuple(json.loads(row["resolution_json"] or "[]")),
        hostname=row["hostname"], machine_class=row["machine_class"], gpu_model=row["gpu_model"],
        gpu_count=row["gpu_count"], world_size=row["world_size"],
        ranks_traced=row.get("ranks_traced"), gpus_on_host=row.get("gpus_on_host"),
        features=json.loads(row["features_json"]), software=json.loads(row["software_json"]),
        topology=json.loads(row["topology_json"]), provenance=json.loads(row["provenance_json"]),
        env=env, tags=tuple(json.loads(row["tags_json"])),
        window_first_step=row["window_first_step"], window_last_step=row["window_last_step"],
        warmup_steps=row["warmup_steps"], warmup_last_step=row["warmup_last_step"], window_rule=row["window_rule"],
        ended_early=row["ended_early"], peak_allocated_bytes=row["peak_allocated_bytes"],
        peak_reserved_bytes=row["peak_reserved_bytes"], started_at=row["started_at"], ingested_at=row["ingested_at"],
        steady_step_ms=step_ms, steady_tokens_per_s=tokens,
        warnings=tuple(json.loads(row["warnings_json"])),
        phases=tuple((str(p[0]), p[1], p[2]) for p in json.loads(row["phases_json"] or "[]")),
        superseded_by=row.get("superseded_by"), source_format=row.get("source_format"),
    )
