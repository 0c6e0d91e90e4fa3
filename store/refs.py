"""Receipt references: an id, a unique id prefix or a run name to the receipt it means, and when none matches,
the current run names spelled like it (a typo's likely meaning)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol

from receipts.errors import ReceiptNotFound


class Store(Protocol):
    """What resolving reads: the store's named queries as plain rows (store.base.Store has them), so that naming a
    receipt costs no polars import."""

    def query_rows(self, name: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]: ...


def resolve(store: Store, ref: str) -> str:
    """A receipt id, a unique id prefix, or a run name. A run name means its current receipt (one not
    superseded by a later ingest of the same run); an explicit id or prefix may name a superseded one."""
    found = store.query_rows("resolve_ref", {"ref": ref, "prefix": ref.lower() + "%"})
    rows = [(r["id"], r["run_name"], r["match"], r["superseded_by"]) for r in found]
    answer = _pick(ref, rows)
    if isinstance(answer, ReceiptNotFound):
        raise answer if answer.candidates else replace(answer, close=_spelled_like(store, ref))
    return answer


def _spelled_like(store: Store, ref: str) -> tuple[str, ...]:
    """Current run names close to `ref` (difflib's ratio >= 0.8), closest first: read only when a reference
    matched nothing."""
    import difflib

    names = [r["run_name"] for r in store.query_rows("current_run_names")]
    return tuple(difflib.get_close_matches(ref, names, n=3, cutoff=0.8))


def resolve_many(store: Store, refs: list[str], *, current_only: bool = False) -> dict[str, str | ReceiptNotFound]:
    """Resolve many references with one read; each maps to an id or the ReceiptNotFound it would raise.

    current_only (the gate): a reference to a superseded receipt is refused, naming its successor."""
    rows = [tuple(r.values()) for r in store.query_rows("receipt_refs")]
    out: dict[str, str | ReceiptNotFound] = {}
    for ref in dict.fromkeys(refs):
        prefix = ref.lower()
        matches = [(rid, name, "id", sup) for rid, name, _, sup in rows if rid == ref]
        matches += [(rid, name, "run_name", sup) for rid, name, _, sup in rows if name == ref]
        matches += [(rid, name, "prefix", sup) for rid, name, _, sup in rows if ref and rid.startswith(prefix)]
        answer = _pick(ref, matches)
        if current_only and isinstance(answer, str):
            successor = next((sup for rid, _, _, sup in rows if rid == answer and sup), None)
            if successor:
                answer = ReceiptNotFound(ref, (f"{answer}, superseded by {successor} (a later ingest of the "
                                               "same run; name that one)",))
        out[ref] = answer
    return out


def _pick(ref: str, rows: list[tuple[str, str, str, str | None]]) -> str | ReceiptNotFound:
    """rows: (id, run_name, match kind, superseded_by). An exact id wins; then a run name, current receipts
    only (the newest superseded one when none is current); then a unique id prefix."""
    exact = [r for r in rows if r[2] == "id"]
    if exact:
        return exact[0][0]
    by_name = [r for r in rows if r[2] == "run_name"]
    current = [r for r in by_name if r[3] is None] or by_name[:1]
    if len(current) == 1:
        return current[0][0]
    if len(current) > 1:
        return ReceiptNotFound(ref, tuple(f"{r[0]} ({r[1]})" for r in current))
    by_prefix = [r for r in rows if r[2] == "prefix"]
    if len(by_prefix) == 1:
        return by_prefix[0][0]
    return ReceiptNotFound(ref, tuple(r[0] for r in by_prefix))
