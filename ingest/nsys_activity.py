"""The large tables of an Nsight Systems export read in one pass: NVTX step ranges, runtime calls and GPU activity,
each activity given its step and category as it streams in and kept as only what the anatomy reads (`Activity`).

Reading: the large tables (kernels, memcpy, memset, runtime calls, NVTX) are scanned by DuckDB's sqlite extension
(loaded from the duckdb-ext wheel, no download), reading only the named columns, and streamed out as Arrow record
batches: first the runtime calls, kept per process as the sorted correlation ids that a step range claims
(ingest/correlation.py), then the GPU activity, each batch given its step (a binary search of its correlation id)
and its category as it arrives. No join or GROUP BY runs in DuckDB and no frame holds correlation ids or launch
times for the whole capture. DuckDB's own hash aggregate and join, spilling under a memory_limit, were measured
against this side by side on the 5M-kernel export of benchmarks/bench_nsys_ingest.py and missed both its aims (3x
the bare scan, 400 MiB): its RSS runs far past its limit while it spills. Fetching millions of rows through sqlite3
builds a Python object per value instead.

Definitions (the receipt says them too, in Anatomy.attribution and .step_marker):
- step: an NVTX range whose text matches the step pattern. Its GPU work is every kernel / memcpy / memset whose
  launching runtime call (same correlationId and process) started on ANY thread of that process while the range
  was open: [range start, range end).
- CUDA graphs: with `nsys --cuda-graph-trace=graph` (the default) a replay is ONE row of
  CUPTI_ACTIVITY_KIND_GRAPH_TRACE and its kernels are not rows of the kernel table: each replay is counted as busy
  time of category `cuda_graph`, attributed through its cudaGraphLaunch call like any launch. With
  `--cuda-graph-trace=node` the kernels inside graphs are ordinary kernel rows (graphNodeId set) and categorised by
  name; graph rows, if an export had both, are then left out (counted once).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import duckdb
import numpy as np
import polars as pl

from receipts import duck
from receipts.errors import InputError
from receipts.ingest.column_bins import ColumnBins, quantile_bounds
from receipts.ingest.correlation import Launches, StepRanges
from receipts.ingest.launch_shape import SHAPE_COLUMNS
from receipts.ingest.nsys_schema import (ACTIVITY_COLS, GRAPH, KERNEL, MEMCPY, MEMSET, RUNTIME, ExportFacts,
                                         damaged_table, first_line, has_activity_cols, require)
from receipts.schema.categories import CategoryRules
from receipts.sql import load_query

_PID_MASK = 0xFFFFFF  # globalTid = (hw << 48) | (pid << 24) | tid; globalPid has tid = 0
KIND = {"kernel": 0, "memcpy": 1, "memset": 2, "graph": 3}  # activity kind codes (UTINYINT)
_COPY_CATEGORY = {"HTOD": "memcpy_h2d", "HTOA": "memcpy_h2d", "UVM_HTOD": "memcpy_h2d",
                  "DTOH": "memcpy_d2h", "ATOH": "memcpy_d2h", "UVM_DTOH": "memcpy_d2h",
                  "DTOD": "memcpy_d2d", "ATOD": "memcpy_d2d", "DTOA": "memcpy_d2d", "ATOA": "memcpy_d2d",
                  "UVM_DTOD": "memcpy_d2d", "PTOP": "memcpy_p2p"}

Progress = Callable[[float], None]


@dataclass(frozen=True)
class ActivityRead:
    """What the one pass over the large tables gives the anatomy."""
    ranges: pl.DataFrame  # every NVTX range (sql/_nsys_ranges.sql)
    step_ranges: pl.DataFrame  # the step ranges: pid_key, step, range_start_ns, range_end_ns
    activity: Activity
    with_graphs: bool  # whether graph replays count (not when their kernels are rows of their own)
    devices: pl.DataFrame  # (pid_key, device_id) of the activity that counts
    thread_ranks: dict[int, int]  # the rank an NVTX thread name 'MPI Rank N' gives a process
    warnings: tuple[str, ...]


def read_activity(path: Path, facts: ExportFacts, *, rules: CategoryRules, step_pattern: str, keep_raw: bool,
                  progress: Progress | None = None, spill: Path | None = None, shapes: bool = True) -> ActivityRead:
    """The step ranges, then the runtime calls, then the GPU activity, streamed out of DuckDB. `progress`: called
    with the fraction of the large tables' rows streamed so far. `spill`: a directory (the caller's) where the
    runtime calls and the kept activity wait as they stream in; else they are held in memory. `shapes`: read the
    kernels' launch shapes (gridX..blockZ); a value there that is no integer raises ShapesUnreadable, and the
    caller reads the export again without them."""
    schema, nvtx_table = facts.schema, facts.nvtx_table
    streamed = _RowsStreamed(sum(facts.estimate.values()), progress)
    con = duck.connect(extensions=("sqlite_scanner",))
    try:
        # ATTACH takes no bound parameters: the path is a quoted literal.
        con.execute(f"ATTACH '{str(path.resolve()).replace(chr(39), chr(39) * 2)}' AS nsys (TYPE sqlite, READ_ONLY)")
        activity_query = _make_views(con, path, schema, facts.kernel_cols, nvtx_table, keep_raw, shapes)
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
        copy_cat = {k: _COPY_CATEGORY.get(n, "other") for k, n in facts.copy_names.items()}
        activities = sum(n for t, n in facts.estimate.items() if t != RUNTIME)
        activity = Activity(step_values, facts.names, copy_cat, rules, keep_raw, has_steps=step_ranges.height > 0,
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
        if shapes and (column := _shape_column(exc)) is not None:
            raise ShapesUnreadable(column, first_line(exc)) from exc
        bad_table, what = damaged_table(path, schema, nvtx_table)
        raise InputError(path, f"cannot read the export: {what or first_line(exc)}; the file may be cut short or "
                               "corrupt", table=bad_table) from exc
    finally:
        con.close()
    warnings = []
    graph_trace = _graph_mode(path, schema, activity)
    if graph_trace is not None:
        warnings.append(_graph_note(activity, graph_trace))
    with_graphs = graph_trace != "node"  # graph replays count unless their kernels are rows of their own
    devices = pl.concat(activity.devices)
    if not with_graphs:
        devices = devices.filter(~pl.col("graph"))
    if damaged := int(ranges["damaged"].sum()):
        warnings.append(f"{damaged} NVTX ranges end before they start or have a start or end {_FAR:,} ns or more from "
                        "the capture's start (a damaged export: nsys writes neither): each counted as zero length")
    if activity.ended_early:
        warnings.append(f"{activity.ended_early} GPU activities end before they start or have no end (a damaged "
                        "export: nsys writes neither): each counted as zero length")
    if repeated:
        warnings.append(f"{repeated} (process, correlationId) pairs of {RUNTIME} repeat: each GPU "
                        "activity is attributed through the earliest runtime call with its correlation id")
    return ActivityRead(ranges=ranges, step_ranges=step_ranges, activity=activity, with_graphs=with_graphs,
                        devices=devices, thread_ranks=thread_ranks, warnings=tuple(warnings))


def _make_views(con, path: Path, schema: dict, kernel_cols: list[str], nvtx_table: str | None,
                keep_raw: bool = True, shapes: bool = True) -> str:
    """Fixed column names over the export's version-dependent ones: a temp view `_nvtx`, and the returned
    activity query (sql/_nsys_activity.sql behind `WITH _gpu AS (...)`). `_gpu` is a WITH clause, not a view:
    DuckDB binds a view once when it is created and again in each query, and each bind of an attached SQLite
    table costs about 0.4 s at 5M rows (measured). Identifiers come only from the fixed names in this module,
    checked against PRAGMA table_info.
    Graph replays (GRAPH_TRACE) are always in `_gpu`: whether they count is decided after the one scan
    (`_graph_mode`), from the kernels' in_graph column, so no probe scans the kernel table first."""
    parts = [_activity_select(KERNEL, kernel_cols, "kernel", keep_raw, shapes)]
    for table, kind in ((MEMCPY, "memcpy"), (MEMSET, "memset")):
        if table in schema:
            parts.append(_activity_select(table, require(path, schema, table, ACTIVITY_COLS,
                                                          ("globalPid", "globalTid")), kind, keep_raw))
    if GRAPH in schema and has_activity_cols(schema[GRAPH]):
        parts.append(_activity_select(GRAPH, schema[GRAPH], "graph", keep_raw))
    gpu = " UNION ALL ".join(parts)
    if RUNTIME in schema:  # read by sql/_nsys_launches.sql
        require(path, schema, RUNTIME, ("start", "correlationId", "globalTid"))
    if nvtx_table:
        cols = require(path, schema, nvtx_table, ("start", "end", "eventType", "globalTid"), ("text", "textId"))
        text = {("text", "textId"): "coalesce(n.text, s.value)", ("text",): "n.text", ("textId",): "s.value"}[
            tuple(c for c in ("text", "textId") if c in cols)]
        # Text that is no UTF-8 (a damaged page; Latin-1 from a Windows host) kept with its odd bytes escaped
        # ('\xAB'): DuckDB passes it on unchecked, and polars fails on it.
        text = f"coalesce(try(decode(encode({text}))), encode({text})::VARCHAR)"
        join = "LEFT JOIN nsys.StringIds AS s ON s.id = n.textId" if "textId" in cols else ""
        domain = "n.domainId" if "domainId" in cols else "0"
        con.execute(f"CREATE TEMP VIEW _nvtx AS SELECT n.globalTid - (n.globalTid & {_PID_MASK}) AS pid_key, "
                    f'n.eventType AS event_type, n.start AS start_ns, n."end" AS end_ns, {domain} AS domain_id, '
                    f'{text} AS text FROM nsys."{nvtx_table}" AS n {join}')
    return f"WITH _gpu AS ({gpu})\n" + load_query("_nsys_activity")


def _graph_mode(path: Path, schema: dict, activity: Activity) -> str | None:
    """How CUDA graphs were traced: 'node' when any kernel ran inside a graph (its graph rows, if the export
    had both, are then left out: counted once), 'graph' when the export has GRAPH_TRACE, else None."""
    if activity.in_graph:
        return "node"
    if GRAPH in schema:
        require(path, schema, GRAPH, ACTIVITY_COLS, ("globalPid", "globalTid"))
        return "graph"
    return None


def _graph_note(activity: Activity, graph_trace: str) -> str:
    """What the anatomy can and cannot say about CUDA-graph work, by trace mode."""
    if graph_trace == "node":
        return (f"CUDA graphs traced per node (--cuda-graph-trace=node): {activity.in_graph} kernels ran inside graph "
                "replays and are categorised by name like any kernel")
    n, total_ms = activity.graph_rows, activity.graph_ns / 1e6
    return (f"CUDA graphs traced per graph (--cuda-graph-trace=graph, nsys's default): {n} replays ({total_ms:.1f} ms) "
            "are busy time of category cuda_graph; the kernels inside them are not in the export, so GEMM / attention "
            "/ communication detail inside graphs needs re-profiling with --cuda-graph-trace=node")


def _activity_select(table: str, cols: list[str], kind: str, keep_raw: bool, shapes: bool = False) -> str:
    # Kernels carry globalPid since nsys 2021; older / other exports carry globalTid only.
    pid = "globalPid" if "globalPid" in cols else f"globalTid - (globalTid & {_PID_MASK})"
    name = "demangledName" if "demangledName" in cols else "shortName" if "shortName" in cols else "NULL"
    short = "shortName" if "shortName" in cols else name
    # The short name and the stream only go to the raw events: not read from SQLite without --keep-raw.
    short, stream = (short, "streamId") if keep_raw else ("NULL", "NULL::BIGINT")
    copy = "copyKind" if "copyKind" in cols else "NULL"
    in_graph = "graphNodeId IS NOT NULL" if kind == "kernel" and "graphNodeId" in cols else "false"
    # A kernel's launch shape where the export has all six columns; a value past INTEGER is none (TRY_CAST).
    shaped = shapes and kind == "kernel" and all(c in cols for c in _SHAPE_SOURCE)
    shape = ", ".join(f"{f'TRY_CAST({src} AS INTEGER)' if shaped else 'NULL::INTEGER'} AS {col}"
                      for src, col in zip(_SHAPE_SOURCE, SHAPE_COLUMNS))
    return (f"SELECT {pid} AS pid_key, deviceId AS device_id, {stream} AS stream_id, correlationId AS corr_id, "
            f"start AS start_ns, \"end\" AS end_ns, {KIND[kind]}::UTINYINT AS kind, "
            f"{name if kind == 'kernel' else 'NULL'}::BIGINT AS name_id, "
            f"{short if kind == 'kernel' else 'NULL'}::BIGINT AS short_id, "
            f"{copy if kind == 'memcpy' else 'NULL'}::BIGINT AS copy_kind, {in_graph} AS in_graph, {shape} "
            f"FROM nsys.\"{table}\"")


_SHAPE_SOURCE = ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")  # the kernel table's, in SHAPE_COLUMNS' order
_MISMATCH = re.compile(r'column "(' + "|".join(_SHAPE_SOURCE) + r')"')


class ShapesUnreadable(Exception):
    """A launch-shape column of the kernel table holds a value the scanner cannot read as its declared integer."""

    def __init__(self, column: str, why: str) -> None:
        super().__init__(column, why)
        self.column, self.why = column, why


def _shape_column(exc: BaseException) -> str | None:
    """The launch-shape column a scanner error names, if it names one."""
    found = _MISMATCH.search(str(exc))
    return found.group(1) if found else None


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



_BATCH_ROWS = 1 << 17  # activities (or runtime calls) per streamed batch: what one batch's frames hold (two in
# flight); 2^19 held ~100 MiB more at the stream's peak (5M and 10M kernels), for no time saved
_KERNEL_KEYS = ("pid_key", "code", "name_id", *SHAPE_COLUMNS)  # a kernel's category is its name's
_NO_TIME = np.iinfo(np.int64).min  # a NULL start or end (a damaged export), as the interval arithmetic reads it


class Activity:
    """The GPU activity as it streams in, kept as only what the anatomy reads: per process, graph replays apart
    (left out when graphs were traced per node), each activity's step code (-1: none; no steps: all -1, else only
    claimed activities are kept), category code, start and end; kernel calls and time per (process, step, name,
    launch shape),
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
        replay = (activity["kind"] == KIND["graph"]).to_numpy()
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
            self._raw.append(activity.select("pid_key", step_of_codes(codes, self.step_values), "category", "kind", "graph",
                                             "name_id", "short_id", "stream_id", "start_ns", "end_ns"))
        lazy = activity.lazy()
        devices, sums = pl.collect_all([
            # Devices per process, the graph replays' apart (left out when graphs were traced per node).
            lazy.select("pid_key", "device_id", "graph").unique(),
            # Kernels a step claimed; without steps, every kernel (its one window, step null).
            lazy.filter((pl.col("kind") == KIND["kernel"]) & ((pl.col("code") >= 0) | pl.lit(not self.has_steps)))
            .group_by(_KERNEL_KEYS).agg(
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
                   activity["start_ns"].fill_null(_NO_TIME).to_numpy(), activity["end_ns"].fill_null(_NO_TIME).to_numpy(),
                   _labels(activity))
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
        """Kernel calls and time (ns) per (pid_key, step code, name id, launch shape), over the batches so far."""
        return pl.concat(self._sums).group_by(_KERNEL_KEYS).agg(pl.col("calls", "ns").sum())

    def unclaimed(self, with_graphs: bool) -> int:
        return self._unclaimed[False] + (self._unclaimed[True] if with_graphs else 0)

    def pids(self) -> list[int | None]:
        return list(dict.fromkeys(pid for pid, _, _ in self._kept.keys()))

    def groups(self, pid: int | None) -> list[int]:
        """A process's step groups, in step order."""
        return sorted({g for p, _, g in self._kept.keys() if p == pid})

    def take(self, pid: int | None, group: int, with_graphs: bool
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(step code, category code, start, end, label) of the kept activities of a process's step group, given up
        by the store (graph replays read only if they count)."""
        if not with_graphs:
            self._kept.drop((pid, True, group))
        code, category, start, end, label = _joined([self._kept.take((pid, is_graph, group))
                                                     for is_graph in (False, True)])
        return code, category, start, end, label

    def window(self, pid: int | None, with_graphs: bool) -> Iterator[tuple[tuple[np.ndarray, ...], int | None]]:
        """Without steps, a process's kept activities (its one window), given up, in bins of consecutive ranges
        of start times of about _GROUP_ACTIVITIES activities each (the ranges from a sample of the starts): each
        bin's (step code, category code, start, end, label) and the start of the next bin's range (None for the last).
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
_TABLE_OF_KIND = {KIND["kernel"]: KERNEL, KIND["memcpy"]: MEMCPY, KIND["memset"]: MEMSET, KIND["graph"]: GRAPH}


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


_PART_DTYPES = (np.int32, np.uint8, np.int64, np.int64, np.int64)  # what Activity keeps of each activity: step
# code, category code, start, end, label (_labels)
# A label names an activity where a long gap follows it (ingest/gap_places.py): a kernel's name id; a copy's, a set's
# or a graph replay's category code past COPY_LABEL (name ids are row numbers of StringIds, far below it).
COPY_LABEL = 1 << 40


def _labels(activity: pl.DataFrame) -> np.ndarray:
    """Each activity's label: its name id (a kernel), else COPY_LABEL + its category code; a kernel without a name
    id is COPY_LABEL - 1 ('(unnamed)')."""
    kernel = (activity["kind"] == KIND["kernel"]).to_numpy()
    name = activity["name_id"].fill_null(COPY_LABEL - 1).to_numpy().astype(np.int64)
    return np.where(kernel, name, COPY_LABEL + activity["category"].to_physical().to_numpy().astype(np.int64))
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


def step_of_codes(codes: np.ndarray, step_values: np.ndarray) -> pl.Series:
    """The step number of each step code (null for -1)."""
    if not step_values.size:
        return pl.repeat(None, codes.size, dtype=pl.Int64, eager=True).alias("step")
    numbers = pl.Series("step", step_values[np.maximum(codes, 0)], dtype=pl.Int64)
    return numbers if not (codes < 0).any() else pl.select(pl.when(pl.Series(codes >= 0)).then(numbers)).to_series()


def _categorise(activity: pl.DataFrame, names: dict[int, str], copy_cat: dict[int, str],
                rules: CategoryRules) -> pl.DataFrame:
    """Category per activity: kernels by name (kernel_categories.toml, Python re, once per distinct name),
    memcpy by direction, memset, cuda_graph for a graph replay. An Enum (a small integer per activity) until
    a chunk or an output needs the text: the rules' one Enum for all batches, a small integer per activity."""
    CATEGORY = rules.enum
    kind = pl.col("kind")
    kernel_ids = activity.filter(kind == KIND["kernel"])["name_id"].drop_nulls().unique().to_list()
    kernel_cat = {i: rules.classify(names.get(i, "")) for i in kernel_ids}
    return activity.with_columns(
        pl.when(kind == KIND["kernel"])
        .then(pl.col("name_id").replace_strict(kernel_cat, default="other", return_dtype=CATEGORY))
        .when(kind == KIND["memset"]).then(pl.lit("memset", dtype=CATEGORY))
        .when(kind == KIND["graph"]).then(pl.lit("cuda_graph", dtype=CATEGORY))
        .otherwise(pl.col("copy_kind").replace_strict(copy_cat, default="other", return_dtype=CATEGORY))
        .fill_null(pl.lit("other", dtype=CATEGORY))
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
                                "end_ns": pl.Int64, "duration_ns": pl.Int64, "damaged": pl.Boolean})


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
