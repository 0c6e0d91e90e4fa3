"""Where receipts live: an embedded DuckDB file by default, or a shared PostgreSQL server."""

from __future__ import annotations

import os
from pathlib import Path

from receipts.errors import StoreError
from receipts.store.base import Store, WriteResult

DEFAULT_DB = "receipts.duckdb"

__all__ = ["Store", "WriteResult", "open_store", "default_url", "DEFAULT_DB"]


def default_url() -> str:
    return os.environ.get("RECEIPTS_DB") or DEFAULT_DB


def is_server_url(url: str | Path) -> bool:
    return str(url).startswith(("postgresql://", "postgres://", "postgresql+psycopg://"))


def open_store(url: str | Path | None = None, *, read_only: bool = False) -> Store:
    """`postgresql://...` opens the shared server; anything else is a DuckDB file path.

    Read-only (every read command, the dashboard, push's source) never creates a file, a schema or a table:
    a missing DuckDB file or an unreadable PostgreSQL table is one StoreError saying what to do."""
    url = str(url or default_url())
    if is_server_url(url):
        from receipts.store.postgres_store import PostgresStore

        if read_only:
            _check_pg_readable(url)
        return PostgresStore(url, read_only=read_only)
    from receipts.store.duckdb_store import DuckDBStore

    if read_only and not Path(url).exists():
        raise StoreError(url, "does not exist; create it with `receipts ingest FILE` (or an empty one with "
                              f"`receipts --db {url} db init`)")
    return DuckDBStore(Path(url), read_only=read_only)


def _check_pg_readable(url: str) -> None:
    """Before a read-only open: every receipts table this role cannot SELECT, named in one line.

    Checked in pg_catalog because information_schema hides tables a role holds no privilege on, which
    would read as "no receipts schema" to a role that merely lacks SELECT."""
    import psycopg

    from receipts.schema.tables import metadata
    from receipts.store.postgres_store import libpq_dsn, redact_url

    shown = redact_url(url)
    try:
        with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
            rows = conn.execute(
                "SELECT c.relname, has_table_privilege(c.oid, 'SELECT'), current_user FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v') AND c.relname = ANY(%s)",
                (sorted(metadata.tables),)).fetchall()
    except psycopg.OperationalError as exc:
        raise StoreError(shown, f"cannot connect: {' '.join(str(exc).split())}") from exc
    except psycopg.Error as exc:
        raise StoreError(shown, f"cannot read the catalog: {' '.join(str(exc).split())}") from exc
    denied = sorted(name for name, ok, _ in rows if not ok)
    if denied:
        raise StoreError(shown, f"permission denied: role {rows[0][2]} may not SELECT from {', '.join(denied)}; "
                                "grant it the reader role's privileges (docs/teams.md)")
