"""Where receipts live: an embedded DuckDB file by default, or a shared PostgreSQL server."""

from __future__ import annotations

import os
from pathlib import Path

from receipts.store.base import Store, WriteResult

DEFAULT_DB = "receipts.duckdb"

__all__ = ["Store", "WriteResult", "open_store", "default_url", "DEFAULT_DB"]


def default_url() -> str:
    return os.environ.get("RECEIPTS_DB") or DEFAULT_DB


def is_server_url(url: str | Path) -> bool:
    return str(url).startswith(("postgresql://", "postgres://", "postgresql+psycopg://"))


def open_store(url: str | Path | None = None, *, read_only: bool = False) -> Store:
    """`postgresql://...` opens the shared server; anything else is a DuckDB file path."""
    url = str(url or default_url())
    if is_server_url(url):
        from receipts.store.postgres_store import PostgresStore

        return PostgresStore(url, read_only=read_only)
    from receipts.store.duckdb_store import DuckDBStore

    return DuckDBStore(Path(url), read_only=read_only)
