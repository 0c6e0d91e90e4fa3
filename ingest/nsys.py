"""Nsight Systems SQLite export -> Anatomy (step-time anatomy, NVTX ranges, identity evidence).

Reading: the schema (table and column names) and the small tables come from Python's sqlite3,
because `PRAGMA table_info` is exact and those tables are a few hundred rows. The large tables
(kernels, memcpy, memset, runtime calls, NVTX) are scanned by DuckDB's sqlite extension (loaded
from the duckdb-ext wheel, no download), reading only the named columns, and streamed out as Arrow
record batches: first the runtime calls, kept per process as the sorted correlation ids that a step range
claims (ingest/correlation.py), then the GPU activity, each batch given its step (a binary search of its
correlation id) and its category as it arrives, and kept as only what the anatomy reads (_Activity). No join
or GROUP BY runs in DuckDB and no frame holds correlation ids or launch times for the whole capture.
Fetching millions of rows through sqlite3 builds a Python object per value instead.

Definitions (the receipt says them too, in Anatomy.attribution and .step_marker):
- rank: processes that launched GPU work, ordered by (lowest deviceId, pid). Overridden by the
  rank the file itself states: RANK / SLURM_PROCID / OMPI_COMM_WORLD_RANK / PMI_RANK in the
  captured environment when the file holds ONE GPU process (one nsys per rank), or an NVTX thread
  name 'MPI Rank N' (nsys --trace=mpi) in that process.
- step: an NVTX range whose text matches `step_pattern`. Its GPU work is every kernel / memcpy /
  memset whose launching runtime call (same correlationId and process) started on ANY thread of
  that process while the range was open: [range start, range end).
- idle (ingest.intervals): measured inside the step's GPU span [first start, last end] of its
  own attributed work, not inside the NVTX range: CPU-side ranges lead the GPU by the launch
  queue depth, so a marker window would count the queue as idle.
- warm-up: the first step of each rank is marked warmup (compile / first-step badput).
- CUDA graphs: with `nsys --cuda-graph-trace=graph` (the default) a replay is ONE row of
  CUPTI_ACTIVITY_KIND_GRAPH_TRACE and its kernels are not rows of the kernel table: each replay is
  counted as busy time of category `cuda_graph`, attributed through its cudaGraphLaunch call like any
  launch. With `--cuda-graph-trace=node` the kernels inside graphs are ordinary kernel rows (graphNodeId
  set) and categorised by name; graph rows, if an export had both, are then left out (counted once).
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import sqlite3
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import duckdb
import numpy as np
import polars as pl

from receipts import duck
from receipts.ingest.heap import trim_c_heap
from receipts.errors import InputError
from receipts.ingest.column_bins import ColumnBins, quantile_bounds
from receipts.ingest.correlation import Launches, StepRanges
from receipts.ingest.intervals import STEP_NS, anatomy_from_ns, sort_order, sorted_step_ns
from receipts.schema.categories import CATEGORY_ENUM, CategoryRules
from receipts.schema.model import (ANATOMY_NVTX_SCHEMA, ANATOMY_ROW_SCHEMA, ANATOMY_STEP_SCHEMA,
                                   Anatomy, EnvVar, IdentityClaim, epoch_iso)
from receipts.schema.secrets import EnvRules, env_overlay, load_env_rules, redact, secret_values_in
from receipts.sql import load_query

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
GRAPH = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
_ACTIVITY_COLS = ("start", "end", "deviceId", "streamId", "correlationId")
_PID_MASK = 0xFFFFFF  # globalTid = (hw << 48) | (pid << 24) | tid; globalPid has tid = 0
# CUpti_ActivityMemcpyKind, used when the export has no ENUM_CUDA_MEMCPY_OPER (nsys 2022.x had none).
_KIND = {"kernel": 0, "memcpy": 1, "memset": 2, "graph": 3}  # activity kind codes (UTINYINT)
_COPY_KINDS = {0: "UNKNOWN", 1: "HTOD", 2: "DTOH", 3: "HTOA", 4: "ATOH", 5: "ATOA", 6: "ATOD", 7: "DTOA",
               8: "DTOD", 9: "HTOH", 10: "PTOP", 11: "UVM_HTOD", 12: "UVM_DTOH", 13: "UVM_DTOD"}
_COPY_CATEGORY = {"HTOD": "memcpy_h2d", "HTOA": "memcpy_h2d", "UVM_HTOD": "memcpy_h2d",
                  "DTOH": "memcpy_d2h", "ATOH": "memcpy_d2h", "UVM_DTOH": "memcpy_d2h",
                  "DTOD": "memcpy_d2d", "ATOD": "memcpy_d2d", "DTOA": "memcpy_d2d", "ATOA": "memcpy_d2d",
                  "UVM_DTOD": "memcpy_d2d", "PTOP": "memcpy_p2p"}
_RANK_ENV = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
_WORLD_ENV = ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
_SQLITE_MAGIC = b"SQLite format 3\x00"


def export_report(path: Path, into: Path | None = None) -> Path:
    """`.nsys-rep` -> `.sqlite` via `nsys export`: beside the report (and reused there while newer than it), or in
    the folder `into` (a scratch folder the caller removes: the report's own folder is read-only)."""
    path = Path(path)
    out = path.with_suffix(".sqlite") if into is None else into / path.with_suffix(".sqlite").name
    if into is None and out.is_file() and out.stat().st_mtime >= path.stat().st_mtime:
        return out
    command = ["nsys", "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(out), str(path)]
    if shutil.which("nsys") is None:
        raise InputError(path, "an Nsight Systems report needs exporting to SQLite first and `nsys` is not on "
                               f"PATH; run: {' '.join(command[:5])} --output {out} {path}")
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0 or not out.is_file():
        raise InputError(path, f"`{' '.join(command)}` failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    return out


def exports_beside(path: Path) -> bool:
    """Whether a report's export can be written (and kept for the next ingest) beside it."""
    folder = Path(path).parent
    return folder.exists() and _writable(folder)


def _writable(folder: Path) -> bool:
    try:
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


def parse(path: Path, *, rules: CategoryRules, step_pattern: str = r"^step[ _#:]*(\d+)$",
          keep_raw: bool = False, env_rules: EnvRules | None = None, progress: Progress | None = None,
          spill: Path | None = None) -> Anatomy:
    """`env_rules`: the secret rules of the loaded configuration (shipped + ./receipts.toml + --registry);
    None: the shipped ones. `progress`: called with the fraction of the large tables' rows streamed so far.
    `spill`: a directory (the caller's, removed after the anatomy is used) where the runtime calls and the kept
    activity wait as they stream in (read back by correlation-id partition and by step group or time bin) and
    where each process's attributed activity (`events`) is written as Parquet as it is made, the anatomy's
    `events` a lazy scan of those files; else all of them are held in memory."""
    path = Path(path)
    _check_sqlite_file(path)
    warnings: list[str] = []
    with _open_sqlite(path) as db:
        schema = _read_schema(path, db)
        kernel_cols = _require(path, schema, KERNEL, _ACTIVITY_COLS, ("globalPid", "globalTid"),
                               ("demangledName", "shortName"))
        meta = _small_table(path, "META_DATA_EXPORT", lambda: _meta(db, schema))
        env_rows = _small_table(path, "TARGET_INFO_SYSTEM_ENV", lambda: _system_env(db, schema))
        gpu_names = _small_table(path, "TARGET_INFO_GPU", lambda: _gpu_names(db, schema))
        session_start = _small_table(path, "TARGET_INFO_SESSION_START_TIME", lambda: _session_start_ns(db, schema))
        copy_names = _small_table(path, "ENUM_CUDA_MEMCPY_OPER", lambda: _copy_kind_names(db, schema))
        names = _small_table(path, "StringIds", lambda: _string_ids(db, schema))
        estimate = {t: _row_estimate(db, t) for t in (RUNTIME, KERNEL, MEMCPY, MEMSET, GRAPH) if t in schema}
        streamed = _RowsStreamed(sum(estimate.values()), progress)
    nvtx_table = _nvtx_table(schema)
    if nvtx_table is None:
        warnings.append("no NVTX table (NVTX_EVENTS*) in the export: steps and NVTX ranges unavailable")
    for table in (MEMCPY, MEMSET):
        if table not in schema:
            warnings.append(f"table {table} absent: no {table.rsplit('_', 1)[1].lower()} activity recorded")

    con = duck.connect(extensions=("sqlite_scanner",))
    try:
        # ATTACH takes no bound parameters: the path is a quoted literal.
        con.execute(f"ATTACH '{str(path.resolve()).replace(chr(39), chr(39) * 2)}' AS nsys (TYPE sqlite, READ_ONLY)")
        activity_query = _make_views(con, path, schema, kernel_cols, nvtx_table, keep_raw)
        ranges = con.sql(load_query("_nsys_ranges")).pl() if nvtx_table else _empty_ranges()
        step_of = _step_numbers(ranges["text"].unique().to_list(), step_pattern, path)
        step_ranges = (ranges.with_columns(pl.col("text").replace_strict(step_of, default=None, return_dtype=pl.Int64)
                                           .alias("step"))
                       .filter(pl.col("step").is_not_null())
                       .select("pid_key", "step", pl.col("start_ns").alias("range_start_ns"),
                               pl.col("end_ns").alias("range_end_ns")))
        if step_ranges.height and RUNTIME not in schema:
            raise InputError(path, f"step ranges found but table {RUNTIME} is absent: GPU work cannot reach a step "
                                   "(re-profile with --trace=cuda)", table=RUNTIME)
        step_values, by_pid = _ranges_by_pid(step_ranges)
        launches = Launches(streamed.counted(_batches(con, load_query("_nsys_launches"))) if RUNTIME in schema else (),
                            by_pid, spill)
        copy_cat = {k: _COPY_CATEGORY.get(n, "other") for k, n in copy_names.items()}
        activities = sum(n for t, n in estimate.items() if t != RUNTIME)
        activity = _Activity(step_values, names, copy_cat, rules, keep_raw, has_steps=step_ranges.height > 0,
                             group_codes=_group_codes(step_values.size, activities), spill=spill)
        for batch in streamed.counted(_batches(con, activity_query)):
            activity.add(batch, launches)
        repeated = launches.repeated
        launches.close()  # every claimed runtime call's id and code: not held past its use
        thread_ranks = _mpi_thread_ranks(con) if nvtx_table else {}
    except _TimesOutOfRange as exc:
        raise InputError(path, f"a start or end {_FAR:,} ns or more from the capture's start ({exc.rows} such "
                               f"row{'s' if exc.rows != 1 else ''} in the first batch holding one; nsys writes ns "
                               "since the session started): the table is damaged", table=exc.table) from exc
    except (duckdb.Error, RuntimeError) as exc:  # the sqlite scanner raises a bare RuntimeError on a bad page
        bad_table, what = _damaged_table(path, schema, nvtx_table)
        raise InputError(path, f"cannot read the export: {what or _first_line(exc)}; the file may be cut short or "
                               "corrupt", table=bad_table) from exc
    finally:
        con.close()
    graph_trace = _graph_mode(path, schema, activity)
    if graph_trace is not None:
        warnings.append(_graph_note(activity, graph_trace))
    with_graphs = graph_trace != "node"  # graph replays count unless their kernels are rows of their own
    devices = pl.concat(activity.devices)
    if not with_graphs:
        devices = devices.filter(~pl.col("graph"))
    if activity.ended_early:
        warnings.append(f"{activity.ended_early} GPU activities end before they start or have no end (a damaged "
                        "export: nsys writes neither): each counted as zero length")
    if repeated:
        warnings.append(f"{repeated} (process, correlationId) pairs of {RUNTIME} repeat: each GPU "
                        "activity is attributed through the earliest runtime call with its correlation id")

    environ = _parse_environment(env_rows.get("DeviceEnvironment"))
    rank_of, attribution_rank, world, ranks_stated = _ranks(devices, environ, thread_ranks)
    has_steps = step_ranges.height > 0
    if has_steps:
        unattributed = activity.unclaimed(with_graphs)
        marker = f"NVTX ranges matching {step_pattern!r} in table {nvtx_table}"
    else:
        unattributed = 0
        marker = f"none: no NVTX range matches {step_pattern!r}; one window (step null) covers the whole capture"
        warnings.append(f"no NVTX ranges matching {step_pattern!r} found in table {nvtx_table or 'NVTX_EVENTS'}")
    # The model of the devices that ran kernels: Windows exports also list display adapters (Intel HD,
    # 'Microsoft Basic Render Driver'), which are no CUDA device (smCount 0) and ran nothing.
    ran = set(devices["device_id"].drop_nulls().unique().to_list())
    raw = _raw_events(activity.raw_frame(with_graphs, rank_of), names) if keep_raw else None
    rows, steps, kernels, events = _anatomy(activity, with_graphs, step_ranges, rank_of, has_steps, names, spill)
    nvtx = _nvtx_frame(ranges, rank_of)
    cuda_devices = [(i, n) for i, n, sm in gpu_names if sm != 0]
    used = [n for i, n in cuda_devices if i in ran] or [n for _, n in cuda_devices]
    gpu_model = max(sorted(set(used)), key=used.count) if used else None
    gpus_on_host = len(cuda_devices) or None
    gpu_count = gpus_on_host or len(ran) or None
    if not gpu_names:
        warnings.append("no TARGET_INFO_GPU / TARGET_INFO_CUDA_DEVICE rows: GPU count is the devices that ran work")
    return Anatomy(
        source_format="nsys",
        schema_version=meta.get("EXPORT_SCHEMA_VERSION"),
        rows=rows, steps=steps, nvtx=nvtx,
        step_marker=marker,
        attribution=("GPU activity -> runtime call by (globalPid, correlationId); step = NVTX range open on ANY "
                     f"thread of the launching process at the call's start; {attribution_rank}"),
        unattributed=unattributed,
        claim=IdentityClaim(hostname=env_rows.get("Hostname")),
        gpu_model=gpu_model, gpu_count=gpu_count, world_size=world, ranks_traced=len(rank_of) or None,
        ranks_stated=ranks_stated, gpus_on_host=gpus_on_host,
        started_at=epoch_iso(session_start / 1e9) if session_start else None, clock_origin_ns=session_start,
        env=_env_evidence(environ, env_rules),
        software={k: v for k, v in {"nsys": meta.get("EXPORT_PRODUCT_VERSION"),
                                    "nvidia_driver": env_rows.get("NvDriverVersion"),
                                    "cuda_driver": env_rows.get("CudaDriverVersion"),
                                    "os": env_rows.get("OsDescription")}.items() if v},
        warnings=tuple(warnings),
        raw_events=raw,
        events=events,
        kernel_steps=kernels,
    )


def _raw_events(activity: pl.DataFrame, names: dict[int, str]) -> pl.DataFrame:
    """Every activity of a ranked process, named (--keep-raw; written as Parquet beside the store)."""
    return (activity.filter(pl.col("rank").is_not_null())
            .with_columns(pl.col("name_id").replace_strict(names, default=None, return_dtype=pl.Utf8).alias("name"))
            .with_columns(pl.col("category").cast(pl.Utf8))
            .with_columns(pl.when(pl.col("kind") == _KIND["kernel"]).then(pl.col("name"))
                          .otherwise(pl.col("category")).alias("name"))
            .with_columns(pl.col("short_id").replace_strict(names, default=None, return_dtype=pl.Utf8)
                          .alias("short_name"))
            .select("rank", "step", "category", "name", "start_ns", "end_ns", pl.col("stream_id").alias("stream"),
                    "short_name"))


# --- file and schema checks -------------------------------------------------------------------

def _check_sqlite_file(path: Path) -> None:
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


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _small_table(path: Path, table: str, read):
    """One small table read through sqlite3; a damaged page or odd content is one line naming the table."""
    try:
        return read()
    except (sqlite3.Error, ValueError, TypeError, AttributeError) as exc:
        raise InputError(path, f"cannot read: {_first_line(exc)}", table=table) from exc


def _string_ids(db: sqlite3.Connection, schema: dict) -> dict[int, str]:
    # ids are integers and values text in every nsys version; rows of any other type are not names
    if not {"id", "value"} <= set(schema.get("StringIds", ())):
        return {}
    return {i: v for i, v in db.execute("SELECT id, value FROM StringIds")
            if isinstance(i, int) and isinstance(v, str)}


_LARGE_COLUMNS = {"start": "integer", "end": "integer", "deviceId": "integer", "streamId": "integer",
                  "correlationId": "integer", "globalPid": "integer", "globalTid": "integer", "eventType": "integer",
                  "demangledName": "integer", "shortName": "integer", "copyKind": "integer", "textId": "integer",
                  "domainId": "integer", "text": "text"}


def _damaged_table(path: Path, schema: dict, nvtx_table: str | None) -> tuple[str | None, str | None]:
    """After DuckDB failed on the large tables: which table, and which column holds a value of the wrong type,
    found through sqlite3 (only on this error path: it scans each column once)."""
    try:
        with _open_sqlite(path) as db:
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
    except sqlite3.Error as exc:
        return None, _first_line(exc)
    return None, None


def _open_sqlite(path: Path) -> sqlite3.Connection:
    # immutable=1: exports are read-only artefacts, often on read-only mounts; no locking, no -shm.
    db = sqlite3.connect(path.resolve().as_uri() + "?mode=ro&immutable=1", uri=True)
    # Windows-exported files (nsys 2022.1) carry Latin-1 user names in metadata: never fail on text.
    db.text_factory = lambda raw: raw.decode("utf-8", "replace")
    return db


def _read_schema(path: Path, db: sqlite3.Connection) -> dict[str, list[str]]:
    try:
        tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]
        schema = {t: [row[1] for row in db.execute("SELECT * FROM pragma_table_info(?)", [t])] for t in tables}
    except sqlite3.DatabaseError as exc:
        raise InputError(path, f"not a readable SQLite database ({exc})") from exc
    nsys_marks = {"StringIds", "META_DATA_EXPORT", "EXPORT_META_DATA", "TARGET_INFO_SYSTEM_ENV"}
    if not (nsys_marks & set(schema) or any(t.startswith("CUPTI_ACTIVITY_KIND_") for t in schema)):
        raise InputError(path, "a SQLite file but not an Nsight Systems export: none of StringIds, META_DATA_EXPORT, "
                               f"CUPTI_ACTIVITY_KIND_* found (tables: {', '.join(sorted(schema)[:8]) or 'none'})")
    return schema


def _require(path: Path, schema: dict[str, list[str]], table: str, cols: tuple[str, ...],
             *one_of: tuple[str, ...]) -> list[str]:
    if table not in schema:
        raise InputError(path, f"required table {table} is missing (no CUDA kernels in this export: was it "
                               "profiled with --trace=cuda?)", table=table)
    have = schema[table]
    missing = [c for c in cols if c not in have] + [" or ".join(alt) for alt in one_of if not set(alt) & set(have)]
    if missing:
        raise InputError(path, f"column(s) {', '.join(missing)} missing; expected {', '.join(cols)} plus one of each "
                               f"of {one_of} (found: {', '.join(have)})", table=table)
    return have


def _nvtx_table(schema: dict[str, list[str]]) -> str | None:
    # Newer exports may name it NVTX_EVENTS_V2 (FORMATS.md): take the highest version present.
    found = [t for t in schema if re.fullmatch(r"NVTX_EVENTS(_V\d+)?", t)]
    return max(found, key=lambda t: int(t.rsplit("_V", 1)[1]) if "_V" in t else 1) if found else None


# --- small tables (sqlite3) -----------------------------------------------------------------

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


def _gpu_names(db: sqlite3.Connection, schema: dict) -> list[tuple[int | None, str, int | None]]:
    """(device id as CUPTI's deviceId, name, SM count or None when the layout has none) per listed GPU.
    Layouts differ by version (some with vmId first); only the named columns are read."""
    cols = set(schema.get("TARGET_INFO_GPU", ()))
    if {"id", "name"} <= cols:
        sm = "smCount" if "smCount" in cols else "NULL"
        return [(i if isinstance(i, int) else None, n, s if isinstance(s, int) else None)
                for i, n, s in db.execute(f"SELECT DISTINCT id, name, {sm} FROM TARGET_INFO_GPU") if n]
    if "gpuId" in schema.get("TARGET_INFO_CUDA_DEVICE", ()):  # names absent there, count only
        ids = [i for (i,) in db.execute("SELECT DISTINCT gpuId FROM TARGET_INFO_CUDA_DEVICE")]
        return [(i if isinstance(i, int) else None, "unknown", None) for i in ids]
    return []


def _copy_kind_names(db: sqlite3.Connection, schema: dict) -> dict[int, str]:
    if {"id", "name"} <= set(schema.get("ENUM_CUDA_MEMCPY_OPER", ())):
        return {i: n.removeprefix("CUDA_MEMCPY_KIND_") for i, n in db.execute("SELECT id, name FROM ENUM_CUDA_MEMCPY_OPER")}
    return dict(_COPY_KINDS)


def _parse_environment(text: str | None) -> dict[str, str]:
    """TARGET_INFO_SYSTEM_ENV 'DeviceEnvironment' is 'A=1;B=2;...' (nsys 2024+); a piece without '='
    continues the previous value (a value that itself contained ';')."""
    env: dict[str, str] = {}
    last = None
    for piece in (text or "").split(";"):
        name, eq, value = piece.partition("=")
        if eq and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            env[name], last = value, name
        elif last is not None and piece:
            env[last] += ";" + piece
    return env


def _env_evidence(environ: dict[str, str], rules: EnvRules | None = None) -> tuple[EnvVar, ...]:
    """Every captured variable (redacted: by name, by shape, and wherever a secret value recurs in another
    variable) plus the watched knobs that were unset."""
    if not environ:
        return ()
    rules = rules or load_env_rules()
    clean = redact(environ, rules=rules, known_values=secret_values_in(environ, rules=rules))
    out = [EnvVar(name=k, value=v, redacted=v != environ[k]) for k, v in clean.items()]
    out += [EnvVar(name=k, value=None, is_set=False) for k, v in env_overlay(environ, rules=rules).items() if v is None]
    return tuple(sorted(out, key=lambda e: e.name))


# --- large tables (DuckDB over the sqlite file) ---------------------------------------------------

def _make_views(con, path: Path, schema: dict, kernel_cols: list[str], nvtx_table: str | None,
                keep_raw: bool = True) -> str:
    """Fixed column names over the export's version-dependent ones: a temp view `_nvtx`, and the returned
    activity query (sql/_nsys_activity.sql behind `WITH _gpu AS (...)`). `_gpu` is a WITH clause, not a view:
    DuckDB binds a view once when it is created and again in each query, and each bind of an attached SQLite
    table costs about 0.4 s at 5M rows (measured). Identifiers come only from the fixed names in this module,
    checked against PRAGMA table_info.
    Graph replays (GRAPH_TRACE) are always in `_gpu`: whether they count is decided after the one scan
    (`_graph_mode`), from the kernels' in_graph column, so no probe scans the kernel table first."""
    parts = [_activity_select(KERNEL, kernel_cols, "kernel", keep_raw)]
    for table, kind in ((MEMCPY, "memcpy"), (MEMSET, "memset")):
        if table in schema:
            parts.append(_activity_select(table, _require(path, schema, table, _ACTIVITY_COLS,
                                                          ("globalPid", "globalTid")), kind, keep_raw))
    if GRAPH in schema and _has_activity_cols(schema[GRAPH]):
        parts.append(_activity_select(GRAPH, schema[GRAPH], "graph", keep_raw))
    gpu = " UNION ALL ".join(parts)
    if RUNTIME in schema:  # read by sql/_nsys_launches.sql
        _require(path, schema, RUNTIME, ("start", "correlationId", "globalTid"))
    if nvtx_table:
        cols = _require(path, schema, nvtx_table, ("start", "end", "eventType", "globalTid"), ("text", "textId"))
        text = {("text", "textId"): "coalesce(n.text, s.value)", ("text",): "n.text", ("textId",): "s.value"}[
            tuple(c for c in ("text", "textId") if c in cols)]
        join = "LEFT JOIN nsys.StringIds AS s ON s.id = n.textId" if "textId" in cols else ""
        domain = "n.domainId" if "domainId" in cols else "0"
        con.execute(f"CREATE TEMP VIEW _nvtx AS SELECT n.globalTid - (n.globalTid & {_PID_MASK}) AS pid_key, "
                    f'n.eventType AS event_type, n.start AS start_ns, n."end" AS end_ns, {domain} AS domain_id, '
                    f'{text} AS text FROM nsys."{nvtx_table}" AS n {join}')
    return f"WITH _gpu AS ({gpu})\n" + load_query("_nsys_activity")


def _has_activity_cols(cols: list[str]) -> bool:
    return set(_ACTIVITY_COLS) <= set(cols) and bool({"globalPid", "globalTid"} & set(cols))


def _graph_mode(path: Path, schema: dict, activity: "_Activity") -> str | None:
    """How CUDA graphs were traced: 'node' when any kernel ran inside a graph (its graph rows, if the export
    had both, are then left out: counted once), 'graph' when the export has GRAPH_TRACE, else None."""
    if activity.in_graph:
        return "node"
    if GRAPH in schema:
        _require(path, schema, GRAPH, _ACTIVITY_COLS, ("globalPid", "globalTid"))
        return "graph"
    return None


def _graph_note(activity: "_Activity", graph_trace: str) -> str:
    """What the anatomy can and cannot say about CUDA-graph work, by trace mode."""
    if graph_trace == "node":
        return (f"CUDA graphs traced per node (--cuda-graph-trace=node): {activity.in_graph} kernels ran inside graph "
                "replays and are categorised by name like any kernel")
    n, total_ms = activity.graph_rows, activity.graph_ns / 1e6
    return (f"CUDA graphs traced per graph (--cuda-graph-trace=graph, nsys's default): {n} replays ({total_ms:.1f} ms) "
            "are busy time of category cuda_graph; the kernels inside them are not in the export, so GEMM / attention "
            "/ communication detail inside graphs needs re-profiling with --cuda-graph-trace=node")


def _activity_select(table: str, cols: list[str], kind: str, keep_raw: bool) -> str:
    # Kernels carry globalPid since nsys 2021; older / other exports carry globalTid only.
    pid = "globalPid" if "globalPid" in cols else f"globalTid - (globalTid & {_PID_MASK})"
    name = "demangledName" if "demangledName" in cols else "shortName" if "shortName" in cols else "NULL"
    short = "shortName" if "shortName" in cols else name
    # The short name and the stream only go to the raw events: not read from SQLite without --keep-raw.
    short, stream = (short, "streamId") if keep_raw else ("NULL", "NULL::BIGINT")
    copy = "copyKind" if "copyKind" in cols else "NULL"
    in_graph = "graphNodeId IS NOT NULL" if kind == "kernel" and "graphNodeId" in cols else "false"
    return (f"SELECT {pid} AS pid_key, deviceId AS device_id, {stream} AS stream_id, correlationId AS corr_id, "
            f"start AS start_ns, \"end\" AS end_ns, {_KIND[kind]}::UTINYINT AS kind, "
            f"{name if kind == 'kernel' else 'NULL'}::BIGINT AS name_id, "
            f"{short if kind == 'kernel' else 'NULL'}::BIGINT AS short_id, "
            f"{copy if kind == 'memcpy' else 'NULL'}::BIGINT AS copy_kind, {in_graph} AS in_graph "
            f"FROM nsys.\"{table}\"")


def _batches(con, query: str):
    """The query's result as Arrow record batches of _BATCH_ROWS rows, at least one (an empty table of the
    result's columns when it has no rows). The query runs, and each next batch is read, in a thread while the
    caller works on the batch before: DuckDB releases the GIL while it scans, so on two cores the scan (most of
    the ingest) and the work on the batches overlap."""
    def scan():
        reader = con.execute(query).fetch_record_batch(_BATCH_ROWS)
        empty = True
        for batch in reader:
            empty = False
            yield batch
        if empty:
            yield reader.schema.empty_table()

    batches = scan()
    with ThreadPoolExecutor(max_workers=1) as ahead:
        pending = ahead.submit(next, batches, None)
        while (batch := pending.result()) is not None:
            pending = ahead.submit(next, batches, None)
            yield batch


Progress = Callable[[float], None]


class _RowsStreamed:
    """The fraction of the large tables' rows streamed so far, said to `progress` batch by batch: the scans of the
    runtime calls and the activities are nearly all of a large export's ingest."""

    def __init__(self, total: int, progress: Progress | None) -> None:
        self.total, self.done, self.progress = total, 0, progress

    def counted(self, batches: Iterator) -> Iterator:
        for batch in batches:
            yield batch
            self.done += batch.num_rows
            if self.progress is not None and self.total:
                self.progress(min(self.done / self.total, 1.0))


def _row_estimate(db: sqlite3.Connection, table: str) -> int:
    """A table's rows as its largest rowid says (an index lookup; nsys appends and never deletes); 0 if unread."""
    try:
        return int(db.execute(f'SELECT max(rowid) FROM "{table}"').fetchone()[0] or 0)
    except sqlite3.Error:
        return 0  # a damaged table is the scan's to name


_BATCH_ROWS = 1 << 17  # activities (or runtime calls) per streamed batch: what one batch's frames hold (two in
# flight); 2^19 held ~100 MiB more at the stream's peak (5M and 10M kernels), for no time saved
_KERNEL_KEYS = ("pid_key", "code", "name_id")  # a kernel's category is its name's
_NO_TIME = np.iinfo(np.int64).min  # a NULL start or end (a damaged export), as the interval arithmetic reads it


class _Activity:
    """The GPU activity as it streams in, kept as only what the anatomy reads: per process, graph replays apart
    (left out when graphs were traced per node), each activity's step code (-1: none; no steps: all -1, else only
    claimed activities are kept), category code, start and end; kernel calls and time per (process, step, name),
    summed batch by batch; the counts the warnings need; with keep_raw, the batches too. No frame keeps
    correlation ids, launch times, devices or names per activity.

    Those arrays are kept in bins by process, graph replay or not, and step group (consecutive step codes, about
    _GROUP_ACTIVITIES activities of the capture each; one group without steps), and the anatomy reads back one
    process's group at a time. With a spill folder (an export read by `receipts ingest`) the bins are files there,
    appended batch by batch: the stream then holds none of them, and the anatomy one group's. What is kept is
    numpy's own memory, copied out of each batch by a mask: a column kept from a batch would hold DuckDB's whole
    batch alive, and long-lived data in polars' allocator, between each batch's freed temporaries, left it holding
    several times that (measured: 590 MB of RSS for 142 MB of ids)."""

    def __init__(self, step_values: np.ndarray, names: dict[int, str], copy_cat: dict[int, str],
                 rules: CategoryRules, keep_raw: bool, *, has_steps: bool, group_codes: int,
                 spill: Path | None = None) -> None:
        self.step_values, self.names, self.copy_cat, self.rules = step_values, names, copy_cat, rules
        self.keep_raw, self.has_steps = keep_raw, has_steps
        self._group_codes = group_codes  # step codes per step group
        # (pid_key, graph replays, step group) -> step codes, category codes, starts, ends
        self._kept = ColumnBins("activity", _PART_DTYPES, spill)
        self._start_sample: dict[int | None, list[np.ndarray]] = {}  # without steps: every 64th start, per process
        self._odd_times = False  # an activity without a start (a damaged export)
        self.devices: list[pl.DataFrame] = []  # (pid_key, device_id, graph) triples of each batch
        self._sums: list[pl.DataFrame] = []  # kernel calls and time of some batches (kernel_sums)
        self.in_graph = 0  # kernels that ran inside a graph replay
        self.graph_rows = 0
        self.graph_ns = 0
        self._unclaimed = {False: 0, True: 0}  # activities no step claimed, by graph replay or not
        self.ended_early = 0  # activities that end before they start, or have no end: counted as zero length
        self._raw: list[pl.DataFrame] = []

    def add(self, batch, launches: Launches) -> None:
        """One streamed batch (an Arrow record batch of sql/_nsys_activity.sql); `launches` gives its steps."""
        activity, ended_early = _sane_times(cast(pl.DataFrame, pl.from_arrow(batch)))
        self.ended_early += ended_early
        rows_of = _rows_by_pid(activity["pid_key"])
        codes = self._codes(activity, rows_of, launches)
        replay = (activity["kind"] == _KIND["graph"]).to_numpy()
        self.in_graph += int(activity["in_graph"].sum())
        for is_graph in (False, True):
            self._unclaimed[is_graph] += int(np.count_nonzero((codes < 0) & (replay == is_graph)))
        activity = _categorise(activity, self.names, self.copy_cat, self.rules).with_columns(
            pl.Series("code", codes), pl.Series("graph", replay))
        if replay.any():
            replays = activity.filter(pl.col("graph"))
            self.graph_rows += replays.height
            self.graph_ns += int((replays["end_ns"] - replays["start_ns"]).sum() or 0)
        if self.keep_raw:
            self._raw.append(activity.select("pid_key", _steps(codes, self.step_values), "category", "kind", "graph",
                                             "name_id", "short_id", "stream_id", "start_ns", "end_ns"))
        lazy = activity.lazy()
        devices, sums = pl.collect_all([
            # Devices per process, the graph replays' apart (left out when graphs were traced per node).
            lazy.select("pid_key", "device_id", "graph").unique(),
            lazy.filter((pl.col("kind") == _KIND["kernel"]) & (pl.col("code") >= 0)).group_by(_KERNEL_KEYS).agg(
                pl.len().cast(pl.Int64).alias("calls"), (pl.col("end_ns") - pl.col("start_ns")).sum().alias("ns"))])
        self.devices.append(devices)
        self._sums.append(sums)
        if len(self._sums) == 8:  # what was summed so far and the last batches' sums, summed
            self._sums = [self.kernel_sums()]
        self._keep(activity, rows_of, codes, replay)

    def _keep(self, activity: pl.DataFrame, rows_of: dict[int | None, np.ndarray], codes: np.ndarray,
              replay: np.ndarray) -> None:
        """A batch's kept arrays into their bins: by process, graph replay or not, and step group."""
        columns = (codes, activity["category"].to_physical().to_numpy(),
                   activity["start_ns"].fill_null(_NO_TIME).to_numpy(), activity["end_ns"].fill_null(_NO_TIME).to_numpy())
        by_graph = {False: ~replay, True: replay} if replay.any() else {False: None}
        if not self.has_steps:  # only a window without steps is cut by time
            self._odd_times = self._odd_times or bool((columns[2] == _NO_TIME).any())
        group = np.maximum(codes, 0) // self._group_codes  # no step (-1): group 0
        lo, hi = (int(group.min()), int(group.max())) if group.size else (0, 0)
        by_group = {lo: None} if lo == hi else {lo + int(g): group == lo + g
                                                 for g in np.flatnonzero(np.bincount(group - lo))}
        for pid, rows in rows_of.items():
            if self.has_steps:
                rows = rows & (codes >= 0)
            for (is_graph, of_kind), (g, in_group) in itertools.product(by_graph.items(), by_group.items()):
                kept = rows if of_kind is None else rows & of_kind
                kept = kept if in_group is None else kept & in_group
                if kept.any():
                    rows_kept = [column[kept] for column in columns]
                    self._kept.add((pid, is_graph, g), rows_kept)
                    if not self.has_steps:  # a copy: a view would hold the batch's starts
                        self._start_sample.setdefault(pid, []).append(rows_kept[2][::_SAMPLE_EVERY].copy())

    def _codes(self, activity: pl.DataFrame, rows_of: dict[int | None, np.ndarray], launches: Launches) -> np.ndarray:
        """Step code per activity (-1: no step range claimed it), through its launching call's correlation id."""
        codes = np.full(activity.height, -1, np.int32)
        if self.has_steps:
            known = activity["corr_id"].is_not_null().to_numpy()
            corr = activity["corr_id"].fill_null(0).to_numpy()
            for pid, rows in rows_of.items():
                if pid is not None:
                    mine = np.flatnonzero(rows & known)
                    codes[mine] = launches.codes(pid, corr[mine])
        return codes

    def kernel_sums(self) -> pl.DataFrame:
        """Kernel calls and time (ns) per (pid_key, step code, name id), over the batches so far."""
        return pl.concat(self._sums).group_by(_KERNEL_KEYS).agg(pl.col("calls", "ns").sum())

    def unclaimed(self, with_graphs: bool) -> int:
        return self._unclaimed[False] + (self._unclaimed[True] if with_graphs else 0)

    def pids(self) -> list[int | None]:
        return list(dict.fromkeys(pid for pid, _, _ in self._kept.keys()))

    def groups(self, pid: int | None) -> list[int]:
        """A process's step groups, in step order."""
        return sorted({g for p, _, g in self._kept.keys() if p == pid})

    def take(self, pid: int | None, group: int, with_graphs: bool
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(step code, category code, start, end) of the kept activities of a process's step group, given up by
        the store (graph replays read only if they count)."""
        if not with_graphs:
            self._kept.drop((pid, True, group))
        code, category, start, end = _joined([self._kept.take((pid, is_graph, group)) for is_graph in (False, True)])
        return code, category, start, end

    def window(self, pid: int | None, with_graphs: bool) -> Iterator[tuple[tuple[np.ndarray, ...], int | None]]:
        """Without steps, a process's kept activities (its one window), given up, in bins of consecutive ranges
        of start times of about _GROUP_ACTIVITIES activities each (the ranges from a sample of the starts): each
        bin's (step code, category code, start, end) and the start of the next bin's range (None for the last).
        One bin when an activity has no start: how such an interval (its end before its start, as the interval
        arithmetic reads a NULL) counts depends on the intervals it merges with (intervals.sorted_step_ns), so only
        the whole window gives the whole window's numbers."""
        if not with_graphs:
            self._kept.drop((pid, True, 0))
        keys = [(pid, False, 0), (pid, True, 0)][:2 if with_graphs else 1]
        sample = self._start_sample.pop(pid, [])
        bounds = quantile_bounds([] if self._odd_times else sample, sum(self._kept.rows(k) for k in keys),
                                 _GROUP_ACTIVITIES)
        binned = [self._kept.partitioned(key, 2, bounds, "window", _GROUP_ACTIVITIES) for key in keys]
        for i in range(bounds.size + 1):
            yield _joined([b.take(i) for b in binned]), int(bounds[i]) if i < bounds.size else None

    def drop(self, pid: int | None) -> None:
        """A process's kept activities given up unread (a process that ran no ranked GPU work)."""
        for key in [k for k in self._kept.keys() if k[0] == pid]:
            self._kept.drop(key)

    def raw_frame(self, with_graphs: bool, rank_of: dict) -> pl.DataFrame:
        raw = pl.concat(self._raw)
        return (raw if with_graphs else raw.filter(~pl.col("graph"))).with_columns(
            pl.col("pid_key").replace_strict(rank_of, default=None, return_dtype=pl.Int32).alias("rank"))


def _joined(parts: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    """The columns of parts of rows (graph replays and the rest) as one; a single part with rows is used as it is:
    joining it would copy it."""
    full = [p for p in parts if p[0].size] or parts[:1]
    return tuple(p[0] if len(full) == 1 else np.concatenate(p) for p in zip(*full))


_FAR = 1 << 62  # ns (146 years) from the capture's start: a time this far is damage, and sums of such overflow
_TABLE_OF_KIND = {_KIND["kernel"]: KERNEL, _KIND["memcpy"]: MEMCPY, _KIND["memset"]: MEMSET, _KIND["graph"]: GRAPH}


class _TimesOutOfRange(Exception):
    def __init__(self, table: str, rows: int) -> None:
        super().__init__(table, rows)
        self.table, self.rows = table, rows


def _sane_times(activity: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """A batch of activities with each end that comes before its start, or is missing, set to its start (zero
    length: an interval that ends before it starts would subtract from a union), and how many; a start or end
    _FAR or more from the capture's start raises _TimesOutOfRange, naming the table of the first such row."""
    start, end = pl.col("start_ns"), pl.col("end_ns")
    far = activity.filter((start >= _FAR) | (start <= -_FAR) | (end >= _FAR) | (end <= -_FAR))
    if far.height:
        raise _TimesOutOfRange(_TABLE_OF_KIND.get(far["kind"][0], KERNEL), far.height)
    early = ((end < start) | (end.is_null() & start.is_not_null())).fill_null(False)
    ended_early = int(activity.select(early.sum()).item())
    if ended_early:
        activity = activity.with_columns(pl.when(early).then(start).otherwise(end).alias("end_ns"))
    return activity, ended_early


_spilled = itertools.count()  # names the events' files apart, in a scratch folder parses may share
_PART_DTYPES = (np.int32, np.uint8, np.int64, np.int64)  # what _Activity keeps of each activity: step code,
# category code, start, end
_GROUP_ACTIVITIES = 1 << 20  # activities of the whole capture per step group, as the tables' row counts estimate
# (without steps: of a process per bin of start times)
_SAMPLE_EVERY = 64  # without steps, one start in 64 sets the bins' time ranges


def _group_codes(steps: int, activities: int) -> int:
    """Step codes per step group: the capture's `steps` in groups of about _GROUP_ACTIVITIES of its `activities`
    (at least one step a group: a step's activity is read back whole)."""
    groups = -(-activities // _GROUP_ACTIVITIES)
    return max(1, -(-steps // max(groups, 1)))


def _rows_by_pid(pid_key: pl.Series) -> dict[int | None, np.ndarray]:
    """The rows of each process (None: rows without one) of a batch, as masks."""
    pid = pid_key.fill_null(0).to_numpy()
    missing = pid_key.is_null().to_numpy()
    return {p: missing if p is None else (pid == p) & ~missing for p in pid_key.unique().to_list()}


def _steps(codes: np.ndarray, step_values: np.ndarray) -> pl.Series:
    """The step number of each step code (null for -1)."""
    if not step_values.size:
        return pl.repeat(None, codes.size, dtype=pl.Int64, eager=True).alias("step")
    numbers = pl.Series("step", step_values[np.maximum(codes, 0)], dtype=pl.Int64)
    return numbers if not (codes < 0).any() else pl.select(pl.when(pl.Series(codes >= 0)).then(numbers)).to_series()


_CATEGORY = CATEGORY_ENUM  # one Enum for all batches: a small integer per activity


def _categorise(activity: pl.DataFrame, names: dict[int, str], copy_cat: dict[int, str],
                rules: CategoryRules) -> pl.DataFrame:
    """Category per activity: kernels by name (kernel_categories.toml, Python re, once per distinct name),
    memcpy by direction, memset, cuda_graph for a graph replay. An Enum (a small integer per activity) until
    a chunk or an output needs the text."""
    kind = pl.col("kind")
    kernel_ids = activity.filter(kind == _KIND["kernel"])["name_id"].drop_nulls().unique().to_list()
    kernel_cat = {i: rules.classify(names.get(i, "")) for i in kernel_ids}
    return activity.with_columns(
        pl.when(kind == _KIND["kernel"])
        .then(pl.col("name_id").replace_strict(kernel_cat, default="other", return_dtype=_CATEGORY))
        .when(kind == _KIND["memset"]).then(pl.lit("memset", dtype=_CATEGORY))
        .when(kind == _KIND["graph"]).then(pl.lit("cuda_graph", dtype=_CATEGORY))
        .otherwise(pl.col("copy_kind").replace_strict(copy_cat, default="other", return_dtype=_CATEGORY))
        .fill_null(pl.lit("other", dtype=_CATEGORY))
        .alias("category"))


def _ranges_by_pid(step_ranges: pl.DataFrame) -> tuple[np.ndarray, dict[int, StepRanges]]:
    """(the distinct step numbers, sorted; per process, its step ranges sorted by start, each with the code of
    its step: the step number's index among them)."""
    step_values = np.unique(step_ranges["step"].to_numpy())
    return step_values, {
        pid: StepRanges(r["range_start_ns"].to_numpy(), r["range_end_ns"].to_numpy(),
                        np.searchsorted(step_values, r["step"].to_numpy()).astype(np.int32))
        for (pid,), r in step_ranges.sort("pid_key", "range_start_ns").group_by("pid_key", maintain_order=True)}


def _empty_ranges() -> pl.DataFrame:
    return pl.DataFrame(schema={"pid_key": pl.Int64, "text": pl.Utf8, "range_name": pl.Utf8, "start_ns": pl.Int64,
                                "end_ns": pl.Int64, "duration_ns": pl.Int64})


def _step_numbers(texts: list[str], pattern: str, path: Path) -> dict[str, int]:
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise InputError(path, f"step pattern {pattern!r} is not a valid regex ({exc})") from exc
    if compiled.groups < 1:
        raise InputError(path, f"step pattern {pattern!r} needs one capture group holding the step number")
    out = {}
    for text in texts:
        m = compiled.search(text or "")
        if m and m.group(1) is not None and re.fullmatch(r"[0-9]{1,18}", m.group(1)):
            out[text] = int(m.group(1))
    return out


def _mpi_thread_ranks(con) -> dict[int, int]:
    # nsys --trace=mpi names the rank's thread 'MPI Rank N' (an NVTX thread-name event, 2022.2).
    found = con.sql("SELECT DISTINCT pid_key, text FROM _nvtx WHERE event_type NOT IN (59, 60, 70, 71, 75) "
                    "AND regexp_matches(text, '^MPI Rank [0-9]+$')").fetchall()
    return {pid: int(text.rsplit(" ", 1)[1]) for pid, text in found}


def _ranks(devices: pl.DataFrame, environ: dict[str, str],
           thread_ranks: dict[int, int]) -> tuple[dict[int, int], str, int | None, bool]:
    """(rank per pid_key, how ranks were found, world size, whether the file itself stated the ranks);
    `devices`: the (pid_key, device_id) pairs that ran."""
    procs = (devices.group_by("pid_key").agg(pl.col("device_id").min())
             .with_columns(((pl.col("pid_key") // (1 << 24)) % (1 << 24)).alias("pid")).sort("device_id", "pid"))
    pids = procs["pid_key"].to_list()
    env_rank = next((k for k in _RANK_ENV if re.fullmatch(r"[0-9]{1,9}", environ.get(k, ""))), None)
    world_env = next((int(environ[k]) for k in _WORLD_ENV if re.fullmatch(r"[0-9]{1,9}", environ.get(k, ""))), None)
    if len(pids) == 1 and env_rank:
        return ({pids[0]: int(environ[env_rank])}, f"rank from {env_rank} in the captured environment "
                "(one GPU process in this file)", world_env, True)
    if pids and all(p in thread_ranks for p in pids) and len({thread_ranks[p] for p in pids}) == len(pids):
        return ({p: thread_ranks[p] for p in pids}, "rank from the NVTX thread name 'MPI Rank N'", world_env, True)
    return ({p: i for i, p in enumerate(pids)}, "rank = order of the processes that launched GPU work by "
            "(lowest deviceId, pid); no per-process RANK was visible", world_env or len(pids) or None, False)


# --- frames ------------------------------------------------------------------------------

def _anatomy(activity: _Activity, with_graphs: bool, step_ranges: pl.DataFrame, rank_of: dict, has_steps: bool,
             names: dict[int, str], spill: Path | None = None
             ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame | pl.LazyFrame]:
    """(rows, steps, kernel_steps, events) from the kept activity of ranked processes. Each step group of each
    process (_Activity) is sorted once by (step, start); every number is per (rank, step), so the interval arithmetic
    runs over chunks of whole steps of those sorted arrays (its intermediates follow the chunk, not the capture),
    giving integers per step that intervals.anatomy_from_ns turns into milliseconds for all steps at once."""
    categories = pl.Series(_CATEGORY.categories, dtype=_CATEGORY)
    per_step: list[pl.DataFrame] = []
    per_category: list[pl.DataFrame] = []
    events: list[pl.DataFrame] = []
    spilled: list[Path] = []
    trim_c_heap()  # what the stream freed
    for pid in activity.pids():
        rank = rank_of.get(pid)
        if rank is None:
            activity.drop(pid)  # not ranked
            continue
        pieces = (((activity.take(pid, group, with_graphs), None, None) for group in activity.groups(pid))
                  if has_steps else _window_pieces(activity.window(pid, with_graphs)))
        for columns, counted, until in pieces:
            step_parts, category_parts, made = _piece_anatomy(columns, counted, until, rank, activity.step_values,
                                                              categories, spill)
            del columns
            per_step += step_parts
            per_category += category_parts
            if isinstance(made, pl.DataFrame):
                events.append(made)
            else:
                spilled += made
            trim_c_heap()
    if not per_step:  # no ranked activity: the frames' columns, no rows
        none = np.zeros(0, np.int64)
        per_step, per_category = ([_ranked(frame, 0, activity.step_values)] for frame in sorted_step_ns(
            none.astype(np.int32), none.astype(np.uint8), none, none, categories))
    # One chunk each, as one frame computed for the whole capture would be: polars divides a chunk of one value
    # exactly and a longer one through the reciprocal (1 ulp apart).
    totals, by_category = pl.concat(per_step, rechunk=True), pl.concat(per_category, rechunk=True)
    if not has_steps:
        totals, by_category = _added_up(totals, by_category)
    rows, step_rows = anatomy_from_ns(by_category, totals)
    if has_steps:
        markers = (step_ranges.with_columns(pl.col("pid_key").replace_strict(rank_of, default=None,
                                                                             return_dtype=pl.Int32).alias("rank"))
                   .filter(pl.col("rank").is_not_null())
                   .group_by("rank", "step").agg(pl.col("range_start_ns").min().alias("start_ns"),
                                                 ((pl.col("range_end_ns") - pl.col("range_start_ns")).max() / 1e6)
                                                 .alias("wall_ms")))
    else:
        markers = totals.select("rank", "step", pl.col("span_start_ns").alias("start_ns"),
                                ((pl.col("span_end_ns") - pl.col("span_start_ns")) / 1e6).alias("wall_ms"))
    markers = markers.with_columns(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int64))
    steps = (markers.join(step_rows, on=["rank", "step"], how="left", nulls_equal=True)
             .with_columns(pl.col("gpu_ms", "comm_ms").fill_null(0.0), pl.col("kernels").fill_null(0),
                           (pl.lit(has_steps) & (pl.col("step") == pl.col("step").min().over("rank"))).alias("warmup")))
    warm = steps.select("rank", "step", "warmup")
    rows = rows.join(warm, on=["rank", "step"], how="left", nulls_equal=True).with_columns(pl.col("warmup").fill_null(False))
    return (rows.select([pl.col(c).cast(t) for c, t in ANATOMY_ROW_SCHEMA.items()]).sort("rank", "step", "category"),
            steps.select([pl.col(c).cast(t) for c, t in ANATOMY_STEP_SCHEMA.items()]).sort("rank", "step"),
            _kernel_steps(activity, rank_of, names),
            pl.scan_parquet(spilled) if spilled else pl.concat(events) if events else _NO_EVENTS)


_NO_EVENTS = pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int64, "category": _CATEGORY, "start_ns": pl.Int64,
                                  "end_ns": pl.Int64})


def _window_pieces(bins: Iterator[tuple[tuple[np.ndarray, ...], int | None]]
                   ) -> Iterator[tuple[tuple[np.ndarray, ...], np.ndarray | None, int | None]]:
    """A window's bins of start times (_Activity.window) as pieces of disjoint time whose integers add up:
    (columns, counted, until). Each activity running past its bin's end (`until`) counts up to there, and from
    there on as a continuation carried into the next bin, which counts in the unions but is no activity of its
    own (`counted`: the mask of the rows that are; None: every row)."""
    carry: tuple[np.ndarray, ...] | None = None
    for columns, bin_end in bins:
        counted = None
        if carry is not None:
            counted = np.r_[np.zeros(carry[0].size, bool), np.ones(columns[0].size, bool)]
            columns = tuple(np.concatenate(pair) for pair in zip(carry, columns))
            carry = None
        code, cat, start, end = columns
        if bin_end is not None and (over := end > bin_end).any():
            carry = (code[over], cat[over], np.full(int(np.count_nonzero(over)), bin_end, np.int64), end[over])
        yield columns, counted, bin_end


def _added_up(totals: pl.DataFrame, by_category: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The integers of a window's pieces (_window_pieces) as one row per (rank, step) and (rank, step, category):
    each piece is a disjoint stretch of time, so every union and overlap adds up, and the span is the widest."""
    return (totals.group_by("rank", "step", maintain_order=True)
            .agg(pl.col("span_start_ns").min(), pl.col("span_end_ns").max(), pl.col(*STEP_NS).sum()).rechunk(),
            by_category.group_by("rank", "step", "category", maintain_order=True).agg(pl.col("union_ns").sum())
            .rechunk())


def _piece_anatomy(columns: tuple[np.ndarray, ...], counted: np.ndarray | None, until: int | None, rank: int,
                   step_values: np.ndarray, categories: pl.Series, spill: Path | None = None
                   ) -> tuple[list[pl.DataFrame], list[pl.DataFrame], pl.DataFrame | list[Path]]:
    """One piece of one process's kept activity (a step group, or a bin of a window without steps, _window_pieces:
    `counted` the rows that are activities, not continuations, None: all; `until` where its time ends, the
    intervals counted up to there, None: no end): its integers per step and per (step, category)
    (sorted_step_ns, by chunk) and its events: a frame, or with `spill` the Parquet files they were written to, a
    file per chunk as it is made (a frame of a whole process's events, 29 B an activity, was the anatomy's peak).
    The caller gives the arrays up, so that the unsorted ones go as the sorted ones come."""
    code, cat, start, end = columns
    order = sort_order(code, start, stable=False)
    # One array at a time, each copy replacing its original.
    code = code[order]
    cat = cat[order]
    start = start[order]
    end = end[order]
    if counted is not None:
        counted = counted[order]
    del order

    def one(rows: slice) -> tuple[pl.DataFrame, pl.DataFrame]:
        return sorted_step_ns(code[rows], cat[rows], start[rows],
                              end[rows] if until is None else np.minimum(end[rows], until), categories,
                              counted=None if counted is None else counted[rows])

    def events(rows: slice) -> pl.DataFrame:
        # start and end are the sorted arrays themselves (no copy): only rank, step and the category are new, the
        # category an Enum (1 B an activity where a string took 16: 95 MB at 5M kernels).
        kept: slice | np.ndarray = rows
        n = rows.stop - rows.start
        if counted is not None:  # continuations left out
            picked = np.flatnonzero(counted[rows]) + rows.start
            kept, n = picked, picked.size
        return pl.DataFrame([pl.Series("rank", np.full(n, rank, np.int32)),
                             _steps(code[kept], step_values), categories.gather(cat[kept]),
                             pl.Series("start_ns", start[kept]), pl.Series("end_ns", end[kept])])

    chunks = _step_chunks(code)
    # Chunks are independent and numpy releases the GIL: _CHUNK_WORKERS at a time.
    with ThreadPoolExecutor(max_workers=_CHUNK_WORKERS) as pool:
        done = list(pool.map(one, chunks))
    made: pl.DataFrame | list[Path]
    if spill is None:
        made = events(slice(0, code.size))
    else:
        made = []
        for rows in chunks:
            made.append(spill / f"events-{next(_spilled)}.parquet")
            events(rows).write_parquet(made[-1], compression="uncompressed", statistics=False)
    return ([_ranked(step_ns, rank, step_values) for step_ns, _ in done],
            [_ranked(category_ns, rank, step_values) for _, category_ns in done], made)


def _ranked(frame: pl.DataFrame, rank: int, step_values: np.ndarray) -> pl.DataFrame:
    """A per-step frame of one process keyed by step code -> keyed by (rank, step)."""
    return frame.select(pl.lit(rank, dtype=pl.Int32).alias("rank"), _steps(frame["key"].to_numpy(), step_values),
                        pl.exclude("key"))


def _kernel_steps(activity: _Activity, rank_of: dict, names: dict[int, str]) -> pl.DataFrame:
    """Kernel calls and time per (rank, step, category, name), from the sums the stream kept per name id. Name and
    category are Categorical: a row per step and kernel name is the one output that grows with a capture's steps,
    and a demangled name is hundreds of bytes (19 MB of text at 2,788 steps of the 5M-kernel benchmark)."""
    sums = activity.kernel_sums()
    ids = sorted(sums["name_id"].drop_nulls().unique().to_list())
    # As _categorise: by name; a name id without a name is '(unnamed)' in category 'other', as is no name id.
    label = pl.Series("name", [names.get(i, "(unnamed)") for i in ids] + ["(unnamed)"], dtype=pl.Categorical)
    category = pl.Series("category", [activity.rules.classify(names.get(i, "")) for i in ids] + ["other"],
                         dtype=pl.Categorical)
    at = sums["name_id"].replace_strict(dict(zip(ids, range(len(ids)))), default=len(ids), return_dtype=pl.UInt32)
    at = at.fill_null(len(ids))
    return (sums.select(pl.col("pid_key").replace_strict(rank_of, default=None, return_dtype=pl.Int32).alias("rank"),
                        _steps(sums["code"].to_numpy(), activity.step_values), category.gather(at), label.gather(at),
                        "calls", "ns")
            .filter(pl.col("rank").is_not_null())
            .group_by("rank", "step", "category", "name")
            .agg(pl.col("calls").sum(), (pl.col("ns").sum() / 1e6).alias("time_ms")))


_CHUNK_EVENTS = 1 << 18  # activities per interval-arithmetic chunk (whole steps of one process)
_CHUNK_WORKERS = min(2, os.cpu_count() or 1)  # chunks in flight: each holds its intermediates (~25 MB)


def _step_chunks(code: np.ndarray) -> list[slice]:
    """Rows of `code` (sorted) cut between steps, about _CHUNK_EVENTS each: a chunk ends with the step in which a
    multiple of _CHUNK_EVENTS falls."""
    ends = np.r_[np.flatnonzero(code[1:] != code[:-1]) + 1, code.size]
    cuts = ends[np.searchsorted(ends, np.arange(_CHUNK_EVENTS, code.size, _CHUNK_EVENTS), side="left")]
    bounds = [0, *sorted(set(cuts.tolist()) | {code.size})]
    return [slice(lo, hi) for lo, hi in zip(bounds, bounds[1:])]


def _nvtx_frame(ranges: pl.DataFrame, rank_of: dict) -> pl.DataFrame:
    """Per rank (null: a process that launched no GPU work) and range name, like nvtx_sum per process."""
    return (ranges.with_columns(pl.col("pid_key").replace_strict(rank_of, default=None, return_dtype=pl.Int32).alias("rank"))
            .group_by("rank", "range_name")
            .agg(pl.len().cast(pl.Int64).alias("count"), (pl.col("duration_ns").sum() / 1e6).alias("total_ms"))
            .with_columns(pl.lit(None, dtype=pl.Float64).alias("gpu_ms"))
            .select([pl.col(c).cast(t) for c, t in ANATOMY_NVTX_SCHEMA.items()])
            .sort("rank", "range_name", nulls_last=True))
