"""Where receipts live: an embedded DuckDB file by default, or a shared PostgreSQL server."""

from __future__ import annotations

import os
from pathlib import Path

from receipts.errors import StoreError
from receipts.store.base import Store, WriteResult
from receipts.store.urls import is_server_url

DEFAULT_DB = "receipts.duckdb"

__all__ = ["Store", "WriteResult", "open_store", "default_url", "is_server_url", "DEFAULT_DB"]


def default_url() -> str:
    return os.environ.get("RECEIPTS_DB") or DEFAULT_DB


def open_store(url: str | Path | None = None, *, read_only: bool = False) -> Store:
    """`postgresql://...` opens the shared server; anything else is a DuckDB file path.

    Read-only (every read command, the dashboard, push's source) never creates a file, a schema or a table:
    a missing DuckDB file or an unreadable PostgreSQL table is one StoreError saying what to do."""
    url = str(url or default_url())
    if is_server_url(url):
        from receipts.store.postgres_store import PostgresStore

        return _open_pg_reader(url) if read_only else PostgresStore(url)
    from receipts.store.duckdb_store import DuckDBStore

    if read_only and not Path(url).exists():
        raise StoreError(url, "does not exist; create it with `receipts ingest FILE` (or an empty one with "
                              f"`receipts --db {url} db init`)")
    return DuckDBStore(Path(url), read_only=read_only)


def _open_pg_reader(url: str) -> Store:
    """A read-only PostgreSQL store whose role may SELECT every receipts table, or one StoreError naming the
    tables it may not. The check rides on the store's own connection (one round trip), and runs on a fresh
    one only when the open itself failed: information_schema hides tables a role holds no privilege on, so
    such a role reads as "no receipts schema" until pg_catalog says why."""
    import psycopg

    from receipts.store.postgres_store import PostgresStore
    from receipts.store.urls import libpq_dsn, redact_url

    try:
        store = PostgresStore(url, read_only=True)
    except (StoreError, psycopg.Error) as exc:
        if isinstance(exc.__cause__, psycopg.OperationalError):
            raise  # could not connect: a second try would only wait as long again
        try:
            with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
                _refuse_unreadable(conn, redact_url(url))
        except psycopg.Error:
            pass  # the open's own error says more than a failed second look
        if isinstance(exc, StoreError):
            raise
        raise StoreError(redact_url(url), f"cannot read: {' '.join(str(exc).split())}") from exc
    try:
        _refuse_unreadable(store.conn, store.url)
    except BaseException:
        store.close()
        raise
    return store


def _refuse_unreadable(conn, shown_url: str) -> None:
    from receipts.schema.tables import metadata

    rows = conn.execute(
        "SELECT c.relname, has_table_privilege(c.oid, 'SELECT'), current_user FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v') AND c.relname = ANY(%s)",
        (sorted(metadata.tables),)).fetchall()
    denied = sorted(name for name, ok, _ in rows if not ok)
    if denied:
        raise StoreError(shown_url, f"permission denied: role {rows[0][2]} may not SELECT from {', '.join(denied)}; "
                                    "grant it the reader role's privileges (docs/teams.md)")
