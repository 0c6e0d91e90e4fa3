"""The straggler reports stored at ingest (analysis/stragglers.py made them), as read back: a receipt's report, and
whether a straggler explains why two runs' step times differ. Plain rows and JSON: `compare`, `explain` and
`history` read them without the frames the analysis is computed with."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:  # analysis reads through the Store interface
    from receipts.store import Store


def stored_reports(rows: Iterable[dict]) -> list[dict]:
    """The reports of a receipt's exports from sql/stragglers.sql rows (newest first), each with the export it
    came from; exports without one (single-rank, or no communication) are skipped."""
    return [{**json.loads(r["stragglers_json"]), "source": r["path"], "source_format": r["source_format"]}
            for r in rows if r["stragglers_json"]]


def stored_report(store: "Store", receipt_id: str) -> dict | None:
    """The report of a receipt's newest multi-rank export, or None."""
    found = stored_reports(store.query_rows("stragglers", {"receipt_id": receipt_id}))
    return found[0] if found else None


def stored_report_many(store: "Store", receipt_ids: list[str]) -> dict[str, dict]:
    """stored_report of each receipt that has one, in one query."""
    if not receipt_ids:
        return {}
    by_receipt: dict[str, list[dict]] = {}
    for row in store.query_rows("stragglers_many", {"ids": receipt_ids}):
        by_receipt.setdefault(row["receipt_id"], []).append(row)
    return {rid: found[0] for rid, rows in by_receipt.items() if (found := stored_reports(rows))}


EXPLAINS_SHARE = 0.5  # a straggler explains a difference when its impact change covers >= half of it


def explains(a: dict | None, b: dict | None, a_median_ms: float | None, b_median_ms: float | None) -> dict | None:
    """Does a straggler explain why B's step time differs from A's? `a` / `b`: stored report_json of each run's
    newest multi-rank export (None: none attached). Compares the named stragglers' what-if impact (ms per
    step) with the difference of the run medians; None when neither run has a report."""
    if (a is None and b is None) or a_median_ms is None or b_median_ms is None:
        return None
    def cost(rep: dict | None) -> tuple[float, list[int]]:
        named = (rep or {}).get("stragglers") or []
        return sum(s["impact_ms_per_step"] for s in named), [s["rank"] for s in named]
    (ca, ra), (cb, rb) = cost(a), cost(b)
    diff, change = b_median_ms - a_median_ms, cb - ca
    explained = diff != 0 and change * diff > 0 and abs(change) >= EXPLAINS_SHARE * abs(diff)
    side, ranks = ("B", rb) if change >= 0 else ("A", ra)
    if explained:
        note = (f"a straggler explains it: {side}'s rank(s) {ranks} cost {abs(change):.3f} ms per step more than the "
                f"other run's, {abs(change) / abs(diff):.0%} of the {diff:+.3f} ms difference")
    else:
        note = (f"no straggler explains the {diff:+.3f} ms difference (straggler impact A {ca:.3f} ms, B {cb:.3f} ms "
                f"per step{'; a run has no multi-rank export' if a is None or b is None else ''})")
    return {"explained": explained, "note": note, "a_impact_ms_per_step": ca, "b_impact_ms_per_step": cb,
            "a_stragglers": ra, "b_stragglers": rb, "difference_ms": diff}
