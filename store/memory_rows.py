"""MemoryGeometry records -> rows of memory_sources, memory_ranks and memory_categories (schema/tables.py)."""

from __future__ import annotations

from typing import Any

from receipts.schema.memory import MemoryGeometry
from receipts.store.rows import dumps

MEMORY_TABLES = ("memory_sources", "memory_ranks", "memory_categories")
_MEASURES = ("peak_allocated_bytes", "peak_reserved_bytes", "resident_bytes", "fragmentation_at_peak_bytes",
             "device_total_bytes", "alloc_retries", "ooms")


def memory_rows(receipt_id: str, source_sha256: str, geometries: tuple[MemoryGeometry, ...]) -> dict[str, list[dict[str, Any]]]:
    """One source's geometries (all of one kind) as rows; nothing for none."""
    if not geometries:
        return {}
    key = {"receipt_id": receipt_id, "source_sha256": source_sha256}
    ranks, categories = [], []
    for g in geometries:
        where = {**key, "rank": g.rank, "device": g.device}
        ranks.append({**where, **{m: getattr(g, m) for m in _MEASURES}, "detail_json": dumps(g.detail),
                      "warnings_json": dumps(list(g.warnings))})
        categories += [{**where, "category": name, "bytes": int(value)} for name, value in g.categories]
    return {"memory_sources": [{**key, "kind": geometries[0].kind}], "memory_ranks": ranks,
            "memory_categories": categories}
