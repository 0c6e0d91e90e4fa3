"""The receipt model: what one run is, as plain frozen records.

Per-step rows are columnar (a polars frame with STEP_SCHEMA) because logs run to millions of
lines; everything else is small and lives in dataclasses. Units live in names.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast, overload

import polars as pl

from receipts.schema.lane import NO_LANE, IdentityClaim, Lane
from receipts.schema.memory import MemoryGeometry
from receipts.schema.telemetry import GpuTelemetry

if TYPE_CHECKING:
    from receipts.schema.categories import CategoryRules

# Bump when the meaning of a stored column changes; the store records it and refuses unknown ones.
RECEIPT_MODEL_VERSION = 1

STEP_SCHEMA: dict[str, pl.DataType] = {
    "step": pl.Int64(),            # training iteration as the log numbers it
    "rank": pl.Int32(),            # global rank the value comes from; null = as printed by the logging rank
    "step_ms": pl.Float64(),       # wall time of the step (or mean over the logging interval)
    "tokens_per_s": pl.Float64(),  # throughput as printed (global unless the format says per-device)
    "loss": pl.Float64(),
    "mfu_pct": pl.Float64(),       # model FLOPs utilisation, percent
    "allocated_bytes": pl.Int64(),  # torch allocated (current or max over the step, as printed)
    "reserved_bytes": pl.Int64(),   # torch reserved by the caching allocator
    "line": pl.Int64(),            # 1-based line in the source file: evidence stays attached
}


# A receipt's step rows: a DataFrame, or (a long log's, spilled to disk by ingest/spool.py) a LazyFrame scanning
# them, which readers collect the columns they need from. Either way STEP_SCHEMA's columns in step order.
Steps = pl.DataFrame | pl.LazyFrame
F = TypeVar("F", bound=Steps)  # a step frame, eager or lazy: what goes in comes out


def empty_steps() -> pl.DataFrame:
    return pl.DataFrame(schema=STEP_SCHEMA)


@overload
def steps_frame(rows: pl.LazyFrame) -> pl.LazyFrame: ...
@overload
def steps_frame(rows: dict[str, Any] | pl.DataFrame) -> pl.DataFrame: ...
def steps_frame(rows: dict[str, Any] | pl.DataFrame | pl.LazyFrame) -> pl.DataFrame | pl.LazyFrame:
    """Coerce parser output to STEP_SCHEMA: missing columns become nulls, order is fixed."""
    frame = steps_columns(rows)
    if isinstance(frame, pl.DataFrame) and frame.width == 0:
        return empty_steps()
    if one_row_per_step(frame):
        return frame  # a log's steps usually are: sorting millions of rows again would copy them all
    # stable: a step printed twice (a resumed run's repeated iteration) keeps its rows in the order they came,
    # so the same log gives the same rows however its lines were read
    return frame.sort(["step", "rank"], nulls_last=True, maintain_order=True)


@overload
def steps_columns(rows: pl.LazyFrame) -> pl.LazyFrame: ...
@overload
def steps_columns(rows: dict[str, Any] | pl.DataFrame) -> pl.DataFrame: ...
def steps_columns(rows: dict[str, Any] | pl.DataFrame | pl.LazyFrame) -> pl.DataFrame | pl.LazyFrame:
    """STEP_SCHEMA's columns, in its order, rows in their order (steps_frame without the sort): a parser
    reading a log chunk by chunk conforms each chunk's rows, so joining them copies nothing."""
    frame = rows if isinstance(rows, (pl.DataFrame, pl.LazyFrame)) else pl.DataFrame(rows)
    names = frame.collect_schema().names()
    cols: list[pl.Expr] = []
    for name, dtype in STEP_SCHEMA.items():
        if name in names:
            cols.append(pl.col(name).cast(dtype, strict=False))
        else:
            cols.append(pl.lit(None, dtype=dtype).alias(name))
    return frame.select(cols) if names else frame


def one_row_per_step(frame: Steps) -> bool:
    """Steps strictly increasing with no rank: the order sort() would give, with no ties to break, and each
    step's only row is already what a per-step aggregate (slowest rank, summed tokens) would make of it."""
    if isinstance(frame, pl.LazyFrame):
        # streamed: each step against the one before it (a shift streams; diff() would collect the column)
        step = pl.col("step")
        return bool(frame.select(pl.col("rank").is_null().all() & step.is_not_null().all()
                                 & (step > step.shift(1)).all()).collect(engine="streaming").item())
    steps = frame["step"]
    # One comparison of each step with the next, no diff column: at 10M steps the diff and its drop_nulls copy
    # were the parse's peak (+160 MiB).
    return (frame["rank"].null_count() == frame.height and steps.null_count() == 0
            and bool((steps.slice(1) > steps.slice(0, max(frame.height - 1, 0))).all()))


@dataclass(frozen=True)
class LaunchRegime:
    engine: str | None          # megatron | ddp | fsdp2 | fsdp | deepspeed | ...
    compile_mode: str | None    # none | regional | full | unknown (the regime did not say: never guessed)
    parallel: tuple[tuple[str, int], ...] = ()  # sorted (degree name, value), e.g. (("tp", 2),)

    @property
    def canonical(self) -> str | None:
        if not self.engine:
            return None
        mode = self.compile_mode or "unknown"
        text = f"{self.engine}/{'no' if mode == 'none' else mode}-compile"
        if self.parallel:
            # '?word' entries are unrecognised regime words: kept, so distinct regimes never collapse
            text += "/" + ",".join(f"+{k[1:]}" if k.startswith("?") else f"{k}{v}" for k, v in self.parallel)
        return text


@dataclass(frozen=True)
class Identity:
    """The lane after canonicalisation, with the raw values (`raw`: as claimed, the hostname standing in for a
    host lineage not claimed) and how each was resolved."""

    lane: Lane
    raw: Lane = NO_LANE
    hostname: str | None = None
    resolution: tuple[str, ...] = ()  # human notes, e.g. "preset alias x -> y"
    regime: LaunchRegime | None = None
    features: tuple[tuple[str, Any], ...] = ()  # feature bundle implied by the preset

    @property
    def complete(self) -> bool:
        return self.lane.complete

    @property
    def missing(self) -> list[str]:
        return self.lane.missing


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str | None  # None with is_set=False: a watched knob explicitly absent
    is_set: bool = True
    redacted: bool = False


@dataclass(frozen=True)
class SourceFile:
    path: str
    sha256: str
    size_bytes: int
    format: str
    role: str = "log"  # log | nsys | kineto | topology | collect_env | nccl_tests


def as_text(name: str) -> str:
    """A file name as text any store can hold: bytes of it that are not UTF-8 (which Python keeps as lone
    surrogates, `os.fsdecode`) written as \\xNN escapes, the rest as it is."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


# Machine-fact source roles (`ingest topo.txt --attach RUN`) and the receipt section their facts merge into.
FACT_SECTIONS = {"topology": "topology", "collect_env": "software", "nccl_tests": "topology"}
# The longest run name, identity value, hostname or run id a receipt keeps: they are index keys (DuckDB's ART
# holds at most 122,880 bytes a key, and the lane index three of them); a name is for people, 4,096 is plenty.
NAME_MAX_CHARS = 4096


@dataclass(frozen=True)
class MemoryPeak:
    rank: int | None
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None


@dataclass(frozen=True)
class StepWindow:
    """The bounded range the steady-state numbers come from."""

    first_step: int | None
    last_step: int | None
    warmup_steps: int          # rows excluded at the start (compile / first steps)
    warmup_last_step: int | None
    rule: str                  # 'marker:<phase>' or the documented heuristic's name
    n_steady: int


def mark_warmup(steps: F, window: StepWindow) -> F:
    """`warmup` = not steady: before the window (warm-up) or after it (a cut-short tail). Applying a window
    lives with the model, so the store can write it without importing the analysis that chose it."""
    if window.first_step is not None and window.last_step is not None:
        return cast(F, steps.with_columns(~pl.col("step").is_between(window.first_step, window.last_step).alias("warmup")))
    if window.warmup_last_step is None:
        return cast(F, steps.with_columns(pl.lit(False).alias("warmup")))
    return cast(F, steps.with_columns((pl.col("step") <= window.warmup_last_step).alias("warmup")))


@dataclass(frozen=True)
class ParsedRun:
    """What a log parser returns: evidence from one file, before identity resolution."""

    source_format: str
    format_version: str | None
    steps: Steps
    claim: IdentityClaim = IdentityClaim()
    phases: tuple[tuple[str, int | None, int | None], ...] = ()  # (phase, first_step, last_step)
    memory: tuple[MemoryPeak, ...] = ()
    env: tuple[EnvVar, ...] = ()
    software: dict[str, str] = field(default_factory=dict)
    topology: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    features: dict[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    gpu_model: str | None = None
    gpu_count: int | None = None     # the count machine_class uses: gpus_on_host when known, else the log's own
    world_size: int | None = None    # ranks in the job (the launcher's / distributedInfo's world size)
    ranks_traced: int | None = None  # ranks whose activity this file holds (a rank-0 trace of 64: 1)
    gpus_on_host: int | None = None  # CUDA devices the host listed (display adapters and the like left out)
    ended_early: str | None = None   # why the log looks cut short, naming the line
    warnings: tuple[str, ...] = ()
    started_at: str | None = None    # ISO-8601 when the log says
    tail_step: int | None = None     # a last step cut short (a profiler's or run_stop's), never steady state
    # Per rank, what receipts.capture measured of the memory's geometry (a RECEIPT footer's `memory`)
    memory_geometry: tuple[MemoryGeometry, ...] = ()
    # Per rank (or GPU), what NVML said while the run ran (a RECEIPT footer's `telemetry`, schema/telemetry.py)
    telemetry: tuple[GpuTelemetry, ...] = ()


@dataclass(frozen=True)
class Receipt:
    id: str                 # first 16 hex of content_sha256
    content_sha256: str
    run_name: str
    identity: Identity
    parsed: ParsedRun
    window: StepWindow
    sources: tuple[SourceFile, ...]
    tags: tuple[str, ...] = ()
    summary: dict[str, Any] | None = None  # analysis/summary.py: steady-state statistics computed at ingest

    @property
    def machine_class(self) -> str | None:
        p = self.parsed
        if p.gpu_model and p.gpu_count:
            return f"{short_gpu_name(p.gpu_model)}:{p.gpu_count}"
        return None

    @property
    def peak_allocated_bytes(self) -> int | None:
        vals = [m.peak_allocated_bytes for m in self.parsed.memory if m.peak_allocated_bytes is not None]
        return max(vals) if vals else None

    @property
    def peak_reserved_bytes(self) -> int | None:
        vals = [m.peak_reserved_bytes for m in self.parsed.memory if m.peak_reserved_bytes is not None]
        return max(vals) if vals else None


def epoch_iso(seconds: float) -> str | None:
    """Seconds since the epoch as ISO-8601 UTC (a receipt's started_at); None for a value outside the calendar
    (a damaged timestamp gives no start time rather than an error or a date in year 50,000)."""
    try:
        return datetime.fromtimestamp(seconds, tz=timezone.utc).isoformat()
    except (OverflowError, OSError, ValueError):
        return None


def short_gpu_name(model: str) -> str:
    """'NVIDIA H200' / 'NVIDIA H100 80GB HBM3' -> 'H200' / 'H100'; unknown names pass through."""
    import re

    m = re.search(r"\b([ABHLGV]\d{2,3}[A-Z]?|MI\d{3}[A-Z]?|GB\d{3}|B\d{3})\b", model)
    return m.group(1) if m else model.strip()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


ANATOMY_ROW_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),        # global rank (distributedInfo / process order); never guessed as 0
    "step": pl.Int64(),        # null = the whole profiled window
    "category": pl.Utf8(),     # gemm, attention, moe, nccl_*, memcpy_*, memset, other, idle, exposed_comm
    "time_ms": pl.Float64(),   # busy time of that category on the rank's device (interval union per category)
    "warmup": pl.Boolean(),    # step inside the warm-up / compile window (badput)
}

ANATOMY_STEP_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "step": pl.Int64(),
    "start_ns": pl.Int64(),    # step marker start on the trace's clock
    "wall_ms": pl.Float64(),   # marker duration (NVTX range / ProfilerStep#N)
    "gpu_ms": pl.Float64(),    # union of the step's GPU work (kernels, memcpy, memset)
    "kernels": pl.Int64(),     # kernels attributed to the step (memcpy, memset and CUDA-graph replays not counted)
    "comm_ms": pl.Float64(),   # union of NCCL kernels
    "overlap_pct": pl.Float64(),  # share of comm_ms hidden under compute kernels on the same device
    "warmup": pl.Boolean(),
}

# Kernels by name, steady steps only: the rows behind a top-N table. A sum of kernel durations (as `nsys stats`
# cuda_gpu_kern_sum reports), not a union: kernels on different streams overlap.
ANATOMY_KERNEL_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "category": pl.Utf8(),
    "name": pl.Utf8(),       # the kernel name as the export states it (nsys: demangled; Kineto: its name)
    "calls": pl.Int64(),
    "total_ms": pl.Float64(),
    "steps": pl.Int64(),     # the rank's steady steps the totals are over
}

# Kernels by name in each step of each rank, warm-up steps too: what a drill-down from one slow step reads. The
# longest STEP_KERNELS_KEPT names of each rank-step, and the rest summed in one row named STEP_KERNELS_REST, so a
# step's rows still sum to its kernel time (a 1,000-step profile of 8 ranks stays ~170k rows, not millions).
ANATOMY_STEP_KERNEL_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "step": pl.Int64(),
    "category": pl.Utf8(),   # null on the STEP_KERNELS_REST row
    "name": pl.Utf8(),
    "calls": pl.Int64(),
    "time_ms": pl.Float64(),  # sum of the kernel's durations in the step (not a union)
}
STEP_KERNELS_KEPT = 24
STEP_KERNELS_REST = "(other kernels)"

# Kernels by name and launch shape, steady steps only, where the profile records the shape (ingest/launch_shape.py):
# what `explain` prices added calls by. A name's rows sum to its anatomy_kernels row less its calls without a shape.
ANATOMY_KERNEL_SHAPE_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "name": pl.Utf8(),
    "shape": pl.Utf8(),       # 'grid (2,66,1) block (384,1,1)'
    "calls": pl.Int64(),
    "total_ms": pl.Float64(),
    "steps": pl.Int64(),      # the rank's steady steps the totals are over
}

ANATOMY_NVTX_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "range_name": pl.Utf8(),   # NVTX text / user annotation, e.g. 'ablock', 'step 12'
    "count": pl.Int64(),
    "total_ms": pl.Float64(),  # sum of range durations (CPU side, as nsys nvtx_sum reports)
    "gpu_ms": pl.Float64(),    # union of GPU work launched inside the ranges (null when not computed)
}

# Per-run component summaries (analysis/components.py), one row per (level, name), stored in receipt_components.
# Every GPU gap of at least LONG_GAP_NS inside a step's span (warm-up steps too), where it lies: after which call of
# which kernel (or copy) the GPU went idle (ingest/gap_places.py). A step's gaps sum to its idle_long.
ANATOMY_GAP_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "step": pl.Int64(),
    "after": pl.Utf8(),     # the name of the activity the gap follows (a kernel's, a copy's category); null: none
    "call": pl.Int64(),     # which call of that name in the step, from 1 (0: from the span's start)
    "gap_ms": pl.Float64(),
}

COMPONENT_SCHEMA: dict[str, pl.DataType] = {
    "rule": pl.Utf8(),            # analysis/components.py RULE that made the row
    "level": pl.Utf8(),           # 'category' | 'kernel' | 'gap' | 'nvtx' | 'rank'
    "name": pl.Utf8(),            # category, kernel name as the export states it, a gap's place ('NAME #CALL'),
                                  # NVTX range, 'rank N'
    "category": pl.Utf8(),        # a kernel's category; 'exposed_comm' for a rank; null otherwise
    "ms_per_step": pl.Float64(),  # ms per steady step (see analysis/components.py for each level's statistic)
    "calls_per_step": pl.Float64(),  # kernel calls / NVTX ranges per rank-step; gaps: the share of rank-steps with
                                     # one there; null for the other levels
    "n_steps": pl.Int64(),        # steady steps (per rank) the value is over
}


@dataclass(frozen=True)
class Anatomy:
    """What a profiler-export parser returns: step-time anatomy plus identity evidence."""

    source_format: str               # 'nsys' | 'kineto'
    schema_version: str | None       # nsys EXPORT_SCHEMA_VERSION / kineto schemaVersion
    rows: pl.DataFrame               # ANATOMY_ROW_SCHEMA
    steps: pl.DataFrame              # ANATOMY_STEP_SCHEMA
    nvtx: pl.DataFrame               # ANATOMY_NVTX_SCHEMA
    step_marker: str                 # e.g. "NVTX ranges matching '^step (\\d+)$'" or 'ProfilerStep#N'
    attribution: str                 # how GPU work reached a step (correlation ids, any thread of the process)
    unattributed: int = 0            # GPU activities inside the trace that no step claimed
    claim: IdentityClaim = IdentityClaim()
    gpu_model: str | None = None
    gpu_count: int | None = None     # gpus_on_host when known, else the devices that ran work
    world_size: int | None = None
    ranks_traced: int | None = None  # ranks (processes) whose GPU activity the export holds
    # The ranks are the file's own word (RANK in an export's environment, MPI thread names, distributedInfo),
    # not an order of processes: what a multi-export job (ingest/nsys_job.py) needs to put exports side by side.
    ranks_stated: bool = False
    gpus_on_host: int | None = None  # CUDA devices the export lists for the host
    started_at: str | None = None    # ISO-8601 UTC: the capture's start as the export states it, else None
    # nsys: the UTC epoch ns its timestamps count from (the session's start), which puts several exports of one
    # job on one clock (ingest/nsys_job.py); None when the export does not say, or its clock is already epoch.
    clock_origin_ns: int | None = None
    env: tuple[EnvVar, ...] = ()
    software: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    # Optional, written as Parquet beside the store; lazy when worker processes staged each rank's as Parquet.
    raw_events: "pl.DataFrame | pl.LazyFrame | None" = None
    # Every attributed GPU activity (rank, step, category, start_ns, end_ns): what cross-rank analysis
    # (analysis/stragglers.py) reads; never stored: in memory, or lazy over the parse's scratch Parquet files
    # (one nsys export read in the ingest's own process: its caller removes them once the anatomy is used).
    events: "pl.DataFrame | pl.LazyFrame | None" = None
    # Kernel time per (rank, step, category, name): calls, time_ms (category and name text, or Categorical: an
    # nsys export's, a row per step and kernel name). In memory only; the pipeline reduces it to the steady steps
    # of the receipt's window (`kernels`, stored in anatomy_kernels, text).
    kernel_steps: "pl.DataFrame | None" = None
    kernels: "pl.DataFrame | None" = None           # ANATOMY_KERNEL_SCHEMA
    step_kernels: "pl.DataFrame | None" = None      # ANATOMY_STEP_KERNEL_SCHEMA, every step of the profile
    kernel_shapes: "pl.DataFrame | None" = None     # ANATOMY_KERNEL_SHAPE_SCHEMA, steady steps
    gap_places: "pl.DataFrame | None" = None        # ANATOMY_GAP_SCHEMA, every step (None: the parser keeps none)
    # Filled by the pipeline from analysis/stragglers.py, stored with the anatomy (straggler_* tables).
    straggler_steps: "pl.DataFrame | None" = None   # rank, step, wait_ms, imposed_ms, last_arrivals, collectives
    straggler_summary: "dict | None" = None          # report_json without per_step
    # Filled by the pipeline from analysis/components.py, stored in receipt_components (COMPONENT_SCHEMA).
    components: "pl.DataFrame | None" = None
    # The kernel-category rules the anatomy was made under (the pipeline's, as it parsed): their kinds decide what
    # cross-rank analysis matches as collectives; their text and digest are stored with the anatomy.
    category_rules: "CategoryRules | None" = None
