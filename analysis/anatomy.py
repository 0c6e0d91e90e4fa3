"""Step-time anatomy of one receipt, as plain data (what `anatomy --json` prints and the dashboard draws)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from receipts.errors import UsageError

if TYPE_CHECKING:
    from receipts.store import Store


def anatomy_report(store: "Store", receipt_id: str, *, source_sha256: str | None = None) -> dict[str, Any]:
    sources = store.query("anatomy_sources", {"receipt_id": receipt_id})
    if sources.height == 0:
        raise UsageError(f"receipt {receipt_id} has no profiler export attached "
                         f"(receipts ingest run.sqlite --attach {receipt_id})")
    if source_sha256 is None:
        source = sources.row(0, named=True)
    else:
        match = sources.filter(sources["source_sha256"].str.starts_with(source_sha256))
        if match.height != 1:
            raise UsageError(f"--source {source_sha256!r} matches {match.height} of the exports attached to {receipt_id}")
        source = match.row(0, named=True)
    params = {"receipt_id": receipt_id, "source_sha256": source["source_sha256"]}
    rows = store.query("anatomy_rows", params)
    window = store.query("anatomy_window", params)
    steps = store.query("anatomy_steps", params)
    nvtx = store.query("anatomy_nvtx", params)
    # Window totals (step null) for the steady state, per rank: the contract's "step: null" rows.
    steady_totals = [
        {"rank": r["rank"], "step": None, "category": r["category"], "time_ms": r["time_ms"]}
        for r in window.iter_rows(named=True) if r["phase"] in ("steady", "window")
    ]
    per_step = [{"rank": r["rank"], "step": r["step"], "category": r["category"], "time_ms": r["time_ms"],
                 "warmup": r["warmup"]} for r in rows.iter_rows(named=True) if r["step"] is not None]
    return {
        "receipt_id": receipt_id,
        "source": {"sha256": source["source_sha256"], "format": source["source_format"], "path": source["path"],
                   "schema_version": source["schema_version"], "step_marker": source["step_marker"],
                   "attribution": source["attribution"], "unattributed": source["unattributed"],
                   "warnings": json.loads(source["warnings_json"])},
        "other_sources": sources["source_sha256"].to_list()[1:] if source_sha256 is None else [],
        "rows": per_step + steady_totals,
        "window": window.to_dicts(),
        "steps": steps.to_dicts(),
        "nvtx": nvtx.to_dicts(),
    }
