"""A receipt's memory geometry as `show`, `compare`, the gate and the dashboard give it: each bucket measured
and estimated, and the three gaps people ask about: estimate -> allocated, allocated -> reserved
(fragmentation), reserved -> device (headroom).

The measured side is one source, the first of: what receipts.capture measured in training (`capture`), an
attached PyTorch memory snapshot (`snapshot`), the receipt's own peaks (`receipt`); fields it lacks are
filled from the others, and `filled_from` says which. Of several ranks (or devices) it is the rank that
decides fit: the one with the highest peak allocated (the lowest rank of a tie). The estimated side is the
last estimate attached (`receipts estimate --attach`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from receipts.schema.memory import BUCKETS, ESTIMATE_FIELDS, MemoryGeometry

if TYPE_CHECKING:
    from receipts.store import Store

MEASURES = ("peak_allocated_bytes", "peak_reserved_bytes", "resident_bytes", "fragmentation_at_peak_bytes",
            "device_total_bytes", "alloc_retries", "ooms")
MEASURED_ORDER = ("capture", "snapshot")   # which measured source leads (then the receipt's own peaks)


@dataclass(frozen=True)
class Source:
    """One source of a receipt's geometry: its rows, one MemoryGeometry per rank or device."""

    kind: str
    source_sha256: str
    path: str | None
    ranks: tuple[MemoryGeometry, ...]

    @property
    def deciding(self) -> MemoryGeometry:
        """The rank (or device) with the highest peak allocated, the lowest of a tie."""
        return max(self.ranks, key=lambda g: (g.peak_allocated_bytes or 0, -(g.rank or 0), -(g.device or 0)))


def load_sources(store: "Store", receipt_ids: list[str]) -> dict[str, list[Source]]:
    """Every receipt's memory sources, in the order they were stored (two queries whatever the number)."""
    ids = list(dict.fromkeys(receipt_ids))
    out: dict[str, list[Source]] = {rid: [] for rid in ids}
    if not ids:
        return out
    categories: dict[tuple, list[tuple[str, int]]] = {}
    for c in store.query_rows("memory_categories_many", {"ids": ids}):
        categories.setdefault((c["receipt_id"], c["source_sha256"], c["rank"], c["device"]), []).append(
            (c["category"], int(c["bytes"])))
    by_source: dict[tuple[str, str], tuple[str, str | None, list[MemoryGeometry]]] = {}
    for r in store.query_rows("memory_ranks_many", {"ids": ids}):
        key = (r["receipt_id"], r["source_sha256"])
        g = MemoryGeometry(r["kind"], r["rank"], r["device"], **{m: r[m] for m in MEASURES},
                           categories=_ordered(r["kind"], categories.get((*key, r["rank"], r["device"]), [])),
                           detail=json.loads(r["detail_json"]), warnings=tuple(json.loads(r["warnings_json"])))
        by_source.setdefault(key, (r["kind"], r["path"], []))[2].append(g)
    for (rid, sha), (kind, path, ranks) in by_source.items():
        out[rid].append(Source(kind, sha, path, tuple(ranks)))
    return out


def _ordered(kind: str, categories: list[tuple[str, int]]) -> tuple[tuple[str, int], ...]:
    from receipts.schema.memory import SNAPSHOT_CATEGORIES

    order = {"capture": BUCKETS, "snapshot": SNAPSHOT_CATEGORIES, "estimate": tuple(ESTIMATE_FIELDS)}.get(kind, ())
    rank = {name: i for i, name in enumerate(order)}
    return tuple(sorted(categories, key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])))


def geometry(sources: list[Source], *, peak_allocated_bytes: int | None = None,
             peak_reserved_bytes: int | None = None) -> dict[str, Any]:
    """The `memory_geometry` of `show --json`: the measured side, the estimate, bucket by bucket, and the gaps.
    `peak_*`: the receipt's own peaks (its log's), the measured side when no source measured more."""
    measured = [s for kind in MEASURED_ORDER for s in sources if s.kind == kind]
    estimates = [s for s in sources if s.kind == "estimate"]
    lead = measured[0].deciding if measured else None
    out: dict[str, Any] = {"source": lead.kind if lead else ("receipt" if peak_allocated_bytes is not None else None),
                           "rank": lead.rank if lead else None, "device": lead.device if lead else None}
    filled: dict[str, str] = {}
    for m in MEASURES:
        value = getattr(lead, m) if lead else None
        for other in measured[1:]:
            if value is None and getattr(other.deciding, m) is not None:
                value, filled[m] = getattr(other.deciding, m), other.kind
        out[m] = value
    for m, value in (("peak_allocated_bytes", peak_allocated_bytes), ("peak_reserved_bytes", peak_reserved_bytes)):
        if out[m] is None and value is not None:
            out[m], filled[m] = value, "receipt"
    out["categories"] = dict(lead.categories) if lead else {}
    estimate = estimates[-1].ranks[0] if estimates else None
    if out["device_total_bytes"] is None and estimate is not None and estimate.device_total_bytes is not None:
        out["device_total_bytes"], filled["device_total_bytes"] = estimate.device_total_bytes, "estimate"
    out["filled_from"] = filled
    out["estimates"] = _labelled([_estimate(s) for s in estimates])
    out["estimate"] = out["estimates"][-1] if estimates else None
    out["buckets"] = _buckets(_measured(out["source"], out["categories"]), out["source"], out["estimates"])
    out["gaps"] = _gaps(out)
    out["sources"] = [{"kind": s.kind, "source_sha256": s.source_sha256, "path": s.path,
                       "ranks": [_rank_json(g) for g in s.ranks]} for s in sources]
    return out


def _rank_json(g: MemoryGeometry) -> dict[str, Any]:
    return {"rank": g.rank, "device": g.device, **{m: getattr(g, m) for m in MEASURES},
            "categories": dict(g.categories), "detail": g.detail, "warnings": list(g.warnings)}


def _estimate(s: Source) -> dict[str, Any]:
    g = s.ranks[0]
    fields = dict(g.categories)
    buckets: dict[str, int] = {}
    for name, value in fields.items():
        bucket = ESTIMATE_FIELDS.get(name)
        if bucket is not None:
            buckets[bucket] = buckets.get(bucket, 0) + value
    reserve = sum(v for k, v in fields.items() if k in ESTIMATE_FIELDS and ESTIMATE_FIELDS[k] is None)
    allocated = g.peak_allocated_bytes if g.peak_allocated_bytes is not None else sum(buckets.values())
    return {"categories": fields, "buckets": buckets, "allocated_bytes": allocated,
            "total_bytes": allocated + reserve, "method": g.detail.get("method", "closed form"),
            "phases": g.detail.get("phases") or {}, "source_sha256": s.source_sha256, "path": s.path,
            "notes": list(g.warnings)}


def _labelled(estimates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each estimate named by its method, numbered when two share one ('closed form', 'FSDPMemTracker #2')."""
    seen: dict[str, int] = {}
    for e in estimates:
        seen[e["method"]] = seen.get(e["method"], 0) + 1
        e["label"] = e["method"] if seen[e["method"]] == 1 else f"{e['method']} #{seen[e['method']]}"
    return estimates


# A snapshot's categories at its peak that are one of the estimate's buckets: what a module's forward allocated
# (recomputation included) is activations, what an optimizer's step allocated is optimizer state. `resident`
# (allocated before recording began) is the parameters and the optimizer state created in earlier steps, the
# estimate's two buckets together; `backward` mixes gradients with backward's temporaries and stays its own row.
SNAPSHOT_BUCKETS = {"forward": "activations", "optimizer": "optimizer_state"}
RESIDENT = "resident"
RESIDENT_BUCKETS = ("parameters", "optimizer_state")


def _measured(source: str | None, categories: dict[str, int]) -> dict[str, int]:
    if source == "capture":
        return dict(categories)
    if source != "snapshot":
        return {}
    out: dict[str, int] = {}
    for name, value in categories.items():
        bucket = SNAPSHOT_BUCKETS.get(name, name)
        out[bucket] = out.get(bucket, 0) + value
    return out


def _buckets(measured: dict[str, int], source: str | None, estimates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per bucket: measured (by the lead source) beside every attached estimate, with the last estimate's
    error (estimated - measured). A snapshot's `resident` row is set beside the estimate's parameters and
    optimizer state together."""
    last = estimates[-1] if estimates else None
    names = [b for b in BUCKETS if b in measured or any(b in e["buckets"] for e in estimates)]
    names += [n for n in measured if n not in names]
    rows = []
    for bucket in names:
        m = measured.get(bucket)
        by_estimate = {e["label"]: _estimated(e, bucket) for e in estimates}
        e = _estimated(last, bucket) if last else None
        if m is None and e is None:
            continue
        error = e - m if m is not None and e is not None else None
        rows.append({"bucket": bucket, "measured_bytes": m, "measured_by": source if m is not None else None,
                     "estimated_bytes": e, "estimated": by_estimate, "error_bytes": error,
                     "error_pct": 100.0 * error / m if error is not None and m else None})
    if last:
        for name in ("runtime_reserve", "overhead"):
            rows.append({"bucket": name, "measured_bytes": None, "measured_by": None,
                         "estimated_bytes": last["categories"].get(name, 0),
                         "estimated": {e["label"]: e["categories"].get(name, 0) for e in estimates},
                         "error_bytes": None, "error_pct": None})
    return rows


def _estimated(e: dict[str, Any], bucket: str) -> int | None:
    if bucket == RESIDENT:
        parts = [e["buckets"].get(b) for b in RESIDENT_BUCKETS]
        return sum(p for p in parts if p is not None) if any(p is not None for p in parts) else None
    return e["buckets"].get(bucket)


def _gaps(g: dict[str, Any]) -> dict[str, Any]:
    allocated, reserved, device = g["peak_allocated_bytes"], g["peak_reserved_bytes"], g["device_total_bytes"]
    estimate = g["estimate"]
    fragmentation, rule = g["fragmentation_at_peak_bytes"], "reserved - allocated at the allocated peak"
    if fragmentation is None and allocated is not None and reserved is not None:
        fragmentation, rule = reserved - allocated, "peak reserved - peak allocated (two moments: an upper bound)"
    return {
        "estimate_to_allocated_bytes": allocated - estimate["allocated_bytes"] if estimate and allocated is not None
        and estimate["allocated_bytes"] is not None else None,
        "fragmentation_bytes": fragmentation, "fragmentation_rule": rule if fragmentation is not None else None,
        "headroom_bytes": device - reserved if device is not None and reserved is not None else None,
    }


def geometries_in_store(store: "Store", receipt_ids: list[str]) -> dict[str, dict[str, Any]]:
    """`geometry` of each receipt, its own peaks read beside its sources."""
    from receipts.analysis.record import load_many

    loaded = load_many(store, receipt_ids, series=False)
    sources = load_sources(store, receipt_ids)
    return {rid: geometry(sources[rid], peak_allocated_bytes=loaded[rid].peak_allocated_bytes,
                          peak_reserved_bytes=loaded[rid].peak_reserved_bytes) for rid in loaded}


# ---- between two receipts -----------------------------------------------------------------------------
DRIFT_TOTALS = ("peak_allocated_bytes", "peak_reserved_bytes", "resident_bytes", "fragmentation_at_peak_bytes")


def drift(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """`memory_drift` of `compare --json`: one row per bucket, then per total, A's bytes, B's and B - A, each group
    largest move first: the first entry names the bucket that moved most. A bucket's bytes are the measured ones
    when both sides were measured by the same kind of source (capture, or snapshot categories mapped onto the
    buckets), else the last attached estimates' when both have one (`kind`: estimate); a bucket one side lacks
    counts 0 there when the two sides come from the same kind of source. Totals either side lacks are left out;
    the lowest level between steps is `resident_between_steps` (a snapshot's `resident` bucket is another thing:
    what was allocated before recording)."""
    out = []
    rows_a = {r["bucket"]: r for r in a.get("buckets", []) if r["bucket"] not in ("runtime_reserve", "overhead")}
    rows_b = {r["bucket"]: r for r in b.get("buckets", []) if r["bucket"] not in ("runtime_reserve", "overhead")}
    measured = a["source"] == b["source"] and a["source"] in ("capture", "snapshot")
    for name in dict.fromkeys([*rows_a, *rows_b]):
        ra, rb = rows_a.get(name, {}), rows_b.get(name, {})
        ma, mb = ra.get("measured_bytes"), rb.get("measured_bytes")
        if measured and (ma is not None or mb is not None):
            ab, bb, kind = ma or 0, mb or 0, a["source"]
        elif ra.get("estimated_bytes") is not None and rb.get("estimated_bytes") is not None:
            ab, bb, kind = ra["estimated_bytes"], rb["estimated_bytes"], "estimate"
        else:
            continue
        out.append({"category": name, "kind": kind, "a_bytes": ab, "b_bytes": bb, "delta_bytes": bb - ab})
    for name in DRIFT_TOTALS:
        if a[name] is not None and b[name] is not None:
            label = "resident_between_steps" if name == "resident_bytes" else name.removesuffix("_bytes")
            out.append({"category": label, "kind": "total", "a_bytes": a[name], "b_bytes": b[name],
                        "delta_bytes": b[name] - a[name]})
    return sorted(out, key=lambda d: (d["kind"] == "total", -abs(d["delta_bytes"])))


def moved(drifts: list[dict[str, Any]]) -> str | None:
    """The bucket (not a total) that moved most, None when none moved."""
    buckets = [d for d in drifts if d["kind"] != "total" and d["delta_bytes"]]
    return buckets[0]["category"] if buckets else None


def bucket_bytes(g: dict[str, Any], name: str) -> int | None:
    """A bucket's (or category's, or total's) bytes on the measured side: what a gate claim bounds."""
    if name in g["categories"]:
        return g["categories"][name]
    return g.get(f"{name}_bytes") if name in [m.removesuffix("_bytes") for m in MEASURES] else None

