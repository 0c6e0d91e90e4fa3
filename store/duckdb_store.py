"""The embedded default: one DuckDB file, no server."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from receipts.duck import insert_frame, query_frame, query_rows
from receipts.errors import StoreError, UnsupportedVersion
from receipts.schema.version import SCHEMA_VERSION
from receipts.scratch import scratch_dir
from receipts.store.base import (NEXT_INGEST_SEQ, ReceiptFill, ReceiptRows, Store, check_unchanged, next_history_rows,
                                 numbered)
from receipts.store.duckdb_lock import open_with_lock_wait
from receipts.store.duckdb_tx import transaction

if TYPE_CHECKING:
    import polars as pl


# A read of a store file this small runs DuckDB on one thread. Its tables hold a few row groups (DuckDB's unit
# of parallel work), so a second thread has little to take while waking it and handing it each query's tasks
# cost CPU: `receipts compare` of two profiled runs on benchmarks/bench_startup.py's 11 MB store, 25 ms of CPU
# less on one thread (paired medians of 11), `show` 2 ms, `explain` 9 ms. A larger store keeps a thread per core.
SMALL_STORE_BYTES = 32 * 2**20


class DuckDBStore(Store):
    def __init__(self, path: str | Path, *, read_only: bool = False):
        self.path = Path(path)
        self.url = str(self.path)
        if read_only and not self.path.exists():
            raise StoreError(self.url, "does not exist (ingest something first: `receipts ingest run.log`)")
        threads = 1 if read_only and self.path.stat().st_size <= SMALL_STORE_BYTES else None
        try:
            # another process's lock: wait, bounded
            self.con = open_with_lock_wait(self.path, read_only=read_only, threads=threads)
        except duckdb.IOException as exc:
            raise StoreError(self.url, f"cannot open: {exc}") from exc
        if not read_only:
            ensure_schema(self.con, self.url)
        else:
            check_version(self.con, self.url)
        self._create_macros(self.con)

    def raw_events_dir(self) -> Path:
        return self.raw_dir or self.path.parent / (self.path.name + ".raw")

    def close(self) -> None:
        self.con.close()

    def sql(self, query: str, params: dict[str, Any] | list[Any] | None = None) -> pl.DataFrame:
        return query_frame(self.con, query, params)

    def sql_rows(self, query: str, params: dict[str, Any] | list[Any] | None = None) -> list[dict[str, Any]]:
        return query_rows(self.con, query, params)

    def _merge_json(self, receipt_id, column, facts, source_rows, fill=None) -> bool:
        # One writer process per DuckDB file (its lock), and the read sits inside the write transaction.
        con = self.con
        with transaction(con) as tx:
            if con.execute("SELECT 1 FROM receipt_sources WHERE receipt_id = ? AND sha256 = ?",
                           [receipt_id, source_rows[0]["sha256"]]).fetchone():
                tx.rollback()
                return False
            insert_rows(con, "receipt_sources", source_rows)
            current = con.execute(f"SELECT {column} FROM receipts WHERE id = ?", [receipt_id]).fetchone()  # column: ours
            con.execute(f"UPDATE receipts SET {column} = ? WHERE id = ?",
                        [self._merged(current[0] if current else None, facts), receipt_id])
            if fill:
                _apply_fill(con, receipt_id, fill)
        return True

    def _retag(self, receipt_id, expected, changes, history) -> int:
        con = self.con
        columns = list(expected)        # names from RETAG_COLUMNS (ours), never from input
        with transaction(con):
            row = con.execute(f"SELECT {', '.join(columns)} FROM receipts WHERE id = ?", [receipt_id]).fetchone()
            check_unchanged(self.url, receipt_id, columns, row, expected)
            last = (con.execute("SELECT coalesce(max(seq), 0) FROM identity_history WHERE receipt_id = ?",
                                [receipt_id]).fetchone() or (0,))[0]
            rows = next_history_rows(self.url, receipt_id, last, history)
            if changes:
                con.execute(f"UPDATE receipts SET {', '.join(f'{c} = ?' for c in changes)} WHERE id = ?",
                            [*changes.values(), receipt_id])
            insert_rows(con, "identity_history", [{"changed_by": os_user(), **r} for r in rows])
        return rows[-1]["seq"]

    def _replace_rows(self, table: str, rows: list[dict[str, Any]]) -> None:
        with transaction(self.con):
            self.con.execute(f"DELETE FROM {table} WHERE list_contains(?, receipt_id)",  # table: ours
                             [[r["receipt_id"] for r in rows]])
            insert_rows(self.con, table, rows)

    def copy_receipts_rows(self, receipts: list[ReceiptRows]) -> list[bool]:
        """All of them in one transaction (a DuckDB file has one writer at a time, so nothing races it), each
        table's rows of all of them in one insert: a transaction, an insert per table and a Parquet file per
        bulk table for each receipt were most of a push's time here (13 ms a receipt). A failure rolls them all
        back; a push run again copies them then."""
        import polars as pl  # loaded by writes, not by a store opened to read

        from receipts.schema.tables import metadata

        con = self.con
        with transaction(con):
            shas = [r.content_sha256 for r in receipts]
            present = {sha for (sha,) in con.execute(
                "SELECT content_sha256 FROM receipts WHERE content_sha256 IN (SELECT unnest(?))", [shas]).fetchall()}
            copied = []
            for r in receipts:
                copied.append(r.content_sha256 not in present)
                present.add(r.content_sha256)  # a content twice in one call: the first copy only
            fresh = [r for r, ok in zip(receipts, copied) if ok]
            small: dict[str, list[dict[str, Any]]] = {}
            for r in fresh:
                for table, rows in r.small.items():
                    small.setdefault(table, []).extend(rows)
            for table, rows in small.items():  # each receipt's tables in its order: the receipts rows first
                if rows:
                    columns = [c.name for c in metadata.tables[table].columns]
                    # one INSERT for the batch's rows: executemany ran a statement a row (3.2 s of 5.2 s for 2,000)
                    insert_frame(con, table, pl.DataFrame([[row.get(c) for c in columns] for row in rows],
                                                          schema=columns, orient="row", infer_schema_length=None))
            for table in dict.fromkeys(t for r in fresh for t in r.bulk):
                frames = [r.bulk[table] for r in fresh if table in r.bulk]
                eager = [f for f in frames if isinstance(f, pl.DataFrame)]
                _insert_frame(con, table, pl.concat(eager) if len(eager) == len(frames)
                              else pl.concat([f.lazy() for f in frames]))
            superseding = [[r.small["receipts"][0]["id"], old] for r in fresh for old in r.supersedes]
            if superseding:
                con.executemany("UPDATE receipts SET superseded_by = ? WHERE id = ? AND superseded_by IS NULL",
                                superseding)
        return copied

    def _write(self, *, content_sha256, small, bulk, attach=None, supersede=None, guard="anatomy_sources",
               fill=None) -> bool:
        con = self.con
        with transaction(con) as tx:
            if content_sha256 is not None and con.execute(
                    "SELECT 1 FROM receipts WHERE content_sha256 = ?", [content_sha256]).fetchone():
                tx.rollback()
                return False
            if attach is not None and con.execute(_ATTACHED[guard], list(attach)).fetchone():
                tx.rollback()
                return False
            small = numbered(small, lambda: con.execute(NEXT_INGEST_SEQ).fetchone()[0])  # type: ignore[index]
            for table, rows in small.items():
                if rows:
                    insert_rows(con, table, rows)
            for table, frame in bulk.items():
                _insert_frame(con, table, frame)
            if supersede is not None:
                new_id, earlier = supersede
                con.executemany("UPDATE receipts SET superseded_by = ? WHERE id = ? AND superseded_by IS NULL",
                                [[new_id, old_id] for old_id in earlier])
            if fill and attach is not None:
                _apply_fill(con, attach[0], fill)
        return True


# Whether an attachment is there already, by the table that keys it (Store._write's `guard`).
_ATTACHED = {
    "anatomy_sources": "SELECT 1 FROM anatomy_sources WHERE receipt_id = ? AND source_sha256 = ?",
    "memory_sources": "SELECT 1 FROM memory_sources WHERE receipt_id = ? AND source_sha256 = ?",
}


def _apply_fill(con: duckdb.DuckDBPyConnection, receipt_id: str, fill: ReceiptFill) -> None:
    """An attachment's additions to its receipt's row (ReceiptFill), inside the caller's transaction."""
    row = con.execute("SELECT provenance_json, software_json FROM receipts WHERE id = ?", [receipt_id]).fetchone()
    if row is None:
        return
    changes = fill.assignments(*row)
    sets = ", ".join(f"{c} = coalesce({c}, ?)" if only_null else f"{c} = ?" for c, _, only_null in changes)
    con.execute(f"UPDATE receipts SET {sets} WHERE id = ?", [*(v for _, v, _ in changes), receipt_id])  # names: ours


def _insert_frame(con: duckdb.DuckDBPyConnection, table: str, frame: pl.DataFrame | pl.LazyFrame) -> None:
    """A bulk frame into `table`, in order, inside the caller's transaction, one slice in memory at a time
    (store/rows.py: bulk_slices), through Parquet files DuckDB reads in one INSERT. Rows inserted from Arrow in
    one transaction stayed in DuckDB's memory until the commit (~125 B a row, measured: 2M steps +250 MiB
    whatever memory_limit says; duck.insert_frame, for a batch's small tables, takes that for rows few enough);
    rows read from Parquet are written out as they come."""
    import polars as pl  # loaded by writes, not by a store opened to read

    from receipts.store.rows import bulk_slices

    if isinstance(frame, pl.DataFrame) and frame.height == 0:
        return  # (a receipt without anatomy pushed: four of its five bulk tables; a scratch folder each cost 1 ms)
    columns = ", ".join(f'"{c}"' for c in frame.collect_schema().names())
    with scratch_dir("bulk") as staging:
        files = []
        for i, part in enumerate(bulk_slices(frame)):
            files.append(str(staging / f"{i:06d}.parquet"))
            part.write_parquet(files[-1], compression="lz4", statistics=False)
        if not files:
            return
        if len(files) == 1:  # one slice: nothing to read ahead (and three statements fewer per receipt pushed)
            con.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM read_parquet(?)", [files])
            return
        # One thread reads the files in order, a row group at a time: two read ahead in parallel (+60 MiB at 2M
        # steps, measured) for a part of a second, in an ingest that is not waiting on this insert.
        threads = con.execute("SELECT current_setting('threads')").fetchone()[0]  # type: ignore[index]
        con.execute("SET threads = 1")
        try:
            con.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM read_parquet(?)", [files])
        finally:
            con.execute(f"SET threads = {int(threads)}")


def os_user() -> str:
    """Who retagged, on a store without logins: the OS account running the command."""
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):          # no passwd entry (some containers) and no LOGNAME/USER
        import os

        return f"uid {os.getuid()}"


def insert_rows(con: duckdb.DuckDBPyConnection, table: str, rows: list[dict[str, Any]]) -> None:
    from receipts.schema.tables import metadata  # writes only: reads never load SQLAlchemy (schema/version.py)

    columns = [c.name for c in metadata.tables[table].columns]
    placeholders = ", ".join("?" for _ in columns)
    names = ", ".join(f'"{c}"' for c in columns)
    con.executemany(f"INSERT INTO {table} ({names}) VALUES ({placeholders})",
                    [[row.get(c) for c in columns] for row in rows])


def check_version(con: duckdb.DuckDBPyConnection, url: str) -> None:
    try:
        row = con.execute("SELECT value FROM schema_meta WHERE key = 'schema_version'").fetchone()
    except duckdb.CatalogException as exc:
        raise StoreError(url, "is not a receipts store (no schema_meta table)") from exc
    if row is not None and int(row[0]) < SCHEMA_VERSION:
        raise StoreError(url, f"schema version {row[0]} is older than this build's {SCHEMA_VERSION}: "
                              f"run `receipts --db {url} db upgrade` (any write also upgrades it)")
    if row is None or int(row[0]) != SCHEMA_VERSION:
        raise UnsupportedVersion(f"store {url} schema", str(row[0] if row else None), str(SCHEMA_VERSION))


def ensure_schema(con: duckdb.DuckDBPyConnection, url: str) -> None:
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if "schema_meta" in tables:
        row = con.execute("SELECT value FROM schema_meta WHERE key = 'schema_version'").fetchone()
        if row is not None and int(row[0]) < SCHEMA_VERSION:
            # A DuckDB file has one writer at a time: upgrading on open is safe (PostgreSQL upgrades explicitly).
            from receipts.store import migrations

            migrations.upgrade(migrations.DuckDBTarget(con, url))
        check_version(con, url)
        return
    from receipts.schema.tables import ddl_statements, metadata  # a new store: its tables made from their definitions

    if tables - set(metadata.tables):
        raise StoreError(url, f"is a DuckDB file of something else (tables: {', '.join(sorted(tables))[:200]})")
    with transaction(con):
        for statement in ddl_statements("duckdb"):
            con.execute(statement)
        con.execute("INSERT INTO schema_meta VALUES ('schema_version', ?), ('created_by', 'receipts')",
                    [str(SCHEMA_VERSION)])
