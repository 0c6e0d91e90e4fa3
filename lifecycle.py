"""The identity lifecycle of stored receipts: correcting a claimed identity (`receipts retag`), noticing a
re-ingest that claims another identity, and one current receipt per run (superseding).

The store does the writing (one transaction each); this module decides what to write, re-resolving raw
values through the registry with schema/identity.py exactly as ingest does.
"""

from __future__ import annotations

from dataclasses import dataclass

from receipts.errors import UsageError
from receipts.schema.identity import IdentityChange, retagged_columns
from receipts.schema.registry import Registry
from receipts.store import Store
from receipts.store.base import RETAG_COLUMNS


@dataclass(frozen=True)
class RetagOutcome:
    receipt_id: str
    seq: int                                  # the identity_history row written
    changed: dict[str, tuple[object, object]]  # column -> (before, after)
    complete: bool
    warnings: tuple[str, ...] = ()


def retag(store: Store, ref: str, change: IdentityChange, *, why: str, registry: Registry) -> RetagOutcome:
    """Change a stored receipt's claimed identity, keeping the old one in identity_history."""
    if not why or not why.strip():
        raise UsageError("retag needs --why TEXT: the history records why an identity was changed")
    if change.empty:
        raise UsageError("retag needs something to change: --host-lineage, --preset, --regime, --run-name or --tag")
    receipt_id = store.resolve(ref)
    stored = store.query("receipt", {"receipt_id": receipt_id}).row(0, named=True)
    changes = retagged_columns(stored, change, registry)
    if not changes:
        raise UsageError(f"receipt {receipt_id} already has that identity; nothing to change")
    expected = {k: stored[k] for k in RETAG_COLUMNS}
    seq = store.retag(receipt_id, expected=expected, changes=changes, why=why.strip())
    after = {**expected, **changes}
    shown = {k: (stored[k], changes[k]) for k in changes if k not in ("resolution_json", "parallel_json")}
    return RetagOutcome(receipt_id, seq, shown, bool(after["identity_complete"]))
