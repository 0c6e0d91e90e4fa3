"""What every store backend offers. Writes are one transaction per receipt and idempotent by content
hash; reads run the analysis SQL in sql/ through DuckDB (directly, or over PostgreSQL via ATTACH).

polars, and store/rows.py and the schema model that build frames with it, load where a method writes or
returns a frame: a read of plain rows (query_rows: `receipts list`) opens a store without them (~0.1 s)."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from receipts.errors import ReceiptNotFound, StoreError
from receipts.schema.lane import FIELDS, RAW, RESOLVED_WITH
from receipts.schema.version import IDENTITY_FIELDS
from receipts.sql import load_query

if TYPE_CHECKING:
    import polars as pl

    from receipts.schema.memory import MemoryGeometry
    from receipts.schema.model import Anatomy, Receipt, SourceFile, Steps


# What `receipts retag` may rewrite on a receipt: the claimed identity, its resolution, the run name and tags
# (docs/teams.md grants the writer role UPDATE on exactly these, plus the fact columns and superseded_by).
RETAG_COLUMNS = ("run_name", "tags_json", *(c for f in FIELDS for c in (RAW[f], f, *RESOLVED_WITH.get(f, ()))),
                 "identity_complete", "lane_key", "resolution_json", "features_json")


class ReceiptRows(NamedTuple):
    """One receipt as another store holds it, for Store.copy_receipts_rows (`receipts push`)."""

    content_sha256: str
    small: dict[str, list[dict[str, Any]]]   # table -> rows, the receipts row first
    bulk: Mapping[str, Steps]                # bulk table -> its rows of this receipt
    supersedes: tuple[str, ...] = ()         # ids this receipt superseded there, superseded here too


@dataclass(frozen=True)
class ReceiptFill:
    """What an attachment adds to its receipt, in the attachment's own transaction: machine columns the receipt
    lacks (a value it has is never overwritten), the file each came from (provenance_json's "machine"), and
    software facts the receipt does not state (the profiler it ran under)."""

    columns: Mapping[str, Any] = field(default_factory=dict)
    origins: Mapping[str, str] = field(default_factory=dict)    # column -> the file that gave it
    software: Mapping[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.columns or self.software)

    def assignments(self, provenance_json: str | None, software_json: str | None) -> list[tuple[str, Any, bool]]:
        """(column, value, only where null) for the UPDATE of a receipts row that holds these JSON columns."""
        from receipts.store import rows as R

        provenance = json.loads(provenance_json or "{}")
        provenance["machine"] = {**dict(self.origins), **provenance.get("machine", {})}
        software = {**dict(self.software), **json.loads(software_json or "{}")}
        unknown = set(self.columns) - set(FILLABLE_COLUMNS)
        if unknown:
            raise ValueError(f"not machine columns: {sorted(unknown)}")
        return [*((c, v, True) for c, v in self.columns.items()),
                ("provenance_json", R.dumps(provenance), False), ("software_json", R.dumps(software), False)]


# What ReceiptFill may set on a receipt (never identity or run name: those change through retag only).
FILLABLE_COLUMNS = ("gpu_model", "gpu_count", "gpus_on_host", "world_size", "ranks_traced", "hostname", "machine_class")


@dataclass(frozen=True)
class WriteResult:
    receipt_id: str
    created: bool          # False: the same content was already stored (idempotent no-op)
    run_name: str


def check_unchanged(url: str, receipt_id: str, columns: list[str], row, expected: dict) -> None:
    """Inside a retag's transaction: the row still holds the values the change was computed from."""
    if row is None:
        raise StoreError(url, f"receipt {receipt_id} is gone")
    moved = [c for c, v in zip(columns, row) if v != expected[c]]
    if moved:
        raise StoreError(url, f"receipt {receipt_id} was changed by someone else while retagging "
                              f"({', '.join(moved)}); nothing written, run the retag again")


# The next ingest_seq, read in the write's transaction. Two PostgreSQL writers committing at once may draw the same
# number (their order is arbitrary anyway); one process's receipts, written one after another, never do.
NEXT_INGEST_SEQ = "SELECT coalesce(max(ingest_seq), 0) + 1 FROM receipts"


def numbered(small: dict[str, list[dict[str, Any]]], next_seq) -> dict[str, list[dict[str, Any]]]:
    """`small` with its receipts row given its ingest_seq (`next_seq()`), unless it carries one (a copy)."""
    rows = small.get("receipts") or []
    if not rows or rows[0].get("ingest_seq") is not None:
        return small
    return {**small, "receipts": [{**rows[0], "ingest_seq": next_seq()}, *rows[1:]]}


def next_history_rows(url: str, receipt_id: str, last_seq: int, history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """History rows numbered from last_seq + 1 (rows without a seq), or checked to continue from it."""
    out = []
    for row in history:
        last_seq += 1
        if row.get("seq") is not None and row["seq"] != last_seq:
            raise StoreError(url, f"identity history of receipt {receipt_id} has diverged (next seq here is "
                                  f"{last_seq}, the change to copy is #{row['seq']}); nothing written")
        out.append({**row, "seq": last_seq})
    return out


class Store(ABC):
    url: str

    # ---- writes -----------------------------------------------------------------------------
    def write_receipt(self, receipt: Receipt, *, anatomies: tuple[tuple[Anatomy, SourceFile], ...] = (),
                      supersedes: tuple[str, ...] = (), columns: dict[str, Any] | None = None) -> WriteResult:
        """Receipt, its rows and any anatomy, in one transaction; a repeat of the same content is a no-op.

        `supersedes`: earlier receipts of the same run that this one replaces; their superseded_by is set to
        this receipt's id in the same transaction (only where still null). `columns` overrides values of the
        receipts row (an identity carried over from a superseded receipt, or superseded_by itself)."""
        from receipts.store import rows as R

        ingested_at = R.now_iso()
        bulk = {"receipt_steps": R.step_frame(receipt)}
        small = {
            "receipts": [{**R.receipt_row(receipt, ingested_at), **(columns or {})}],
            "receipt_env": R.env_rows(receipt),
            "receipt_memory": R.memory_rows(receipt),
            "receipt_telemetry": R.telemetry_rows(receipt),
            "receipt_summaries": R.summary_rows(receipt),
            "receipt_sources": R.source_rows(receipt.id, receipt.sources, ingested_at),
        }
        for anatomy, source in anatomies:
            self._add_anatomy(bulk, small, receipt.id, anatomy, source, ingested_at)
        if receipt.parsed.memory_geometry:  # what receipts.capture measured: its source is the receipt's own log
            from receipts.store.memory_rows import memory_rows

            small.update(memory_rows(receipt.id, receipt.content_sha256, receipt.parsed.memory_geometry))
        created = self._write(content_sha256=receipt.content_sha256, small=small, bulk=bulk,
                              supersede=(receipt.id, tuple(supersedes)) if supersedes else None)
        if created:
            return WriteResult(receipt.id, True, small["receipts"][0]["run_name"])  # as stored (a name carried over)
        existing = self.sql("SELECT id, run_name FROM receipts WHERE content_sha256 = $sha",
                            {"sha": receipt.content_sha256}).row(0)
        return WriteResult(existing[0], False, existing[1])

    @contextmanager
    def run_lock(self, keys: tuple[str, ...]) -> Iterator[None]:
        """Decide and write a run's current receipt one writer at a time: what the ledger reads of the runs named by
        `keys` (run keys, log families) and the receipt it then writes. A DuckDB file has one writer process at a
        time already; PostgreSQL holds an advisory lock per key until the write commits."""
        yield

    def attach_anatomy(self, receipt_id: str, anatomy: Anatomy, source: SourceFile, *, forced: str | None = None,
                       fill: ReceiptFill | None = None) -> bool:
        """Attach a profiler export to an existing receipt; False when that export is already attached.
        `forced`: the contradiction the caller forced past, kept on the source row. `fill`: what the export adds
        to the receipt (its machine where the receipt knows none, the profiler), in the same transaction."""
        from receipts.store import rows as R

        ingested_at = R.now_iso()
        bulk: dict[str, Steps] = {}
        small: dict[str, list[dict[str, Any]]] = {
            "receipt_sources": R.source_rows(receipt_id, (source,), ingested_at, forced=forced)}
        self._add_anatomy(bulk, small, receipt_id, anatomy, source, ingested_at)
        return self._write(content_sha256=None, small=small, bulk=bulk, attach=(receipt_id, source.sha256),
                           fill=fill or None)

    def attach_facts(self, receipt_id: str, section: str, facts: dict[str, Any], source: SourceFile, *,
                     forced: str | None = None, fill: ReceiptFill | None = None) -> bool:
        """Merge machine facts (topology, software) into a receipt; False when that file is already attached.
        `fill`: the machine columns the file adds where the receipt has none, in the same transaction."""
        from receipts.store import rows as R

        if section not in ("topology", "software"):
            raise ValueError(section)
        return self._merge_json(receipt_id, f"{section}_json", facts,
                                R.source_rows(receipt_id, (source,), R.now_iso(), forced=forced), fill or None)

    def attach_memory(self, receipt_id: str, geometries: tuple[MemoryGeometry, ...], source: SourceFile, *,
                      forced: str | None = None) -> bool:
        """Attach a memory geometry (a snapshot's devices, or an estimate) to a receipt; False when that source
        is already attached (memory_sources' key decides)."""
        from receipts.store import rows as R
        from receipts.store.memory_rows import memory_rows

        small = {**memory_rows(receipt_id, source.sha256, geometries),
                 "receipt_sources": R.source_rows(receipt_id, (source,), R.now_iso(), forced=forced)}
        return self._write(content_sha256=None, small=small, bulk={}, attach=(receipt_id, source.sha256),
                           guard="memory_sources")

    def copy_memory_rows(self, receipt_id: str, source_sha256: str, *, small: dict[str, list[dict[str, Any]]]) -> bool:
        """A memory source's rows as another store holds them (`push`); False when it is already attached."""
        return self._write(content_sha256=None, small=small, bulk={}, attach=(receipt_id, source_sha256),
                           guard="memory_sources")

    def replace_summaries(self, summaries: dict[str, dict[str, Any]]) -> None:
        """Store steady-state summaries (analysis/summary.py's stored form) by receipt id, replacing any row a
        receipt had, in one transaction: `receipts db upgrade` re-summarises receipts under a new rule."""
        from receipts.store import rows as R

        if summaries:
            self._replace_rows("receipt_summaries", [R.summary_row(rid, s) for rid, s in summaries.items()])

    def replace_components(self, rows_by_receipt: dict[str, list[dict[str, Any]]]) -> None:
        """Store component rows (analysis/components.py) by receipt id, replacing every row a receipt had, in one
        transaction: `receipts db upgrade` recomputes them under a new rule."""
        rows = [r for part in rows_by_receipt.values() for r in part]
        if rows:
            self._replace_rows("receipt_components", rows)

    @abstractmethod
    def _replace_rows(self, table: str, rows: list[dict[str, Any]]) -> None:
        """In one transaction: delete the rows of `table` with these rows' receipt_ids, insert the rows."""

    # ---- copies from another store (`receipts push`, store/sync.py): rows as stored, not re-derived ----------
    def copy_receipt_rows(self, *, content_sha256: str, small: dict[str, list[dict[str, Any]]],
                          bulk: Mapping[str, Steps], supersedes: tuple[str, ...] = ()) -> bool:
        """A receipt's rows exactly as another store holds them (ids, ingested_at, warm-up flags), in one
        transaction; False when a receipt with this content is already here. `supersedes`: the ids this
        receipt superseded there, superseded here too."""
        return self._write(content_sha256=content_sha256, small=small, bulk=bulk,
                           supersede=(small["receipts"][0]["id"], supersedes) if supersedes else None)

    def copy_receipts_rows(self, receipts: list[ReceiptRows]) -> list[bool]:
        """copy_receipt_rows for each of several receipts, in order: whether each was copied. Here each is its own
        transaction (PostgreSQL: two nodes pushing at once race per receipt, and its unique constraints decide);
        a store with one writer at a time may copy them in fewer."""
        return [self.copy_receipt_rows(content_sha256=r.content_sha256, small=r.small, bulk=r.bulk,
                                       supersedes=r.supersedes) for r in receipts]

    def copy_attachment_rows(self, receipt_id: str, source_sha256: str, *, small: dict[str, list[dict[str, Any]]],
                             bulk: Mapping[str, Steps]) -> bool:
        """An export's anatomy rows as another store holds them; False when that export is already attached."""
        return self._write(content_sha256=None, small=small, bulk=bulk, attach=(receipt_id, source_sha256))

    def copy_facts(self, receipt_id: str, column: str, facts: dict[str, Any], source_row: dict[str, Any]) -> bool:
        """Merge another store's fact column (`topology_json`, `software_json`) for one attached fact file, the
        same merge `attach_facts` does under its row lock; False when that file is already attached here."""
        return self._merge_json(receipt_id, column, facts, [source_row])

    @staticmethod
    def _merged(current: str | None, facts: dict[str, Any]) -> str:
        from receipts.store import rows as R

        return R.dumps({**json.loads(current or "{}"), **facts})

    @abstractmethod
    def _merge_json(self, receipt_id: str, column: str, facts: dict[str, Any], source_rows: list[dict[str, Any]],
                    fill: ReceiptFill | None = None) -> bool:
        """In one transaction: insert the source row (its (receipt, sha256) key decides idempotency), then read
        receipts.<column>, merge `facts` into it and write it back, the row locked from read to write so two
        attachments racing on one receipt both land; then apply `fill`. Returns False, changing nothing, when the
        source is already attached."""

    def _add_anatomy(self, bulk, small, receipt_id, anatomy, source, ingested_at) -> None:
        import polars as pl

        from receipts.store import rows as R

        raw_path = self._write_raw_events(anatomy.raw_events, source) if anatomy.raw_events is not None else None
        for table, frame in R.anatomy_frames(receipt_id, source.sha256, anatomy).items():
            bulk[table] = pl.concat([bulk[table], frame]) if table in bulk else frame
        small.setdefault("anatomy_sources", []).append(R.anatomy_source_row(receipt_id, source.sha256, anatomy, raw_path))
        small.setdefault("receipt_components", []).extend(R.component_rows(receipt_id, source.sha256, anatomy))
        if not any(r["sha256"] == source.sha256 for r in small.get("receipt_sources", [])):
            small.setdefault("receipt_sources", []).extend(R.source_rows(receipt_id, (source,), ingested_at))

    def _write_raw_events(self, raw_events: pl.DataFrame | pl.LazyFrame, source: SourceFile) -> str | None:
        """Raw events as Parquet beside the store, named by the export's sha256; never needed by views. Lazy raw
        events (each rank's staged as Parquet by a worker) are streamed into the one file, never held whole."""
        folder = self.raw_events_dir()
        if folder is None:
            return None
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{source.sha256}.parquet"
        if not path.exists():
            import polars as pl

            tmp = path.with_suffix(".parquet.tmp")
            if isinstance(raw_events, pl.LazyFrame):
                raw_events.sink_parquet(tmp)
            else:
                raw_events.write_parquet(tmp)
            tmp.replace(path)
        return str(path)

    # Where --keep-raw Parquet goes when the caller names a folder (`ingest --raw-dir`); a server store has
    # no folder of its own, a DuckDB file defaults to one beside it.
    raw_dir: Path | None = None

    def raw_events_dir(self) -> Path | None:
        return self.raw_dir

    def retag(self, receipt_id: str, *, expected: dict[str, Any], changes: dict[str, Any], why: str) -> int:
        """Rewrite a receipt's identity columns and append the change to identity_history, in one transaction.

        `expected` holds the stored values the change was computed from; if another retag changed them in
        the meantime the write is refused (run it again) rather than silently undoing that one. Returns the
        history row's seq (1 for a receipt's first retag)."""
        from receipts.store import rows as R

        unknown = set(changes) - set(RETAG_COLUMNS)
        if unknown:
            raise ValueError(f"not identity columns: {sorted(unknown)}")
        after = {**expected, **changes}
        history = {"receipt_id": receipt_id, "changed_at": R.now_iso(), "why": why,
                   **{f"old_{k}": expected.get(k) for k in IDENTITY_FIELDS},
                   **{f"new_{k}": after.get(k) for k in IDENTITY_FIELDS}}
        return self._retag(receipt_id, expected, changes, [history])

    def replay_retags(self, receipt_id: str, *, expected: dict[str, Any], changes: dict[str, Any],
                      history: list[dict[str, Any]]) -> int:
        """`push`: apply retags made in another store, copying its identity_history rows as they are (seq,
        who, when, why). Refused (StoreError) unless they continue this store's history: the first seq must
        follow this store's last, and the identity must still be `expected`."""
        return self._retag(receipt_id, expected, changes, history)

    @abstractmethod
    def _retag(self, receipt_id: str, expected: dict[str, Any], changes: dict[str, Any],
               history: list[dict[str, Any]]) -> int:
        """In one transaction, the receipt's row locked: check the columns in `expected` still hold those
        values (else StoreError), UPDATE `changes`, INSERT the `history` rows. A row without seq gets the next
        one, without changed_by the OS user (DuckDB) or current_user (PostgreSQL); a row with a seq must be
        the next one (else StoreError: the histories diverged). Returns the last seq."""

    @abstractmethod
    def _write(self, *, content_sha256: str | None, small: dict[str, list[dict[str, Any]]],
               bulk: Mapping[str, Steps], attach: tuple[str, str] | None = None,
               supersede: tuple[str, tuple[str, ...]] | None = None, guard: str = "anatomy_sources",
               fill: ReceiptFill | None = None) -> bool:
        """Insert everything in one transaction. Returns False (and writes nothing) when the content hash
        (or, for an attachment, the (receipt, source sha256) pair in `guard`: anatomy_sources or memory_sources)
        is already stored. `supersede` = (new id, earlier ids): set the earlier receipts' superseded_by, where
        null, in the same transaction. `fill` (an attachment's): applied to the attached receipt's row in the same
        transaction."""

    # ---- reads ------------------------------------------------------------------------------
    @staticmethod
    def _create_macros(con: Any) -> None:
        """The building blocks sql/ queries call, on a DuckDB connection that already sees the store's tables
        (a macro binds its tables when created): sql/_macros.sql."""
        con.execute(load_query("_macros"))

    @abstractmethod
    def sql(self, query: str, params: dict[str, Any] | list[Any] | None = None) -> pl.DataFrame:
        """Run one analysis query (DuckDB SQL) over the store's tables."""

    def query(self, name: str, params: dict[str, Any] | None = None) -> pl.DataFrame:
        """Run sql/<name>.sql with named parameters ($name)."""
        return self.sql(load_query(name), params or {})

    @abstractmethod
    def sql_rows(self, query: str, params: dict[str, Any] | list[Any] | None = None) -> list[dict[str, Any]]:
        """`sql`'s rows as plain dicts (column name -> Python value, in the query's column order): for rows
        that go straight to output, without building a frame only to take it apart (or importing polars)."""

    def query_rows(self, name: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Run sql/<name>.sql with named parameters ($name); its rows as plain dicts (`sql_rows`)."""
        return self.sql_rows(load_query(name), params or {})

    def version(self) -> str:
        """Changes whenever receipts are added: dashboards key their caches on it."""
        row = self.sql("SELECT count(*) AS n, max(ingested_at) AS t FROM receipt_sources").row(0)
        return f"{row[0]}:{row[1]}"

    def resolve(self, ref: str) -> str:
        """A receipt id, a unique id prefix, or a run name (store/refs.py)."""
        from receipts.store import refs

        return refs.resolve(self, ref)

    def resolve_many(self, refs: list[str], *, current_only: bool = False) -> dict[str, str | ReceiptNotFound]:
        """Resolve many references with one read (store/refs.py)."""
        from receipts.store import refs as R

        return R.resolve_many(self, refs, current_only=current_only)

    def close(self) -> None:  # pragma: no cover - backends override
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
