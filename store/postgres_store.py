"""The shared team store: one PostgreSQL database, the same tables as the DuckDB file.

Writes go through psycopg 3, one transaction per receipt, bulk frames by COPY. Reads run the very same
sql/*.sql through DuckDB's postgres extension (ATTACH ... READ_ONLY), so every analysis gives identical
answers on both backends.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import duckdb
import polars as pl
import psycopg
from psycopg import sql as pgsql

from receipts.duck import connect, query_frame, query_rows
from receipts.errors import StoreError
from receipts.schema.tables import metadata
from receipts.schema.model import Steps
from receipts.store.base import NEXT_INGEST_SEQ, ReceiptFill, Store, check_unchanged, next_history_rows, numbered
from receipts.store.migrations import PostgresTarget, ensure_schema
from receipts.store.rows import bulk_slices
from receipts.store.urls import libpq_dsn, redact_url

_T = TypeVar("_T")
RUN_LOCK_CLASS = 0x72756E73   # 'runs': the first key of the run locks (Store.run_lock)

# One in-memory DuckDB per process holds the postgres extension; each store's reader is a cursor of it (its own
# connection: its own USE and TEMP macros) over its own ATTACH. Loading the extension makes DuckDB verify the
# 49 MB file's signature, 0.19 s of CPU: once per process now, not once per store opened (a dashboard session,
# a library caller opening stores in turn). A forked child makes its own: a DuckDB instance does not survive fork.
_SCANNER: tuple[int, duckdb.DuckDBPyConnection] | None = None
_SCANNER_LOCK = threading.Lock()
_ALIASES = itertools.count(1)


def _detach(con: duckdb.DuckDBPyConnection, alias: str) -> None:
    try:
        con.execute("USE memory")  # a cursor cannot detach the database it is using
        con.execute(f"DETACH DATABASE IF EXISTS {alias}")
    finally:
        con.close()


def _scanner() -> duckdb.DuckDBPyConnection:
    global _SCANNER
    with _SCANNER_LOCK:
        if _SCANNER is None or _SCANNER[0] != os.getpid():
            _SCANNER = (os.getpid(), connect(extensions=("postgres_scanner",)))
        return _SCANNER[1]


class PostgresStore(Store):
    def __init__(self, url: str, *, read_only: bool = False):
        self.dsn = libpq_dsn(url)
        self.url = redact_url(url)
        self.read_only = read_only
        self._duck: duckdb.DuckDBPyConnection | None = None
        self._release: Callable[[], Any] = lambda: None  # the reader's detach (_reader), once it attached
        try:
            # autocommit: every write opens its own explicit transaction (conn.transaction()).
            self.conn = psycopg.connect(self.dsn, autocommit=True)
        except psycopg.OperationalError as exc:
            raise StoreError(self.url, f"cannot connect: {str(exc).strip()}") from exc
        if read_only:
            # The dashboard role should hold SELECT only; this makes a read-only store safe even when it does not.
            self.conn.execute("SET default_transaction_read_only = on")
        else:
            refuse_without_grants(self.conn, self.url)
        # Never DDL here, writer or not: the tables are the owner's (`db init`, `db upgrade`); a writer that tried
        # to create them would fail on the schema's CREATE privilege, in words the server chose.
        ensure_schema(PostgresTarget(self.conn, self.url))

    def close(self) -> None:
        self._duck = None
        self._release()  # a weakref.finalize: it detaches once, whoever calls it first (this, or the collector)
        self.conn.close()

    # ---- reads: the sql/ queries, run by DuckDB over the attached database -----------------------
    def _reader(self) -> duckdb.DuckDBPyConnection:
        if self._duck is None:
            con, alias = _scanner().cursor(), f"pg_{next(_ALIASES)}"  # ours: never from input
            quoted = self.dsn.replace("'", "''")
            # The attach ends with the store: at close(), or when a store never closed is collected (its server
            # connections would otherwise stay open for the process's life: a DROP DATABASE would wait on them).
            detach = weakref.finalize(self, _detach, con, alias)
            try:
                # A string literal, not a parameter: ATTACH takes no prepared parameters (duckdb 1.4.4).
                con.execute(f"ATTACH '{quoted}' AS {alias} (TYPE postgres, READ_ONLY)")
                con.execute(f"USE {alias}.public")
                self._create_macros(con)  # TEMP macros: this cursor's own, over its own USE
            except BaseException:
                detach()
                raise
            self._duck, self._release = con, detach
        return self._duck

    def sql(self, query: str, params: dict[str, Any] | list[Any] | None = None) -> pl.DataFrame:
        return self._read(query_frame, query, params)

    def sql_rows(self, query: str, params: dict[str, Any] | list[Any] | None = None) -> list[dict[str, Any]]:
        return self._read(query_rows, query, params)

    def _read(self, fetch: Callable[[duckdb.DuckDBPyConnection, str, Any], _T], query: str, params: Any) -> _T:
        con = self._reader()
        try:
            return fetch(con, query, params)
        except (duckdb.CatalogException, duckdb.BinderException):
            # The extension caches the catalog (tables, columns) per attach, though each query reads rows
            # in a fresh snapshot; a table or column created since the attach (db upgrade, another
            # process's init) is only seen after clearing that cache (a missing table is a catalog error, a
            # missing column a binder error). Retry once.
            con.execute("CALL pg_clear_cache()")
            return fetch(con, query, params)

    # ---- writes ----------------------------------------------------------------------------------
    @contextmanager
    def run_lock(self, keys: tuple[str, ...]) -> Iterator[None]:
        """One transaction holding an advisory lock per key (in key order: two writers never wait on each other in
        a cycle); the write inside it is a savepoint of it and commits with it, so the next writer of the run reads
        what this one wrote. Locks on the two-int4 key space, apart from the migrations' one-bigint lock."""
        if self.read_only or not keys:
            yield
            return
        with self.conn.transaction():
            for key in sorted(set(keys)):
                objid = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big", signed=True)
                self.conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (RUN_LOCK_CLASS, objid))
            yield

    def _merge_json(self, receipt_id, column, facts, source_rows, fill=None) -> bool:
        if self.read_only:
            raise StoreError(self.url, "opened read-only; writes go through a store opened for writing")
        try:
            with self.conn.transaction():
                if not _insert_guard(self.conn, "receipt_sources", source_rows[0], ("receipt_id", "sha256")):
                    raise psycopg.Rollback()
                # column names come from our own code (topology_json / software_json), never from input.
                # FOR UPDATE: a concurrent attachment to this receipt waits here until we commit, then reads
                # our merge instead of the value before it (read-merge-write without it loses one side).
                current = self.conn.execute(f"SELECT {column} FROM receipts WHERE id = %s FOR UPDATE",
                                            (receipt_id,)).fetchone()
                self.conn.execute(f"UPDATE receipts SET {column} = %s WHERE id = %s",
                                  (self._merged(current[0] if current else None, facts), receipt_id))
                if fill:
                    _apply_fill(self.conn, receipt_id, fill)
                return True
        except psycopg.errors.InsufficientPrivilege as exc:
            raise StoreError(self.url, f"permission denied: {str(exc).strip()}") from exc
        return False

    def _retag(self, receipt_id, expected, changes, history) -> int:
        if self.read_only:
            raise StoreError(self.url, "opened read-only; writes go through a store opened for writing")
        columns = list(expected)
        try:
            with self.conn.transaction():
                # FOR UPDATE: two retags of one receipt serialise here; the second sees the first's values.
                row = self.conn.execute(pgsql.SQL("SELECT {} FROM receipts WHERE id = %s FOR UPDATE").format(
                    pgsql.SQL(", ").join(map(pgsql.Identifier, columns))), (receipt_id,)).fetchone()
                check_unchanged(self.url, receipt_id, columns, row, expected)
                last = (self.conn.execute("SELECT coalesce(max(seq), 0) FROM identity_history WHERE receipt_id = %s",
                                          (receipt_id,)).fetchone() or (0,))[0]
                rows = next_history_rows(self.url, receipt_id, last, history)
                if changes:
                    self.conn.execute(pgsql.SQL("UPDATE receipts SET {} WHERE id = %s").format(
                        pgsql.SQL(", ").join(pgsql.SQL("{} = %s").format(pgsql.Identifier(c)) for c in changes)),
                        [*changes.values(), receipt_id])
                names = _columns("identity_history")
                for entry in rows:
                    # changed_by: the role running this retag (current_user), or the one a pushed row names.
                    self.conn.execute(pgsql.SQL("INSERT INTO identity_history ({}) VALUES ({})").format(
                        pgsql.SQL(", ").join(map(pgsql.Identifier, names)),
                        pgsql.SQL(", ").join(pgsql.SQL("coalesce(%s, current_user)") if c == "changed_by"
                                             else pgsql.Placeholder() for c in names)), [entry.get(c) for c in names])
                return rows[-1]["seq"]
        except psycopg.errors.ReadOnlySqlTransaction as exc:
            raise StoreError(self.url, "this role may not write (read-only); use a writer role to retag") from exc
        except psycopg.errors.InsufficientPrivilege as exc:
            raise StoreError(self.url, f"permission denied: {str(exc).strip()} (docs/teams.md lists the writer's "
                                       "grants; after `db upgrade` to schema 3 the UPDATE grant is needed again)") from exc

    def _replace_rows(self, table: str, rows: list[dict[str, Any]]) -> None:
        with self.conn.transaction():
            self.conn.execute(pgsql.SQL("DELETE FROM {} WHERE receipt_id = ANY(%s)").format(pgsql.Identifier(table)),
                              ([r["receipt_id"] for r in rows],))
            _insert_rows(self.conn, table, rows)

    def _write(self, *, content_sha256, small, bulk, attach=None, supersede=None, guard="anatomy_sources",
               fill=None) -> bool:
        if self.read_only:
            raise StoreError(self.url, "opened read-only; writes go through a store opened for writing")
        small = dict(small)
        try:
            with self.conn.transaction():
                # The guard row goes first: its UNIQUE/PK constraint decides races between writers. A
                # concurrent writer of the same content waits on the index entry until the first commits
                # (then DO NOTHING) or aborts (then it inserts). Never read-then-write.
                conflict: tuple[str, ...]
                if content_sha256 is not None:
                    guard_table, conflict = "receipts", ("content_sha256",)
                else:
                    guard_table, conflict = guard, ("receipt_id", "source_sha256")
                small = numbered(small, lambda: self.conn.execute(NEXT_INGEST_SEQ).fetchone()[0])  # type: ignore[index]
                guard_rows = small.pop(guard_table)
                if not _insert_guard(self.conn, guard_table, guard_rows[0], conflict):
                    raise psycopg.Rollback()
                if guard_rows[1:]:
                    _insert_rows(self.conn, guard_table, guard_rows[1:])
                for table, rows in small.items():
                    if rows:
                        _insert_rows(self.conn, table, rows)
                for table, frame in bulk.items():
                    _copy_frame(self.conn, table, frame)
                if supersede is not None:
                    new_id, earlier = supersede
                    with self.conn.cursor() as cur:
                        cur.executemany("UPDATE receipts SET superseded_by = %s WHERE id = %s AND superseded_by IS NULL",
                                        [(new_id, old_id) for old_id in earlier])
                if fill and attach is not None:
                    _apply_fill(self.conn, attach[0], fill)
                return True
        except psycopg.errors.ReadOnlySqlTransaction as exc:
            raise StoreError(self.url, "this role may not write (read-only); use a writer role to ingest") from exc
        except psycopg.errors.InsufficientPrivilege as exc:
            raise StoreError(self.url, f"permission denied: {' '.join(str(exc).split())}; {NOT_GRANTED}") from exc
        # psycopg.Rollback exits the transaction block quietly: the content was already there.
        return False


def _apply_fill(conn: psycopg.Connection, receipt_id: str, fill: ReceiptFill) -> None:
    """An attachment's additions to its receipt's row (ReceiptFill), inside the caller's transaction; FOR UPDATE:
    two attachments of one receipt merge its JSON columns one after the other, neither losing the other's. A
    writer role granted UPDATE on the fact columns only (the grants before machine facts merged) still attaches:
    the merge is left out (a savepoint), the attachment kept."""
    row = conn.execute("SELECT provenance_json, software_json FROM receipts WHERE id = %s FOR UPDATE",
                       (receipt_id,)).fetchone()
    if row is None:
        return
    changes = fill.assignments(*row)
    sets = pgsql.SQL(", ").join(
        pgsql.SQL("{c} = coalesce({c}, %s)" if only_null else "{c} = %s").format(c=pgsql.Identifier(c))
        for c, _, only_null in changes)
    try:
        with conn.transaction():
            conn.execute(pgsql.SQL("UPDATE receipts SET {} WHERE id = %s").format(sets),
                         [*(v for _, v, _ in changes), receipt_id])
    except psycopg.errors.InsufficientPrivilege:
        pass


def refuse_without_grants(conn: psycopg.Connection, url: str) -> None:
    """One StoreError before anything is read or written when a writer may not SELECT from every receipts table
    there is: the owner has not granted it its rights yet. (pg_catalog sees tables a role holds no privilege on;
    information_schema hides them, so such a role would take the store for an empty one.) A role that may read but
    not INSERT is told when it writes: a file already stored needs no write."""
    rows = conn.execute(
        "SELECT c.relname, has_table_privilege(c.oid, 'SELECT'), current_user FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND c.relname = ANY(%s) ORDER BY c.relname",
        (sorted(metadata.tables),)).fetchall()
    denied = [name for name, ok, _ in rows if not ok]
    if denied:
        raise StoreError(url, f"permission denied: role {rows[0][2]} may not SELECT from {', '.join(denied)}: "
                              f"{NOT_GRANTED}")


# What a role the owner has not granted a writer's rights is told (writers never create or alter tables).
NOT_GRANTED = "as the store's owner, grant this role a writer's rights (the GRANT statements of docs/teams.md)"


def _columns(table: str) -> list[str]:
    return [c.name for c in metadata.tables[table].columns]


def _insert_guard(conn: psycopg.Connection, table: str, row: dict[str, Any], conflict: tuple[str, ...]) -> bool:
    columns = _columns(table)
    statement = pgsql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) DO NOTHING RETURNING 1").format(
        pgsql.Identifier(table), pgsql.SQL(", ").join(map(pgsql.Identifier, columns)),
        pgsql.SQL(", ").join(pgsql.Placeholder() * len(columns)),
        pgsql.SQL(", ").join(map(pgsql.Identifier, conflict)))
    return conn.execute(statement, [row.get(c) for c in columns]).fetchone() is not None


def _insert_rows(conn: psycopg.Connection, table: str, rows: list[dict[str, Any]]) -> None:
    columns = _columns(table)
    statement = pgsql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
        pgsql.Identifier(table), pgsql.SQL(", ").join(map(pgsql.Identifier, columns)),
        pgsql.SQL(", ").join(pgsql.Placeholder() * len(columns)))
    with conn.cursor() as cur:
        cur.executemany(statement, [[row.get(c) for c in columns] for row in rows])


def _copy_frame(conn: psycopg.Connection, table: str, frame: Steps) -> None:
    """COPY ... FROM STDIN (CSV) from polars' writer, a slice of rows at a time (store/rows.py: bulk_slices):
    no per-row Python work, and a spilled step series is never whole in memory.

    CSV conventions that make the round trip exact: nulls are unquoted empty fields and every string is
    quoted (so '' stays an empty string, not NULL); polars writes floats in shortest round-trip form and
    NaN/inf spellings PostgreSQL's float8 input accepts."""
    names = frame.collect_schema().names()
    known = set(_columns(table))
    unknown = [c for c in names if c not in known]
    if unknown:
        raise StoreError(table, f"bulk frame has columns the table lacks: {unknown}")
    statement = pgsql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(
        pgsql.Identifier(table), pgsql.SQL(", ").join(map(pgsql.Identifier, names)))
    chunk = 1 << 20
    slices = bulk_slices(frame)
    first = next(slices, None)
    if first is None:
        return
    with conn.cursor().copy(statement) as copy:
        for part in itertools.chain([first], slices):
            buffer = io.BytesIO()
            part.write_csv(buffer, include_header=False, null_value="", quote_style="non_numeric")
            view = buffer.getbuffer()
            for start in range(0, len(view), chunk):
                copy.write(view[start:start + chunk])
