"""Which receipts have a profile attached (an nsys export, Kineto traces), and its export's facts: what `explain`,
`check` and `compare` ask before they read any component. Plain rows: a comparison of log-only runs stops here."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # analysis reads through the Store interface
    from receipts.store import Store


def profiled(store: "Store", ids: list[str]) -> dict[str, dict]:
    """The newest attached export of each of `ids` that has one: source_sha256, source_format (nsys / kineto) and
    has_steps (whether it has steady steps, hence component rows)."""
    if not ids:
        return {}
    return {r["receipt_id"]: r for r in store.query_rows("explain_profiled", {"ids": ids})}
