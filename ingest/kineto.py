"""PyTorch profiler (Kineto) Chrome traces, one file per rank, into step-time anatomy.

Reading is ingest/kineto_trace.py: streamed, keeping only the events the anatomy needs.

Time: `ts`/`dur` are float microseconds. With `baseTimeNanoseconds` (Kineto PRs #890/#919/#928)
an event is at base + ts*1000 ns; without it `ts` is taken as the absolute clock. Each rank's time
base is recorded and a warning is raised when they differ: ranks never silently share a clock.

Steps (Anatomy.attribution): a GPU activity belongs to ProfilerStep#N when its launching runtime or
driver call (same correlation id) starts inside that step's window on any thread of the launching
process; otherwise when the activity itself starts inside a step window of its rank; otherwise it
is unattributed (counted, kept in raw_events, left out of the rows).

Idle is measured on the GPU timeline the way HTA's temporal breakdown measures it (HTA 0.5.0
get_temporal_breakdown: span from the first GPU start to the last GPU end, minus the union of GPU
work), per step: the span of step N runs from its own first GPU activity to the end of its own work,
the same span Nsight Systems' anatomy uses, so under both profilers the step's range is the span's
parts plus the host gap (the range outside the span, analysis/components.py). The GPU's wait between
one step's last kernel and the next step's first is the host's time (a sleep before the first launch,
a data loader), not the GPU's idle. The
first profiled step per rank is marked warmup: it carries profiler start-up (CUPTI buffers, first
allocations) and, in a kineto schedule, follows straight on the warmup phase.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import cast

import numpy as np
import polars as pl

from receipts.errors import InputError
from receipts.ingest import sniff
from receipts.ingest.rank_files import natural_order
from receipts.ingest.gap_places import gap_frame
from receipts.ingest.intervals import anatomy_rows, kernel_steps
from receipts.ingest.kineto_trace import KINETO_KEYS, Trace, stream_trace
from receipts.schema.categories import IDLE_LONG, CategoryRules
from receipts.schema.model import (ANATOMY_NVTX_SCHEMA, ANATOMY_ROW_SCHEMA, ANATOMY_STEP_SCHEMA, Anatomy,
                                   IdentityClaim, epoch_iso)

_MEMCPY_KIND = {"HtoD": "memcpy_h2d", "DtoH": "memcpy_d2h", "DtoD": "memcpy_d2d", "PtoP": "memcpy_p2p"}
_MEMCPY_NAME = re.compile(r"(HtoD|DtoH|DtoD|PtoP)")

def trace_files(path: Path) -> list[Path]:
    """The traces of a folder, one file per rank (*.json / *.json.gz), in natural name order (rank2 < rank10).
    A JSON document beside them that is no trace (a run's config.json) is no rank; a file that does not read
    as JSON is kept (a damaged rank: reading it names it, and the profile is refused whole)."""
    path = Path(path)
    if not path.is_dir():
        raise InputError(path, "is not a directory of PyTorch profiler traces")
    files = natural_order(p for p in path.iterdir() if p.is_file() and p.name.endswith((".json", ".json.gz"))
                          and not sniff.other_json_document(p))
    if not files:
        raise InputError(path, "no PyTorch profiler traces (*.pt.trace.json[.gz] or *.json[.gz]) in this folder")
    return files


def parse_dir(path: Path, *, rules: CategoryRules, keep_raw: bool = False) -> Anatomy:
    """A folder of *.pt.trace.json(.gz) / *.json(.gz), one file per rank, is one run."""
    return parse_files(trace_files(path), rules=rules, keep_raw=keep_raw)


def parse_files(paths: list[Path], *, rules: CategoryRules, keep_raw: bool = False) -> Anatomy:
    """One run: one Kineto trace per rank, in rank order when the traces do not say their rank.

    The serial path of the map in pipeline/execution.py: each trace is read on its own (read_rank), the ranks
    are joined by combine."""
    if not paths:
        raise InputError(".", "no trace files given; expected one PyTorch profiler trace per rank")
    return replace(combine([read_rank(Path(p), i, rules=rules, keep_raw=keep_raw) for i, p in enumerate(paths)]),
                   category_rules=rules)


@dataclass(frozen=True)
class RankTrace:
    """One rank's trace reduced to its anatomy rows, all rank-local: what a worker sends back (per step and
    category, plus the GPU intervals the straggler analysis matches across ranks), never the trace itself."""

    path: Path
    rank: int
    rank_stated: bool                # False: distributedInfo.rank absent, the file's position taken
    meta: dict                       # the trace's top-level keys (distributedInfo, deviceProperties, ...)
    base_ns: int | None              # baseTimeNanoseconds, None when absent
    gpu_model: str | None
    has_gpu: bool
    has_steps: bool
    fallback: int                    # activities attributed by their own GPU start
    unattributed: int
    first_step_ns: int | None
    first_gpu_ns: int | None
    rows: pl.DataFrame
    steps: pl.DataFrame
    nvtx: pl.DataFrame
    events: pl.DataFrame
    kernel_steps: pl.DataFrame
    gap_places: pl.DataFrame         # ANATOMY_GAP_SCHEMA: where each long GPU gap of a step lies
    raw_events: pl.DataFrame | pl.LazyFrame | None  # lazy: staged as Parquet by a worker (pipeline/execution.py)


def read_rank(path: Path, position: int, *, rules: CategoryRules, keep_raw: bool = False) -> RankTrace:
    """One trace (the `position`-th of its run) into its rank's rows: everything of the anatomy that needs
    no other rank. Runs in a worker process for many ranks."""
    t = stream_trace(Path(path))
    if t.kineto_events == 0 and not any(k in t.meta for k in KINETO_KEYS):
        raise InputError(t.path, "a Chrome trace without PyTorch profiler (Kineto) markers: no schemaVersion, "
                                 "deviceProperties or distributedInfo and no cpu_op/kernel/cuda_runtime events "
                                 "(a trace from another tool?)")
    dist = t.meta.get("distributedInfo")
    given = dist.get("rank") if isinstance(dist, dict) else None
    stated = _small_int(given)
    rank = cast(int, given) if stated else position
    base = _time_base(t) if t.meta.get("baseTimeNanoseconds") is not None else None
    gpu, launch, steps, notes = _frames(t, rank)
    gpu = _categorise(gpu, rules)
    gpu, counts = _attribute(gpu, launch, steps)
    has_steps = steps.height > 0
    events = gpu.filter(pl.col("step").is_not_null() | pl.lit(not has_steps))
    spans = _spans(events, steps)
    rows, per_step = anatomy_rows(events.select("rank", "step", "category", "start_ns", "end_ns"), spans,
                                  kinds=rules.kinds)
    step_frame = _step_frame(steps, spans, per_step)
    warm = step_frame.select("rank", "step", "warmup")
    rows = rows.join(warm, on=["rank", "step"], how="left", nulls_equal=True).with_columns(pl.col("warmup").fill_null(False))
    nvtx = (notes.group_by("rank", pl.col("name").alias("range_name"))
            .agg(pl.len().alias("count"), (pl.col("dur_ns").sum() / 1e6).alias("total_ms"))
            .with_columns(pl.lit(None, dtype=pl.Float64).alias("gpu_ms")))
    return RankTrace(
        path=t.path, rank=rank, rank_stated=stated, meta=t.meta, base_ns=base, gpu_model=_gpu_model(t),
        has_gpu=gpu.height > 0, has_steps=has_steps, fallback=counts["fallback"], unattributed=counts["unattributed"],
        first_step_ns=cast("int | None", steps["start_ns"].min()), first_gpu_ns=cast("int | None", gpu["start_ns"].min()),
        rows=_typed(rows, ANATOMY_ROW_SCHEMA), steps=_typed(step_frame, ANATOMY_STEP_SCHEMA),
        nvtx=_typed(nvtx, ANATOMY_NVTX_SCHEMA),
        events=_typed(events.select("rank", "step", "category", "start_ns", "end_ns"), _EVENT_SCHEMA),
        kernel_steps=_typed(kernel_steps(events.filter(pl.col("kind") == "kernel")), _KERNEL_STEP_SCHEMA),
        # only the steps that hold a long gap are walked again for its place
        gap_places=gap_frame(events.select("rank", "step", "name", "start_ns", "end_ns"),
                             spans.join(rows.filter((pl.col("category") == IDLE_LONG) & (pl.col("time_ms") > 0))
                                        .select("rank", "step"), on=["rank", "step"], how="semi")),
        raw_events=_typed(gpu.select("rank", "step", "category", "name", "start_ns", "end_ns", "device", "stream",
                                     pl.col("corr").alias("correlation"), "launch_ns", "attributed_by"), _RAW_SCHEMA)
        if keep_raw else None,
    )


_EVENT_SCHEMA = {"rank": pl.Int32, "step": pl.Int64, "category": pl.Utf8, "start_ns": pl.Int64, "end_ns": pl.Int64}
_KERNEL_STEP_SCHEMA = {"rank": pl.Int32, "step": pl.Int64, "category": pl.Utf8, "name": pl.Utf8, "shape": pl.Utf8,
                       "calls": pl.Int64, "time_ms": pl.Float64}
_RAW_SCHEMA = {"rank": pl.Int32, "step": pl.Int64, "category": pl.Utf8, "name": pl.Utf8, "start_ns": pl.Int64,
               "end_ns": pl.Int64, "device": pl.Int64, "stream": pl.Int64, "correlation": pl.Int64,
               "launch_ns": pl.Int64, "attributed_by": pl.Utf8}


def combine(parts: list[RankTrace]) -> Anatomy:
    """The reduce: the ranks' rows side by side (in rank order where the traces sort them), with what needs
    them all: duplicate ranks, world size, time bases, GPU models, the run's start and its warnings."""
    if not parts:
        raise InputError(".", "no trace files given; expected one PyTorch profiler trace per rank")
    warnings: list[str] = []
    seen: dict[int, str] = {}
    for p in parts:
        if not p.rank_stated:
            warnings.append(f"{p.path.name}: no distributedInfo.rank; rank {p.rank} taken from the file's position "
                            "in the run (not a default of 0)")
        if p.rank in seen:
            raise InputError(p.path, f"rank {p.rank} also comes from {seen[p.rank]}; a run takes one trace per rank")
        seen[p.rank] = p.path.name
    metas = [p.meta for p in parts]
    world_size = _world_size(metas, warnings)
    bases = {p.path.name: p.base_ns for p in parts}
    if len(set(bases.values())) > 1:
        warnings.append("ranks do not share a time base (baseTimeNanoseconds: " + ", ".join(
            f"{n}={b if b is not None else 'absent'}" for n, b in bases.items())
            + "); each rank is put on its own base + ts clock and cross-rank alignment assumes those agree")
    gpu_ranks = {p.rank for p in parts if p.has_gpu}
    step_ranks = {p.rank for p in parts if p.has_steps}
    for p in parts:
        if p.rank not in gpu_ranks:
            warnings.append(f"rank {p.rank} ({p.path.name}): no GPU activity (CPU-only profile); no GPU anatomy for it")
        if p.rank not in step_ranks:
            warnings.append(f"rank {p.rank} ({p.path.name}): no ProfilerStep#N marker; its whole profiled window is one "
                            "step (null) spanning its first to last GPU activity")
    fallback, unattributed = sum(p.fallback for p in parts), sum(p.unattributed for p in parts)
    if fallback:
        warnings.append(f"{fallback} GPU activities had no launch inside a step window of their process and "
                        "were attributed by their own GPU start time")
    if unattributed:
        warnings.append(f"{unattributed} GPU activities fell outside every ProfilerStep window "
                        "(unattributed: kept in raw events, not in the anatomy rows)")
    models = [p.gpu_model for p in parts if p.gpu_model]
    if len(set(models)) > 1:
        warnings.append("ranks report different GPU models: " + ", ".join(sorted(set(models))))
    software = {}
    for key in ("cuda_runtime_version", "cuda_driver_version", "cupti_version", "hip_runtime_version",
                "hip_driver_version", "roctracer_version"):
        if metas[0].get(key) is not None:
            software[key] = str(metas[0][key])
    dist = metas[0].get("distributedInfo") or {}
    for key in ("backend", "nccl_version"):
        if isinstance(dist, dict) and dist.get(key) is not None:
            software[f"distributed_{key}" if key == "backend" else key] = str(dist[key])
    hostname = next((str(m[k]) for m in metas for k in ("hostname", "host_name", "hostName") if m.get(k)), None)
    schema = metas[0].get("schemaVersion")
    # With baseTimeNanoseconds on every rank, timestamps are epoch ns: the capture started at its first event.
    firsts = [p.first_step_ns for p in parts if p.has_steps] or [p.first_gpu_ns for p in parts if p.has_gpu]
    first_ns = min(cast("list[int]", firsts)) if firsts else None
    started_at = (epoch_iso(first_ns / 1e9)
                  if first_ns is not None and all(b for b in bases.values()) else None)
    gpus_on_host = _gpus_on_host(metas)
    return Anatomy(
        source_format="kineto",
        schema_version=None if schema is None else str(schema),
        rows=pl.concat([p.rows for p in parts]),
        steps=pl.concat([p.steps for p in parts]).sort("rank", "step", nulls_last=True),
        nvtx=pl.concat([p.nvtx for p in parts]).sort("rank", "range_name"),
        step_marker="ProfilerStep#N (Kineto cpu_op/user_annotation)" if step_ranks else
                    "none: no ProfilerStep#N in the trace; the whole profiled window is one step (null)",
        attribution="correlation id: the launching cuda_runtime/cuda_driver call inside ProfilerStep#N on any thread "
                    "of its process; else the activity's own GPU start inside a step window; else unattributed",
        unattributed=unattributed,
        claim=IdentityClaim(hostname=hostname),
        gpu_model=max(models, key=models.count) if models else None,  # a tie: the first rank's
        gpu_count=gpus_on_host or len(gpu_ranks) or None,
        world_size=world_size,
        ranks_traced=len(parts), ranks_stated=all(p.rank_stated for p in parts),
        gpus_on_host=gpus_on_host, started_at=started_at,
        software=software,
        warnings=tuple(warnings),
        events=pl.concat([p.events for p in parts]),
        kernel_steps=pl.concat([p.kernel_steps for p in parts]),
        gap_places=pl.concat([p.gap_places for p in parts]),
        raw_events=pl.concat([cast(pl.DataFrame, p.raw_events) for p in parts])  # all frames, or all lazy
        if all(p.raw_events is not None for p in parts) else None,
    )


def _typed(frame: pl.DataFrame, schema: dict) -> pl.DataFrame:
    return frame.select([pl.col(c).cast(t) if c in frame.columns else pl.lit(None, dtype=t).alias(c)
                         for c, t in schema.items()])


def _world_size(metas: list[dict], warnings: list[str]) -> int | None:
    given = [d.get("world_size") for m in metas if isinstance(d := m.get("distributedInfo"), dict)]
    sizes = {s for s in given if isinstance(s, int) and _small_int(s) and s > 0}
    if len(sizes) > 1:
        warnings.append(f"traces disagree on distributedInfo.world_size: {sorted(sizes)}")
    if not sizes:
        warnings.append("world size unknown: no distributedInfo.world_size in the traces")
    return max(sizes) if sizes else None


def _small_int(value) -> bool:
    """A rank or world size as a trace states it: an integer in [0, 2^31) (ranks are int32 columns)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31


def _gpus_on_host(metas: list[dict]) -> int | None:
    """The GPUs a rank's process could see (deviceProperties), the largest list among the traces: a rank-0
    trace of a 64-rank job on 8-GPU hosts lists 8, not 1."""
    counts = [len([p for p in props if isinstance(p, dict)]) for m in metas
              if isinstance(props := m.get("deviceProperties"), list)]
    return max(counts) if counts and max(counts) > 0 else None


def _gpu_model(t: Trace) -> str | None:
    props = t.meta.get("deviceProperties")
    props = [p for p in props if isinstance(p, dict) and p.get("name")] if isinstance(props, list) else []
    used = set(t.gpu["device"].drop_nulls().to_list())
    for p in props:
        if _small_int(p.get("id")) and p.get("id") in used:
            return str(p["name"])
    return str(props[0]["name"]) if props else None


def _ns(col: str, base: int) -> pl.Expr:
    """Float microseconds -> integer ns; whole and fractional µs apart so 16-digit epoch µs keep their ns."""
    whole = pl.col(col).floor()
    return whole.cast(pl.Int64) * 1000 + ((pl.col(col) - whole) * 1000).round().cast(pl.Int64) + base


def _time_base(t: Trace) -> int:
    """baseTimeNanoseconds (ns since the epoch), 0 when absent; anything but a plausible epoch is refused:
    NaN, inf or a value past 2^62 would turn every timestamp into garbage or overflow int64."""
    base = t.meta.get("baseTimeNanoseconds")
    if base is None:
        return 0
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not 0 <= base < 2**62:
        raise InputError(t.path, f"baseTimeNanoseconds is {str(base)[:40]}; expected nanoseconds since the epoch "
                                 "(a non-negative integer below 2^62)")
    return int(base)


def _frames(t: Trace, rank: int) -> tuple[pl.DataFrame, ...]:
    base = _time_base(t)
    r = pl.lit(rank, dtype=pl.Int32).alias("rank")
    dur_ns = (pl.col("dur") * 1000).round().cast(pl.Int64).clip(lower_bound=0)
    gpu = t.gpu.select(r, "name", "kind", _ns("ts", base).alias("start_ns"), (_ns("ts", base) + dur_ns).alias("end_ns"),
                       "device", "stream", "corr", "shape")
    launch = (t.launch.select(r, "corr", pl.col("pid").alias("l_pid"), _ns("ts", base).alias("l_ns"))
              .unique(["rank", "corr"], keep="first"))
    steps = (t.step.select(r, "step", "pid", _ns("ts", base).alias("start_ns"), dur_ns.alias("dur_ns"))
             .with_columns((pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"))
             .sort("start_ns").unique(["rank", "step"], keep="first", maintain_order=True))
    notes = t.note.select(r, "name", "pid", _ns("ts", base).alias("start_ns"), dur_ns.alias("dur_ns"))
    return gpu, launch, steps, notes


def _categorise(gpu: pl.DataFrame, rules: CategoryRules) -> pl.DataFrame:
    """Kernels by the category rules (NCCL kernels land in nccl_*, communication); memcpy by direction; memset."""
    pairs = gpu.select("name", "kind").unique().rows()
    kernels = [name for name, kind in pairs if kind == "kernel"]
    mapping = {(name, "kernel"): category for name, category in zip(kernels, rules.classify_many(kernels))}
    for name, kind in pairs:
        if kind == "kernel":
            continue
        elif kind == "memset":
            mapping[(name, kind)] = "memset"
        else:  # 'Memcpy HtoD (Pageable -> Device)'; HtoH and unknown directions have no category: other
            m = _MEMCPY_NAME.search(name)
            mapping[(name, kind)] = _MEMCPY_KIND[m.group(1)] if m else "other"
    lookup = pl.DataFrame({"name": [k[0] for k in mapping], "kind": [k[1] for k in mapping],
                           "category": list(mapping.values())},
                          schema={"name": pl.Categorical, "kind": pl.Utf8, "category": rules.enum})
    return gpu.join(lookup, on=["name", "kind"], how="left")


def _attribute(gpu: pl.DataFrame, launch: pl.DataFrame, steps: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, int]]:
    """Step of each GPU activity: by its launch's CPU time on the launching process, else its own start.

    Each lookup is a binary search over the step windows of one (rank, process) or one rank, sorted by start: the
    window that starts last at or before the time, if the time falls before its end."""
    n = gpu.height
    by_launch = np.full(n, -1, np.int64)  # index into steps, -1: none
    by_start = np.full(n, -1, np.int64)
    launch_ns = np.zeros(n, np.int64)
    launched = np.zeros(n, bool)
    launch_pid = np.full(n, -1, np.int64)
    l_pids, s_pid = _pid_codes(launch["l_pid"], steps["pid"])
    if launch.height and n:
        corr = launch["corr"].to_numpy()
        order = np.argsort(corr, kind="stable")  # launches are unique per (rank, corr) already
        l_corr, l_ns = corr[order], launch["l_ns"].to_numpy()[order]
        l_rank = launch["rank"].to_numpy()[order]
        l_pid = l_pids[order]
        g_corr = gpu["corr"].fill_null(np.iinfo(np.int64).min).to_numpy()  # no launch has it
        at = np.minimum(np.searchsorted(l_corr, g_corr), l_corr.size - 1)
        launched = (l_corr[at] == g_corr) & gpu["corr"].is_not_null().to_numpy() & (l_rank[at] == gpu["rank"].to_numpy())
        launch_ns, launch_pid = np.where(launched, l_ns[at], 0), np.where(launched, l_pid[at], -1)
    if steps.height and n:
        s_rank, s_start, s_end = steps["rank"].to_numpy(), steps["start_ns"].to_numpy(), steps["end_ns"].to_numpy()
        g_rank, g_start = gpu["rank"].to_numpy(), gpu["start_ns"].to_numpy()
        for rank in np.unique(s_rank):
            mine = s_rank == rank
            _last_window(np.flatnonzero(mine), s_start, s_end, g_start, g_rank == rank, by_start)
            for pid in np.unique(s_pid[mine]):
                _last_window(np.flatnonzero(mine & (s_pid == pid)), s_start, s_end, launch_ns,
                             launched & (g_rank == rank) & (launch_pid == pid), by_launch)
    step_numbers = steps["step"].to_numpy()
    stepped = np.isin(gpu["rank"].to_numpy(), steps["rank"].unique().to_numpy())
    counts = {"fallback": int(((by_launch < 0) & (by_start >= 0)).sum()),
              "unattributed": int((stepped & (by_launch < 0) & (by_start < 0)).sum())}
    chosen = np.where(by_launch >= 0, by_launch, by_start)
    step = pl.Series("step", step_numbers[np.maximum(chosen, 0)] if step_numbers.size else np.zeros(n, np.int64),
                     dtype=pl.Int64)
    how = pl.Series("attributed_by", ["launch", "gpu_start", None], dtype=pl.Utf8).gather(
        np.where(by_launch >= 0, 0, np.where(by_start >= 0, 1, 2)))
    return gpu.with_columns(
        pl.Series("launch_ns", launch_ns, dtype=pl.Int64).set(pl.Series(~launched), None),
        step.set(pl.Series(chosen < 0), None),
        how), counts


def _pid_codes(launch_pid: pl.Series, step_pid: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """The launches' and the steps' process ids as integer codes of one dictionary (pids are text)."""
    both = pl.concat([launch_pid, step_pid]).cast(pl.Utf8)
    codes = both.cast(pl.Enum(both.drop_nulls().unique().to_list())).to_physical().fill_null(-1).to_numpy()
    return codes[:launch_pid.len()].astype(np.int64), codes[launch_pid.len():].astype(np.int64)


def _last_window(windows: np.ndarray, start: np.ndarray, end: np.ndarray, at: np.ndarray, asking: np.ndarray,
                 out: np.ndarray) -> None:
    """out[i] := the window (an index among `windows`) that starts last at or before at[i] and ends after it,
    for each i that is `asking`: a join_asof backward by start, kept when at[i] < its end."""
    if not windows.size or not asking.any():
        return
    windows = windows[np.argsort(start[windows], kind="stable")]  # equal starts: the later in the steps' order
    rows = np.flatnonzero(asking)
    k = np.searchsorted(start[windows], at[rows], side="right") - 1
    hit = k >= 0
    rows, k = rows[hit], windows[k[hit]]
    inside = at[rows] < end[k]
    out[rows[inside]] = k[inside]


def _spans(events: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """GPU span per (rank, step) for idle: from the step's own first GPU activity to the end of its own work, as
    Nsight Systems' anatomy measures it, so the ProfilerStep range is its span's parts plus the host gap (the range
    outside the span: a stall before the first launch, a data-loader wait at the step's end). A step without work
    of its own has an empty span at its marker. A rank without step markers is one window (step null) over all
    its work."""
    e_rank, e_step = events["rank"].to_numpy(), events["step"].fill_null(0).to_numpy()
    e_start, e_end = events["start_ns"].to_numpy(), events["end_ns"].to_numpy()
    s_rank, s_step, s_start = steps["rank"].to_numpy(), steps["step"].to_numpy(), steps["start_ns"].to_numpy()
    parts = []
    for rank in np.unique(e_rank):
        mine = e_rank == rank
        marked = s_rank == rank
        if not marked.any():  # no markers: one window over the rank's work
            parts.append(pl.DataFrame({"rank": [rank], "step": [None], "span_start_ns": [e_start[mine].min()],
                                       "span_end_ns": [e_end[mine].max()]}, schema=_SPAN_SCHEMA))
            continue
        order = np.flatnonzero(marked)[np.argsort(s_start[marked], kind="stable")]  # the rank's steps by marker start
        numbers = s_step[order]
        by_number = np.argsort(numbers)
        slot = by_number[np.searchsorted(numbers, e_step[mine], sorter=by_number)]  # each event's step (attributed
        # from these steps), as its place in start order
        first = np.full(numbers.size, np.iinfo(np.int64).max)
        last = np.full(numbers.size, np.iinfo(np.int64).min)
        np.minimum.at(first, slot, e_start[mine])
        np.maximum.at(last, slot, e_end[mine])
        own = np.zeros(numbers.size, bool)
        own[slot] = True
        span_start = np.where(own, first, s_start[order])
        span_end = np.where(own, last, span_start)
        parts.append(pl.DataFrame({"rank": np.full(numbers.size, rank), "step": numbers,
                                   "span_start_ns": span_start, "span_end_ns": span_end}, schema=_SPAN_SCHEMA))
    return pl.concat(parts) if parts else pl.DataFrame(schema=_SPAN_SCHEMA)


_SPAN_SCHEMA = {"rank": pl.Int32, "step": pl.Int64, "span_start_ns": pl.Int64, "span_end_ns": pl.Int64}


def _step_frame(steps: pl.DataFrame, spans: pl.DataFrame, per_step: pl.DataFrame) -> pl.DataFrame:
    """ANATOMY_STEP rows: marker start and duration (ProfilerStep#N) or, without markers, the GPU window."""
    marker = steps.select("rank", "step", "start_ns", (pl.col("dur_ns") / 1e6).alias("wall_ms"))
    whole = spans.filter(pl.col("step").is_null()).select(
        "rank", "step", pl.col("span_start_ns").alias("start_ns"),
        ((pl.col("span_end_ns") - pl.col("span_start_ns")) / 1e6).alias("wall_ms"))
    frame = pl.concat([marker, whole]).join(per_step, on=["rank", "step"], how="left", nulls_equal=True)
    first = pl.col("start_ns").rank("ordinal").over("rank") == 1
    return (frame.with_columns((first & pl.col("step").is_not_null()).alias("warmup"))
            .sort("rank", "step", nulls_last=True))
