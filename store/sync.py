"""Copy receipts from one store to another (`receipts push`): an air-gapped node ingests into its own
DuckDB file, then pushes to the team's PostgreSQL store when it can reach it.

Rows are copied as stored (ids, ingested_at, warm-up flags), not re-derived, so both stores answer
every sql/ query the same. Receipts go through the target's copy API (Store.copy_*), whose unique constraints
decide what is already there: pushing twice, or from two nodes at once, copies each receipt exactly once. On
PostgreSQL each receipt is its own transaction (two nodes race per receipt); a DuckDB file, one writer at a time,
takes a batch of them in one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from collections.abc import Callable, Iterator
from typing import Any

import polars as pl

from receipts.schema.model import FACT_SECTIONS
from receipts.errors import StoreError
from receipts.schema.tables import BULK_TABLES, IDENTITY_FIELDS, metadata
from receipts.store.base import RETAG_COLUMNS, ReceiptRows, Store

# Tables keyed by receipt_id that belong to the receipt itself (anatomy ones travel per export). Its
# identity_history travels with it, so a receipt retagged before the push arrives with its audit trail.
RECEIPT_TABLES = ("receipt_steps", "receipt_env", "receipt_memory", "receipt_telemetry", "receipt_summaries",
                  "receipt_sources", "identity_history", "memory_sources", "memory_ranks", "memory_categories")
ANATOMY_TABLES = ("anatomy_rows", "anatomy_steps", "anatomy_nvtx", "anatomy_kernels", "anatomy_step_kernels",
                  "anatomy_kernel_shapes", "anatomy_gaps", "receipt_components")


@dataclass
class PushResult:
    receipts_copied: int = 0
    receipts_skipped: int = 0          # same content hash already in the target
    anatomy_copied: int = 0            # profiler exports copied: with their receipt, or attached after it was pushed
    anatomy_skipped: int = 0
    facts_copied: int = 0              # machine-fact files attached after the receipt was pushed
    memory_copied: int = 0             # memory snapshots and estimates: with their receipt, or attached after it
    memory_kinds: dict[str, int] = field(default_factory=dict)  # the same by kind ('snapshot' | 'estimate')
    copied_ids: list[str] = field(default_factory=list)
    retags_copied: int = 0             # identity_history rows of retags made locally after the receipt was pushed
    retags_diverged: list[str] = field(default_factory=list)  # retagged on both sides since: left for a human
    # retagged here only, but the identity there is not the one those retags started from (the receipt reached the
    # target another way, with another identity): left for a human too
    retags_refused: list[str] = field(default_factory=list)

    def count_memory(self, kind: str) -> None:
        self.memory_copied += 1
        self.memory_kinds[kind] = self.memory_kinds.get(kind, 0) + 1


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


def push(source: Store, target: Store, progress: Callable[[int, int], None] | None = None) -> PushResult:
    """Copy every receipt (and every attached export) of `source` that `target` lacks. `progress`: called with
    (receipts done, receipts in the source) before each batch of receipts copied, then before each receipt the
    target had already."""
    result = PushResult()
    present = set(target.sql("SELECT content_sha256 FROM receipts")["content_sha256"].to_list())
    attached = {tuple(r) for r in target.sql("SELECT receipt_id, source_sha256 FROM anatomy_sources").iter_rows()}
    # Machine-fact files the target lacks, looked up once for the whole push.
    target_sources = {tuple(r) for r in target.sql("SELECT receipt_id, sha256 FROM receipt_sources").iter_rows()}
    missing_facts: dict[str, list[dict[str, Any]]] = {}
    for row in _rows(_select(source, "receipt_sources", "list_contains($roles, role)", {"roles": sorted(FACT_SECTIONS)})):
        if (row["receipt_id"], row["sha256"]) not in target_sources:
            missing_facts.setdefault(row["receipt_id"], []).append(row)
    memory_there = {tuple(r) for r in target.sql("SELECT receipt_id, source_sha256 FROM memory_sources").iter_rows()}
    # Snapshots and estimates (a `capture` source is the receipt's own log: it is never attached on its own).
    memory_here: dict[str, list[tuple[str, str]]] = {}
    for receipt_id, sha, kind in source.sql("SELECT receipt_id, source_sha256, kind FROM memory_sources WHERE kind <> "
                                            "'capture' ORDER BY receipt_id, source_sha256").iter_rows():
        if (receipt_id, sha) not in memory_there:
            memory_here.setdefault(receipt_id, []).append((sha, kind))
    target_history, local_history = _history_keys(target), _history_keys(source)
    local = source.sql("SELECT id, content_sha256 FROM receipts ORDER BY ingested_at, id")
    # A push reads the source in batches of receipts, a query per table per batch: a query per table per
    # receipt (12) took 16.5 s of a 1,000-receipt push's 23, and a push with nothing to copy 8 s over 10,000.
    exports_here: dict[str, list[str]] = {}
    for receipt_id, sha in source.sql("SELECT receipt_id, source_sha256 FROM anatomy_sources "
                                      "ORDER BY receipt_id, source_sha256").iter_rows():
        exports_here.setdefault(receipt_id, []).append(sha)
    to_copy = [(rid, sha) for rid, sha in local.iter_rows() if sha not in present]
    pushed: set[str] = set()
    done = 0
    for batch in _batches(source, to_copy):
        if progress is not None:
            progress(done, local.height)
        for (receipt_id, _), ok in zip(batch, target.copy_receipts_rows(_payloads(source, batch))):
            if ok:
                result.receipts_copied += 1
                result.anatomy_copied += len(exports_here.get(receipt_id, ()))  # they travel in its payload
                for _, kind in memory_here.get(receipt_id, ()):                   # so do its memory sources
                    result.count_memory(kind)
                result.copied_ids.append(receipt_id)
                pushed.add(receipt_id)
        done += len(batch)
    # The receipts that were there already (or arrived from another push meanwhile): exports, fact files and
    # retags added to them locally since then still travel.
    for receipt_id, _ in local.iter_rows():
        if receipt_id in pushed:
            continue
        if progress is not None:
            progress(done, local.height)
        done += 1
        result.receipts_skipped += 1
        for sha in exports_here.get(receipt_id, []):
            if (receipt_id, sha) in attached or not _copy_attachment(source, target, receipt_id, sha):
                result.anatomy_skipped += 1
            else:
                result.anatomy_copied += 1
        if receipt_id in missing_facts:
            result.facts_copied += _copy_facts(source, target, receipt_id, missing_facts[receipt_id])
        for sha, kind in memory_here.get(receipt_id, []):
            if _copy_memory(source, target, receipt_id, sha):
                result.count_memory(kind)
        here, there = local_history.get(receipt_id, []), target_history.get(receipt_id, [])
        if here[:len(there)] != there and there[:len(here)] != here:
            result.retags_diverged.append(receipt_id)            # each side has retags the other lacks
        elif len(here) > len(there):
            copied = _copy_retags(source, target, receipt_id, len(there))
            if copied is None:
                result.retags_refused.append(receipt_id)
            elif copied:
                result.retags_copied += copied
            else:
                result.retags_diverged.append(receipt_id)        # retagged there while this push ran
    return result


def _history_keys(store: Store) -> dict[str, list[tuple]]:
    """Per receipt, its retags in order as (seq, changed_at, changed_by, why): enough to tell whether one
    store's history continues the other's."""
    out: dict[str, list[tuple]] = {}
    rows = store.sql("SELECT receipt_id, seq, changed_at, changed_by, why FROM identity_history ORDER BY receipt_id, seq")
    for receipt_id, *key in rows.iter_rows():
        out.setdefault(receipt_id, []).append(tuple(key))
    return out


def _copy_retags(source: Store, target: Store, receipt_id: str, after_seq: int) -> int | None:
    """Retags made locally after the receipt was pushed: the target's identity becomes the local one and
    the local history rows are appended as they are. Only when they continue the target's history: None when the
    target's identity is not what the first of them changed from, 0 when the target was retagged meanwhile;
    nothing is written then."""
    history = _rows(_select(source, "identity_history", "receipt_id = $id AND seq > $seq ORDER BY seq",
                            {"id": receipt_id, "seq": after_seq}))
    columns = ", ".join(RETAG_COLUMNS)      # ours (store/base.py)
    there = target.sql(f"SELECT {columns} FROM receipts WHERE id = $id", {"id": receipt_id}).row(0, named=True)
    here = source.sql(f"SELECT {columns} FROM receipts WHERE id = $id", {"id": receipt_id}).row(0, named=True)
    if any(there[f] != history[0][f"old_{f}"] for f in IDENTITY_FIELDS):
        return None
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


# The tables a receipt carries to another store (as a ReceiptRows), keyed by receipt_id, beside `receipts` itself.
_PAYLOAD_TABLES = (*RECEIPT_TABLES, "anatomy_sources", *ANATOMY_TABLES)
BATCH_RECEIPTS = 256
BATCH_STEP_ROWS = 1 << 20  # a batch's step rows: a 10M-step receipt is a batch of its own


def _batches(source: Store, receipts: list[tuple[str, str]]) -> Iterator[list[tuple[str, str]]]:
    """`receipts` ((id, content sha256) pairs) in order, cut into batches of at most BATCH_RECEIPTS receipts and
    BATCH_STEP_ROWS step rows."""
    if not receipts:
        return
    steps = dict(source.sql("SELECT receipt_id, count(*) AS n FROM receipt_steps "
                            "WHERE receipt_id IN (SELECT unnest($ids)) GROUP BY receipt_id",
                            {"ids": [rid for rid, _ in receipts]}).iter_rows())
    batch: list[tuple[str, str]] = []
    rows = 0
    for receipt in receipts:
        n = steps.get(receipt[0], 0)
        if batch and (len(batch) == BATCH_RECEIPTS or rows + n > BATCH_STEP_ROWS):
            yield batch
            batch, rows = [], 0
        batch.append(receipt)
        rows += n
    yield batch


def _quoted(values: list[str]) -> str:
    """`values` as a list of SQL string literals (a quote doubled), for `column IN (...)`. Written into the query,
    not bound: DuckDB prunes its scan by constants (and the postgres extension sends them to the server), where any
    bound parameter (a list, `IN (SELECT unnest($ids))`, or one parameter per value) had every row of the table
    read and filtered after: 0.5 s a batch over 1.4M step rows, against 0.03 s. The values are the source
    store's own receipt ids."""
    return ", ".join("'" + str(v).replace("'", "''") + "'" for v in values)


def _payloads(source: Store, batch: list[tuple[str, str]]) -> list[ReceiptRows]:
    """Each receipt of `batch` as the target copies it, read a query per table for the whole batch."""
    ids = _quoted([rid for rid, _ in batch])
    key = {table: "id" if table == "receipts" else "receipt_id" for table in ("receipts", *_PAYLOAD_TABLES)}
    frames = {table: _select(source, table, f"{column} IN ({ids})", {}) for table, column in key.items()}
    parts = {table: frame.partition_by(key[table], as_dict=True, maintain_order=True)
             for table, frame in frames.items()}
    superseded: dict[str, list[str]] = {}
    for rid, by in source.sql(f"SELECT id, superseded_by FROM receipts WHERE superseded_by IN ({ids}) "
                              "ORDER BY id").iter_rows():
        superseded.setdefault(by, []).append(rid)

    def own(table: str, rid: str) -> pl.DataFrame:
        return parts[table].get((rid,), frames[table].clear())

    out = []
    for rid, content_sha256 in batch:
        small = {"receipts": _rows(own("receipts", rid))}
        bulk: dict[str, pl.DataFrame] = {}
        for table in _PAYLOAD_TABLES:
            if table in BULK_TABLES:
                bulk[table] = own(table, rid)
            else:
                small[table] = _rows(own(table, rid))
        out.append(ReceiptRows(content_sha256, small, bulk, tuple(superseded.get(rid, ()))))
    return out


def _copy_memory(source: Store, target: Store, receipt_id: str, source_sha256: str) -> bool:
    """A memory source attached locally after the receipt was pushed (the target's memory_sources key decides)."""
    where, params = "receipt_id = $id AND source_sha256 = $sha", {"id": receipt_id, "sha": source_sha256}
    small = {table: _rows(_select(source, table, where, params))
             for table in ("memory_sources", "memory_ranks", "memory_categories")}
    small["receipt_sources"] = _rows(_select(source, "receipt_sources", "receipt_id = $id AND sha256 = $sha", params))
    return target.copy_memory_rows(receipt_id, source_sha256, small=small)


def _copy_attachment(source: Store, target: Store, receipt_id: str, source_sha256: str) -> bool:
    small, bulk = _anatomy_payload(source, receipt_id, source_sha256)
    # The target's anatomy_sources primary key (receipt_id, source_sha256) decides the race (attach=).
    small["receipt_sources"] = _rows(_select(source, "receipt_sources", "receipt_id = $id AND sha256 = $sha",
                                             {"id": receipt_id, "sha": source_sha256}))
    return target.copy_attachment_rows(receipt_id, source_sha256, small=small, bulk=bulk)
