"""Store URLs: which ones name a PostgreSQL server, their libpq form, and how they are printed.

Its own module because both the store and `receipts db` (store.migrations) need it, and neither may import
the other's module for it (import-linter's acyclic_siblings contract)."""

from __future__ import annotations

from pathlib import Path

from receipts.errors import StoreError

URL_PREFIXES = ("postgresql+psycopg://", "postgresql://", "postgres://")


def libpq_dsn(url: str) -> str:
    """`postgresql+psycopg://…` (SQLAlchemy spelling) or a libpq URI -> a key=value libpq string.

    Both psycopg and DuckDB's postgres extension link libpq, so one string serves both; key=value form
    quotes passwords with odd characters safely."""
    import psycopg  # here, not at the top: `is_server_url` runs on every store open, DuckDB ones too
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    if url.startswith("postgresql+psycopg://"):
        url = "postgresql://" + url[len("postgresql+psycopg://"):]
    try:
        return make_conninfo("", **conninfo_to_dict(url))
    except psycopg.ProgrammingError as exc:
        raise StoreError(redact_url(url), f"not a PostgreSQL URL: {exc}") from exc


def redact_url(url: str) -> str:
    """The URL as printed in errors and status lines: never with its password."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(url.replace("postgresql+psycopg://", "postgresql://", 1))
    except psycopg.ProgrammingError:
        return "postgresql://…"
    user = str(params.get("user") or "")
    host = str(params.get("host") or "")
    port = f":{params['port']}" if params.get("port") else ""
    return f"postgresql://{user + '@' if user else ''}{host}{port}/{params.get('dbname', '')}"


def is_server_url(url: str | Path) -> bool:
    return str(url).startswith(URL_PREFIXES)
