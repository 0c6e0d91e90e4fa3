"""What an Nsight Systems SQLite export holds, read by table and column name: the file checked, the schema probed,
the small tables read, and a damaged large table named.

The schema (table and column names) and the small tables come from Python's sqlite3, because `PRAGMA table_info`
is exact and those tables are a few hundred rows; the large tables are DuckDB's to scan (ingest/nsys_activity.py),
and when that scan fails, `damaged_table` finds which table and column hold a value of the wrong type. Table
layouts differ by nsys version (FORMATS.md): every column is looked up by name, never by position.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from receipts.errors import InputError

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
GRAPH = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
ACTIVITY_COLS = ("start", "end", "deviceId", "streamId", "correlationId")
# CUpti_ActivityMemcpyKind, used when the export has no ENUM_CUDA_MEMCPY_OPER (nsys 2022.x had none).
_COPY_KINDS = {0: "UNKNOWN", 1: "HTOD", 2: "DTOH", 3: "HTOA", 4: "ATOH", 5: "ATOA", 6: "ATOD", 7: "DTOA",
               8: "DTOD", 9: "HTOH", 10: "PTOP", 11: "UVM_HTOD", 12: "UVM_DTOH", 13: "UVM_DTOD"}
_SQLITE_MAGIC = b"SQLite format 3\x00"


@dataclass(frozen=True)
class ExportFacts:
    """An export's schema and small tables: everything read before the large tables are scanned."""
    schema: dict[str, list[str]]  # table -> its column names
    kernel_cols: list[str]
    nvtx_table: str | None  # the NVTX events table (highest version present), None: the export has none
    meta: dict[str, str]  # META_DATA_EXPORT name -> value
    env_rows: dict[str, str]  # TARGET_INFO_SYSTEM_ENV name -> value
    gpus: list[tuple[int | None, str | None, int | None]]  # (device id, name, SM count) per listed GPU
    session_start_ns: int | None  # UTC epoch ns of the capture's start, the zero of its timestamps
    copy_names: dict[int, str]  # memcpy kind code -> 'HTOD', 'DTOH', ...
    names: dict[int, str]  # StringIds
    estimate: dict[str, int] = field(default_factory=dict)  # large table -> rows, as its largest rowid says


def read_facts(path: Path) -> ExportFacts:
    """The file checked and its schema and small tables read; one InputError naming the file (and the table) for a
    file that is no readable nsys export."""
    check_sqlite_file(path)
    with open_sqlite(path) as db:
        schema = read_schema(path, db)
        kernel_cols = require(path, schema, KERNEL, ACTIVITY_COLS, ("globalPid", "globalTid"),
                              ("demangledName", "shortName"))
        return ExportFacts(
            schema=schema, kernel_cols=kernel_cols, nvtx_table=nvtx_table(schema),
            meta=_small_table(path, "META_DATA_EXPORT", lambda: _meta(db, schema)),
            env_rows=_small_table(path, "TARGET_INFO_SYSTEM_ENV", lambda: _system_env(db, schema)),
            gpus=_small_table(path, "TARGET_INFO_GPU", lambda: _gpus(db, schema)),
            session_start_ns=_small_table(path, "TARGET_INFO_SESSION_START_TIME",
                                          lambda: _session_start_ns(db, schema)),
            copy_names=_small_table(path, "ENUM_CUDA_MEMCPY_OPER", lambda: _copy_kind_names(db, schema)),
            names=_small_table(path, "StringIds", lambda: _string_ids(db, schema)),
            estimate={t: _row_estimate(db, t) for t in (RUNTIME, KERNEL, MEMCPY, MEMSET, GRAPH) if t in schema})


# --- file and schema checks -------------------------------------------------------------------

def check_sqlite_file(path: Path) -> None:
    """SQLite's header states the page count (valid when bytes 92..96 equal the change counter at
    24..28): a file shorter than that was cut short in transfer, which SQLite itself only reports
    when a query happens to touch a missing page."""
    try:
        with open(path, "rb") as f:
            head = f.read(100)
        size = path.stat().st_size
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from exc
    if not head.startswith(_SQLITE_MAGIC):
        raise InputError(path, "not a SQLite file; expected an Nsight Systems export (`nsys export --type sqlite`)")
    if len(head) < 100:
        raise InputError(path, f"SQLite file cut short: {size} bytes, shorter than its 100-byte header")
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    if pages and head[24:28] == head[92:96] and size < pages * page_size:
        raise InputError(path, f"SQLite file cut short: its header says {pages} pages of {page_size} bytes "
                               f"({pages * page_size} bytes) but the file has {size} bytes")


def first_line(exc: Exception) -> str:
    text = _message(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _message(exc: Exception) -> str:
    """An error's text. sqlite3 decodes SQLite's messages as UTF-8, and one that quotes a damaged byte of the file
    ('malformed database schema (T) - near "\xab"') reaches Python as the UnicodeDecodeError of that decoding."""
    if isinstance(exc, UnicodeDecodeError) and isinstance(exc.object, bytes):
        return exc.object.decode("utf-8", "replace")
    return str(exc)


_T = TypeVar("_T")


def _small_table(path: Path, table: str, read: Callable[[], _T]) -> _T:
    """One small table read through sqlite3; a damaged page or odd content is one line naming the table."""
    try:
        return read()
    except (sqlite3.Error, ValueError, TypeError, AttributeError) as exc:
        raise InputError(path, f"cannot read: {first_line(exc)}", table=table) from exc


_LARGE_COLUMNS = {"start": "integer", "end": "integer", "deviceId": "integer", "streamId": "integer",
                  "correlationId": "integer", "globalPid": "integer", "globalTid": "integer", "eventType": "integer",
                  "demangledName": "integer", "shortName": "integer", "copyKind": "integer", "textId": "integer",
                  "domainId": "integer", "text": "text"}


def damaged_table(path: Path, schema: dict, nvtx_table: str | None) -> tuple[str | None, str | None]:
    """After DuckDB failed on the large tables: which table, and which column holds a value of the wrong type,
    found through sqlite3 (only on this error path: it scans each column once)."""
    try:
        with open_sqlite(path) as db:
            for table in (KERNEL, MEMCPY, MEMSET, RUNTIME, nvtx_table, "StringIds"):
                if table not in schema:
                    continue
                for col in schema[table]:
                    want = _LARGE_COLUMNS.get(col) if table != "StringIds" else {"id": "integer", "value": "text"}.get(col)
                    if want is None:
                        continue
                    bad = db.execute(f'SELECT typeof("{col}") FROM "{table}" WHERE typeof("{col}") NOT IN (?, \'null\') '
                                     "LIMIT 1", [want]).fetchone()
                    if bad:
                        return table, f"column {col} holds a {bad[0]} value where nsys writes {want}s"
    except (sqlite3.Error, UnicodeDecodeError) as exc:
        return None, first_line(exc)
    return None, None


def open_sqlite(path: Path) -> sqlite3.Connection:
    # immutable=1: exports are read-only artefacts, often on read-only mounts; no locking, no -shm.
    db = sqlite3.connect(path.resolve().as_uri() + "?mode=ro&immutable=1", uri=True)
    # Windows-exported files (nsys 2022.1) carry Latin-1 user names in metadata: never fail on text.
    db.text_factory = lambda raw: raw.decode("utf-8", "replace")
    return db


def read_schema(path: Path, db: sqlite3.Connection) -> dict[str, list[str]]:
    try:
        tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]
        schema = {t: [row[1] for row in db.execute("SELECT * FROM pragma_table_info(?)", [t])] for t in tables}
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        bad = re.search(r"malformed database schema \(([^)]+)\)", _message(exc))
        raise InputError(path, f"not a readable SQLite database ({first_line(exc)})",
                         table=bad.group(1) if bad else None) from exc
    nsys_marks = {"StringIds", "META_DATA_EXPORT", "EXPORT_META_DATA", "TARGET_INFO_SYSTEM_ENV"}
    if not (nsys_marks & set(schema) or any(t.startswith("CUPTI_ACTIVITY_KIND_") for t in schema)):
        raise InputError(path, "a SQLite file but not an Nsight Systems export: none of StringIds, META_DATA_EXPORT, "
                               f"CUPTI_ACTIVITY_KIND_* found (tables: {', '.join(sorted(schema)[:8]) or 'none'})")
    return schema


def require(path: Path, schema: dict[str, list[str]], table: str, cols: tuple[str, ...],
            *one_of: tuple[str, ...]) -> list[str]:
    """The columns of `table`, which must hold every one of `cols` and one of each of `one_of`."""
    if table not in schema:
        raise InputError(path, f"required table {table} is missing (no CUDA kernels in this export: was it "
                               "profiled with --trace=cuda?)", table=table)
    have = schema[table]
    missing = [c for c in cols if c not in have] + [" or ".join(alt) for alt in one_of if not set(alt) & set(have)]
    if missing:
        raise InputError(path, f"column(s) {', '.join(missing)} missing; expected {', '.join(cols)} plus one of each "
                               f"of {one_of} (found: {', '.join(have)})", table=table)
    return have


def has_activity_cols(cols: list[str]) -> bool:
    return set(ACTIVITY_COLS) <= set(cols) and bool({"globalPid", "globalTid"} & set(cols))


def nvtx_table(schema: dict[str, list[str]]) -> str | None:
    # Newer exports may name it NVTX_EVENTS_V2 (FORMATS.md): take the highest version present.
    found = [t for t in schema if re.fullmatch(r"NVTX_EVENTS(_V\d+)?", t)]
    return max(found, key=lambda t: int(t.rsplit("_V", 1)[1]) if "_V" in t else 1) if found else None


# --- small tables (sqlite3) -----------------------------------------------------------------

def _string_ids(db: sqlite3.Connection, schema: dict) -> dict[int, str]:
    # ids are integers and values text in every nsys version; rows of any other type are not names
    if not {"id", "value"} <= set(schema.get("StringIds", ())):
        return {}
    return {i: v for i, v in db.execute("SELECT id, value FROM StringIds")
            if isinstance(i, int) and isinstance(v, str)}


def _meta(db: sqlite3.Connection, schema: dict) -> dict[str, str]:
    # nsys <= 2022.x called it EXPORT_META_DATA (schema 2.9.1); later META_DATA_EXPORT.
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if table in schema and {"name", "value"} <= set(schema[table]):
            return {k: str(v) for k, v in db.execute(f'SELECT name, value FROM "{table}"')}
    return {}


def _session_start_ns(db: sqlite3.Connection, schema: dict) -> int | None:
    """The capture's start, UTC epoch ns: the zero of every timestamp in the export
    (TARGET_INFO_SESSION_START_TIME.utcEpochNs; exports before ~2023 lack it)."""
    if "utcEpochNs" not in schema.get("TARGET_INFO_SESSION_START_TIME", ()):
        return None
    row = db.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1").fetchone()
    return row[0] if row and isinstance(row[0], int) and row[0] > 0 else None


def _system_env(db: sqlite3.Connection, schema: dict) -> dict[str, str]:
    if {"name", "value"} <= set(schema.get("TARGET_INFO_SYSTEM_ENV", ())):
        return {k: str(v) for k, v in db.execute("SELECT name, value FROM TARGET_INFO_SYSTEM_ENV") if v is not None}
    return {}


# The columns of the GPU tables by their names in each layout seen, first match wins: TARGET_INFO_GPU (vmId, id,
# name, ..., smCount, ...: nsys 2021-2026), and (vmId, deviceId, name) in older exports; TARGET_INFO_CUDA_DEVICE
# (gpuId, cudaId, pid[, uuid, numMultiprocessors]) names no model.
_GPU_ID = ("id", "deviceId", "gpuId")
_GPU_SM = ("smCount", "numMultiprocessors")


def _gpus(db: sqlite3.Connection, schema: dict) -> list[tuple[int | None, str | None, int | None]]:
    """(device id as CUPTI's deviceId, name (None: the layout names none), SM count (None: the layout has none))
    per listed GPU, from TARGET_INFO_GPU, else TARGET_INFO_CUDA_DEVICE (a count only); only named columns are read."""
    for table, named in (("TARGET_INFO_GPU", True), ("TARGET_INFO_CUDA_DEVICE", False)):
        cols = schema.get(table, ())
        ident = next((c for c in _GPU_ID if c in cols), None)
        if (named and "name" not in cols) or (not named and ident is None):
            continue
        select = [f'"{c}"' if c else "NULL" for c in (ident, "name" if named else None,
                                                        next((c for c in _GPU_SM if c in cols), None))]
        rows = [(i if isinstance(i, int) else None, _text(n, "name"), s if isinstance(s, int) else None)
                for i, n, s in db.execute(f"SELECT DISTINCT {', '.join(select)} FROM \"{table}\"")
                if n or not named]
        if rows:
            return rows
    return []


def _text(value: object, column: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"column {column} holds a {type(value).__name__} value where nsys writes text")


def _copy_kind_names(db: sqlite3.Connection, schema: dict) -> dict[int, str]:
    if {"id", "name"} <= set(schema.get("ENUM_CUDA_MEMCPY_OPER", ())):
        return {i: n.removeprefix("CUDA_MEMCPY_KIND_") for i, n in db.execute("SELECT id, name FROM ENUM_CUDA_MEMCPY_OPER")}
    return dict(_COPY_KINDS)


def _row_estimate(db: sqlite3.Connection, table: str) -> int:
    """A table's rows as its largest rowid says (an index lookup; nsys appends and never deletes); 0 if unread."""
    try:
        return int(db.execute(f'SELECT max(rowid) FROM "{table}"').fetchone()[0] or 0)
    except sqlite3.Error:
        return 0  # a damaged table is the scan's to name
