"""Copy receipts from one store to another (`receipts push`): an air-gapped node ingests into its own
DuckDB file, then pushes to the team's PostgreSQL store when it can reach it.

Rows are copied as stored (ids, ingested_at, warm-up flags), not re-derived, so both stores answer
every sql/ query the same. Each receipt goes in its own transaction through the target's copy API (Store.copy_*),
whose unique constraints decide what is already there: pushing twice, or from two nodes at once,
copies each receipt exactly once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from receipts.schema.model import FACT_SECTIONS
from receipts.errors import StoreError
from receipts.schema.tables import BULK_TABLES, IDENTITY_FIELDS, metadata
from receipts.store.base import RETAG_COLUMNS, Store

# Tables keyed by receipt_id that belong to the receipt itself (anatomy ones travel per export). Its
# identity_history travels with it, so a receipt retagged before the push arrives with its audit trail.
RECEIPT_TABLES = ("receipt_steps", "receipt_env", "receipt_memory", "receipt_summaries", "receipt_sources",
                  "identity_history")
ANATOMY_TABLES = ("anatomy_rows", "anatomy_steps", "anatomy_nvtx", "anatomy_kernels")


@dataclass
class PushResult:
    receipts_copied: int = 0
    receipts_skipped: int = 0          # same content hash already in the target
    anatomy_copied: int = 0            # profiler exports attached after the receipt was pushed
    anatomy_skipped: int = 0
    facts_copied: int = 0              # machine-fact files attached after the receipt was pushed
    copied_ids: list[str] = field(default_factory=list)
    retags_copied: int = 0             # identity_history rows of retags made locally after the receipt was pushed
    retags_diverged: list[str] = field(default_factory=list)  # retagged on both sides since: left for a human


def _select(source: Store, table: str, where: str, params: dict[str, Any]) -> pl.DataFrame:
    columns = ", ".join(f'"{c.name}"' for c in metadata.tables[table].columns)
    # Table and column names come from schema/tables.py, never from input; values are parameters.
    return source.sql(f"SELECT {columns} FROM {table} WHERE {where}", params)


def _rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
    return frame.to_dicts()


def _anatomy_payload(source: Store, receipt_id: str, source_sha256: str | None):
    """anatomy_sources rows and the three anatomy frames of one receipt (one export when sha given)."""
    where = "receipt_id = $id" + (" AND source_sha256 = $sha" if source_sha256 else "")
    params = {"id": receipt_id, **({"sha": source_sha256} if source_sha256 else {})}
    small = {"anatomy_sources": _rows(_select(source, "anatomy_sources", where, params))}
    bulk = {table: _select(source, table, where, params) for table in ANATOMY_TABLES}
    return small, bulk


def push(source: Store, target: Store) -> PushResult:
    """Copy every receipt (and every attached export) of `source` that `target` lacks."""
    result = PushResult()
    present = set(target.sql("SELECT content_sha256 FROM receipts")["content_sha256"].to_list())
    attached = {tuple(r) for r in target.sql("SELECT receipt_id, source_sha256 FROM anatomy_sources").iter_rows()}
    # Machine-fact files the target lacks, looked up once for the whole push.
    target_sources = {tuple(r) for r in target.sql("SELECT receipt_id, sha256 FROM receipt_sources").iter_rows()}
    missing_facts: dict[str, list[dict[str, Any]]] = {}
    for row in _rows(_select(source, "receipt_sources", "list_contains($roles, role)", {"roles": sorted(FACT_SECTIONS)})):
        if (row["receipt_id"], row["sha256"]) not in target_sources:
            missing_facts.setdefault(row["receipt_id"], []).append(row)
    target_history, local_history = _history_keys(target), _history_keys(source)
    local = source.sql("SELECT id, content_sha256 FROM receipts ORDER BY ingested_at, id")
    for receipt_id, content_sha256 in local.iter_rows():
        if content_sha256 not in present and _copy_receipt(source, target, receipt_id, content_sha256):
            result.receipts_copied += 1
            result.copied_ids.append(receipt_id)
            continue
        result.receipts_skipped += 1
        # The receipt was there already; exports attached to it locally since then still travel.
        exports = source.sql("SELECT source_sha256 FROM anatomy_sources WHERE receipt_id = $id ORDER BY source_sha256",
                             {"id": receipt_id})["source_sha256"].to_list()
        for sha in exports:
            if (receipt_id, sha) in attached or not _copy_attachment(source, target, receipt_id, sha):
                result.anatomy_skipped += 1
            else:
                result.anatomy_copied += 1
        if receipt_id in missing_facts:
            result.facts_copied += _copy_facts(source, target, receipt_id, missing_facts[receipt_id])
        here, there = local_history.get(receipt_id, []), target_history.get(receipt_id, [])
        if here[:len(there)] != there and there[:len(here)] != here:
            result.retags_diverged.append(receipt_id)            # each side has retags the other lacks
        elif len(here) > len(there):
            copied = _copy_retags(source, target, receipt_id, len(there))
            if copied:
                result.retags_copied += copied
            else:
                result.retags_diverged.append(receipt_id)
    return result


def _history_keys(store: Store) -> dict[str, list[tuple]]:
    """Per receipt, its retags in order as (seq, changed_at, changed_by, why): enough to tell whether one
    store's history continues the other's."""
    out: dict[str, list[tuple]] = {}
    rows = store.sql("SELECT receipt_id, seq, changed_at, changed_by, why FROM identity_history ORDER BY receipt_id, seq")
    for receipt_id, *key in rows.iter_rows():
        out.setdefault(receipt_id, []).append(tuple(key))
    return out


def _copy_retags(source: Store, target: Store, receipt_id: str, after_seq: int) -> int:
    """Retags made locally after the receipt was pushed: the target's identity becomes the local one and
    the local history rows are appended as they are. Only when they continue the target's history (its
    identity is still what the first of them changed from); otherwise 0 and nothing is written."""
    history = _rows(_select(source, "identity_history", "receipt_id = $id AND seq > $seq ORDER BY seq",
                            {"id": receipt_id, "seq": after_seq}))
    columns = ", ".join(RETAG_COLUMNS)      # ours (store/base.py)
    there = target.sql(f"SELECT {columns} FROM receipts WHERE id = $id", {"id": receipt_id}).row(0, named=True)
    here = source.sql(f"SELECT {columns} FROM receipts WHERE id = $id", {"id": receipt_id}).row(0, named=True)
    if any(there[f] != history[0][f"old_{f}"] for f in IDENTITY_FIELDS):
        return 0
    changes = {c: here[c] for c in RETAG_COLUMNS if here[c] != there[c]}
    try:
        target.replay_retags(receipt_id, expected=there, changes=changes, history=history)
    except StoreError:
        return 0                            # retagged there meanwhile (row changed or seq taken)
    return len(history)


def _copy_facts(source: Store, target: Store, receipt_id: str, fact_sources: list[dict[str, Any]]) -> int:
    """Fact files attached locally that the target's copy of the receipt lacks: each merges the local
    receipt's fact column into the target's (the same dict merge `attach_facts` does, under its row lock)."""
    merged = source.sql("SELECT topology_json, software_json FROM receipts WHERE id = $id", {"id": receipt_id}).row(0, named=True)
    copied = 0
    for row in fact_sources:
        column = f"{FACT_SECTIONS[row['role']]}_json"
        copied += target.copy_facts(receipt_id, column, json.loads(merged[column] or "{}"), row)
    return copied


def _copy_receipt(source: Store, target: Store, receipt_id: str, content_sha256: str) -> bool:
    params = {"id": receipt_id}
    small = {"receipts": _rows(_select(source, "receipts", "id = $id", params))}
    bulk: dict[str, pl.DataFrame] = {}
    for table in RECEIPT_TABLES:
        frame = _select(source, table, "receipt_id = $id", params)
        if table in BULK_TABLES:
            bulk[table] = frame
        else:
            small[table] = _rows(frame)
    anatomy_small, anatomy_bulk = _anatomy_payload(source, receipt_id, None)
    small.update(anatomy_small)
    bulk.update(anatomy_bulk)
    # Receipts this one superseded locally, pushed earlier while still current, are superseded there too.
    earlier = tuple(source.sql("SELECT id FROM receipts WHERE superseded_by = $id", params)["id"].to_list())
    return target.copy_receipt_rows(content_sha256=content_sha256, small=small, bulk=bulk, supersedes=earlier)


def _copy_attachment(source: Store, target: Store, receipt_id: str, source_sha256: str) -> bool:
    small, bulk = _anatomy_payload(source, receipt_id, source_sha256)
    # The target's anatomy_sources primary key (receipt_id, source_sha256) decides the race (attach=).
    small["receipt_sources"] = _rows(_select(source, "receipt_sources", "receipt_id = $id AND sha256 = $sha",
                                             {"id": receipt_id, "sha": source_sha256}))
    return target.copy_attachment_rows(receipt_id, source_sha256, small=small, bulk=bulk)
