"""DuckDB connections with the extensions that ship as wheels (duckdb-ext-sqlite / -postgres).

Nothing is downloaded at run time: GPU clusters are often air-gapped.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

if TYPE_CHECKING:
    import polars as pl


def extension_directory() -> str | None:
    spec = importlib.util.find_spec("duckdb_ext")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "extensions"
        if candidate.is_dir():
            return str(candidate)
    return None


def connect(database: str = ":memory:", *, read_only: bool = False, extensions: tuple[str, ...] = (),
            threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """A connection with the bundled extensions' directory; `threads`: DuckDB's worker threads (default: one per
    core), where RECEIPTS_THREADS is not set."""
    config: dict[str, str | bool | int | float | list[str]] = {
        "autoinstall_known_extensions": "false", "autoload_known_extensions": "false"}
    ext_dir = extension_directory()
    if ext_dir:
        config["extension_directory"] = ext_dir
    # A worker process of a parallel map gets its share of the cores (pipeline/execution.py sets this); DuckDB
    # would otherwise start one thread per core in every worker.
    chosen = os.environ.get("RECEIPTS_THREADS", "")
    if chosen.isdigit() and int(chosen) > 0:
        config["threads"] = int(chosen)
    elif threads is not None:
        config["threads"] = threads
    con = duckdb.connect(database, read_only=read_only, config=config)
    # DuckDB draws its own progress bar on a terminal under a query that runs past 2 s: across ours (cli/progress.py)
    # or a command's table. receipts says its own progress. (A connection's setting, not a connect-time one.)
    con.execute("SET enable_progress_bar = false")
    for name in extensions:
        con.load_extension(name)
    return con


def query_frame(con: duckdb.DuckDBPyConnection, query: str,
                params: dict[str, Any] | list[Any] | None = None) -> pl.DataFrame:
    """A query's rows as a polars frame, through the Arrow C stream interface polars reads directly. The
    client's `.pl()` goes through a pyarrow Table instead: pyarrow loaded for every command (+25 MiB, ~0.1 s)
    and each result copied once more on the way."""
    import polars as pl

    return pl.DataFrame(con.sql(query, params=params or None))


def query_rows(con: duckdb.DuckDBPyConnection, query: str,
               params: dict[str, Any] | list[Any] | None = None) -> list[dict[str, Any]]:
    """A query's rows as dicts of Python values, the values DuckDB's client gives (the same as a polars frame's
    `to_dicts()` for the types receipts stores), without polars: 10,000 receipts' list rows in ~0.02 s."""
    cursor = con.execute(query, params or None)
    names = [column[0] for column in cursor.description or ()]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


class _ArrowStream:
    """A polars frame seen only through the Arrow C stream interface: DuckDB's client, handed the frame itself,
    converts it through pyarrow (and loads pandas), handed this it reads the stream."""

    def __init__(self, frame: pl.DataFrame) -> None:
        self._frame = frame

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        return self._frame.__arrow_c_stream__(requested_schema)


def insert_frame(con: duckdb.DuckDBPyConnection, table: str, frame: pl.DataFrame) -> None:
    """The rows of `frame` into `table`, by column name (a migrated table's columns need not be in the schema's
    order), in one INSERT read through the Arrow C stream, each column cast to the table's type by DuckDB. For
    rows few enough to hold: DuckDB keeps what it inserts from Arrow in memory until the commit. `table` and the
    frame's column names come from the schema (schema/tables.py), never from input."""
    columns = ", ".join(f'"{c}"' for c in frame.columns)
    # The view lives in the caller's transaction: a failed insert's rollback takes it too (a DROP in a `finally`
    # would run in the aborted transaction and hide the insert's error).
    con.from_arrow(_ArrowStream(frame)).create_view("_receipts_incoming", replace=True)
    con.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM _receipts_incoming")
    con.execute("DROP VIEW _receipts_incoming")
