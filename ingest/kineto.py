"""PyTorch profiler (Kineto) Chrome traces, one file per rank, into step-time anatomy.

Reading is ingest/kineto_stream.py: streamed, keeping only the events the anatomy needs.

Time: `ts`/`dur` are float microseconds. With `baseTimeNanoseconds` (Kineto PRs #890/#919/#928)
an event is at base + ts*1000 ns; without it `ts` is taken as the absolute clock. Each rank's time
base is recorded and a warning is raised when they differ: ranks never silently share a clock.

Steps (Anatomy.attribution): a GPU activity belongs to ProfilerStep#N when its launching runtime or
driver call (same correlation id) starts inside that step's window on any thread of the launching
process; otherwise when the activity itself starts inside a step window of its rank; otherwise it
is unattributed (counted, kept in raw_events, left out of the rows).

Idle is measured on the GPU timeline the way HTA's temporal breakdown measures it (HTA 0.5.0
get_temporal_breakdown: span from the first GPU start to the last GPU end, minus the union of GPU
work). Per step, the GPU window of step N runs from the end of step N-1's GPU work (the start of
step N's own first activity for the first step) to the end of step N's own work: the gap the GPU
spends waiting for step N's launches is charged to step N, and the windows tile HTA's span. The
first profiled step per rank is marked warmup: it carries profiler start-up (CUPTI buffers, first
allocations) and, in a kineto schedule, follows straight on the warmup phase.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import cast

import polars as pl

from receipts.errors import InputError
from receipts.ingest.intervals import anatomy_rows, kernel_steps
from receipts.ingest.kineto_stream import KINETO_KEYS, Trace, stream_trace
from receipts.schema.categories import CategoryRules
from receipts.schema.model import (ANATOMY_NVTX_SCHEMA, ANATOMY_ROW_SCHEMA, ANATOMY_STEP_SCHEMA, Anatomy,
                                   IdentityClaim, epoch_iso)

_MEMCPY_KIND = {"HtoD": "memcpy_h2d", "DtoH": "memcpy_d2h", "DtoD": "memcpy_d2d", "PtoP": "memcpy_p2p"}
_MEMCPY_NAME = re.compile(r"(HtoD|DtoH|DtoD|PtoP)")

def parse_dir(path: Path, *, rules: CategoryRules, keep_raw: bool = False) -> Anatomy:
    """A folder of *.pt.trace.json(.gz) / *.json(.gz), one file per rank, is one run."""
    path = Path(path)
    if not path.is_dir():
        raise InputError(path, "is not a directory of PyTorch profiler traces")
    natural = lambda p: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)]  # noqa: E731
    files = sorted((p for p in path.iterdir() if p.is_file() and p.name.endswith((".json", ".json.gz"))), key=natural)
    if not files:
        raise InputError(path, "no PyTorch profiler traces (*.pt.trace.json[.gz] or *.json[.gz]) in this folder")
    return parse_files(files, rules=rules, keep_raw=keep_raw)


def parse_files(paths: list[Path], *, rules: CategoryRules, keep_raw: bool = False) -> Anatomy:
    """One run: one Kineto trace per rank, in rank order when the traces do not say their rank."""
    if not paths:
        raise InputError(".", "no trace files given; expected one PyTorch profiler trace per rank")
    traces = [stream_trace(Path(p)) for p in paths]
    for t in traces:
        if t.kineto_events == 0 and not any(k in t.meta for k in KINETO_KEYS):
            raise InputError(t.path, "a Chrome trace without PyTorch profiler (Kineto) markers: no schemaVersion, "
                                     "deviceProperties or distributedInfo and no cpu_op/kernel/cuda_runtime events "
                                     "(a trace from another tool?)")
    warnings: list[str] = []
    ranks = _ranks(traces, warnings)
    world_size = _world_size(traces, warnings)
    bases = {t.path.name: _time_base(t) if t.meta.get("baseTimeNanoseconds") is not None else None for t in traces}
    if len(set(bases.values())) > 1:
        warnings.append("ranks do not share a time base (baseTimeNanoseconds: " + ", ".join(
            f"{n}={b if b is not None else 'absent'}" for n, b in bases.items())
            + "); each rank is put on its own base + ts clock and cross-rank alignment assumes those agree")
    gpu, launch, steps, notes = (pl.concat(frames, how="vertical") for frames in zip(
        *(_frames(t, r) for t, r in zip(traces, ranks))))
    gpu = _categorise(gpu, rules)
    gpu, counts = _attribute(gpu, launch, steps)
    gpu_ranks = set(gpu["rank"].unique().to_list())
    step_ranks = set(steps["rank"].unique().to_list())
    for t, r in zip(traces, ranks):
        if r not in gpu_ranks:
            warnings.append(f"rank {r} ({t.path.name}): no GPU activity (CPU-only profile); no GPU anatomy for it")
        if r not in step_ranks:
            warnings.append(f"rank {r} ({t.path.name}): no ProfilerStep#N marker; its whole profiled window is one "
                            "step (null) spanning its first to last GPU activity")
    if counts["fallback"]:
        warnings.append(f"{counts['fallback']} GPU activities had no launch inside a step window of their process and "
                        "were attributed by their own GPU start time")
    if counts["unattributed"]:
        warnings.append(f"{counts['unattributed']} GPU activities fell outside every ProfilerStep window "
                        "(unattributed: kept in raw events, not in the anatomy rows)")
    events = gpu.filter(pl.col("step").is_not_null() | ~pl.col("rank").is_in(list(step_ranks)))
    spans = _spans(events, steps)
    rows, per_step = anatomy_rows(events.select("rank", "step", "category", "start_ns", "end_ns"), spans)
    step_frame = _step_frame(steps, spans, per_step)
    warm = step_frame.select("rank", "step", "warmup")
    rows = rows.join(warm, on=["rank", "step"], how="left", nulls_equal=True).with_columns(pl.col("warmup").fill_null(False))
    nvtx = (notes.group_by("rank", pl.col("name").alias("range_name"))
            .agg(pl.len().alias("count"), (pl.col("dur_ns").sum() / 1e6).alias("total_ms"))
            .with_columns(pl.lit(None, dtype=pl.Float64).alias("gpu_ms")).sort("rank", "range_name"))
    models = [m for m in (_gpu_model(t) for t in traces) if m]
    if len(set(models)) > 1:
        warnings.append("ranks report different GPU models: " + ", ".join(sorted(set(models))))
    software = {}
    for key in ("cuda_runtime_version", "cuda_driver_version", "cupti_version", "hip_runtime_version",
                "hip_driver_version", "roctracer_version"):
        if traces[0].meta.get(key) is not None:
            software[key] = str(traces[0].meta[key])
    dist = traces[0].meta.get("distributedInfo") or {}
    for key in ("backend", "nccl_version"):
        if isinstance(dist, dict) and dist.get(key) is not None:
            software[f"distributed_{key}" if key == "backend" else key] = str(dist[key])
    hostname = next((str(t.meta[k]) for t in traces for k in ("hostname", "host_name", "hostName") if t.meta.get(k)), None)
    schema = traces[0].meta.get("schemaVersion")
    # With baseTimeNanoseconds on every rank, timestamps are epoch ns: the capture started at its first event.
    first_ns = steps["start_ns"].min() if steps.height else gpu["start_ns"].min() if gpu.height else None
    started_at = (epoch_iso(cast(int, first_ns) / 1e9)
                  if first_ns is not None and all(b for b in bases.values()) else None)
    return Anatomy(
        source_format="kineto",
        schema_version=None if schema is None else str(schema),
        rows=_typed(rows, ANATOMY_ROW_SCHEMA),
        steps=_typed(step_frame, ANATOMY_STEP_SCHEMA),
        nvtx=_typed(nvtx, ANATOMY_NVTX_SCHEMA),
        step_marker="ProfilerStep#N (Kineto cpu_op/user_annotation)" if step_ranks else
                    "none: no ProfilerStep#N in the trace; the whole profiled window is one step (null)",
        attribution="correlation id: the launching cuda_runtime/cuda_driver call inside ProfilerStep#N on any thread "
                    "of its process; else the activity's own GPU start inside a step window; else unattributed",
        unattributed=counts["unattributed"],
        claim=IdentityClaim(hostname=hostname),
        gpu_model=max(set(models), key=models.count) if models else None,
        gpu_count=_gpus_on_host(traces) or len(gpu_ranks) or None,
        world_size=world_size,
        ranks_traced=len(traces),
        gpus_on_host=_gpus_on_host(traces), started_at=started_at,
        software=software,
        warnings=tuple(warnings),
        events=events.filter(pl.col("rank").is_not_null()).select("rank", "step", "category", "start_ns", "end_ns"),
        kernel_steps=kernel_steps(events.filter(pl.col("kind") == "kernel")),
        raw_events=gpu.select("rank", "step", "category", "name", "start_ns", "end_ns", "device", "stream",
                              pl.col("corr").alias("correlation"), "launch_ns", "attributed_by") if keep_raw else None,
    )


def _typed(frame: pl.DataFrame, schema: dict) -> pl.DataFrame:
    return frame.select([pl.col(c).cast(t) if c in frame.columns else pl.lit(None, dtype=t).alias(c)
                         for c, t in schema.items()])


def _ranks(traces: list[Trace], warnings: list[str]) -> list[int]:
    """distributedInfo.rank; absent, the file's position in the run, said out loud (HTA PR #179)."""
    ranks: list[int] = []
    seen: dict[int, str] = {}
    for i, t in enumerate(traces):
        dist = t.meta.get("distributedInfo")
        given = dist.get("rank") if isinstance(dist, dict) else None
        stated = _small_int(given)
        rank = cast(int, given) if stated else i
        if not stated:
            warnings.append(f"{t.path.name}: no distributedInfo.rank; rank {i} taken from the file's position "
                            "in the run (not a default of 0)")
        if rank in seen:
            raise InputError(t.path, f"rank {rank} also comes from {seen[rank]}; a run takes one trace per rank")
        seen[rank] = t.path.name
        ranks.append(rank)
    return ranks


def _world_size(traces: list[Trace], warnings: list[str]) -> int | None:
    given = [d.get("world_size") for t in traces if isinstance(d := t.meta.get("distributedInfo"), dict)]
    sizes = {s for s in given if isinstance(s, int) and _small_int(s) and s > 0}
    if len(sizes) > 1:
        warnings.append(f"traces disagree on distributedInfo.world_size: {sorted(sizes)}")
    if not sizes:
        warnings.append("world size unknown: no distributedInfo.world_size in the traces")
    return max(sizes) if sizes else None


def _small_int(value) -> bool:
    """A rank or world size as a trace states it: an integer in [0, 2^31) (ranks are int32 columns)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31


def _gpus_on_host(traces: list[Trace]) -> int | None:
    """The GPUs a rank's process could see (deviceProperties), the largest list among the traces: a rank-0
    trace of a 64-rank job on 8-GPU hosts lists 8, not 1."""
    counts = [len([p for p in props if isinstance(p, dict)]) for t in traces
              if isinstance(props := t.meta.get("deviceProperties"), list)]
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
                       "device", "stream", "corr")
    launch = (t.launch.select(r, "corr", pl.col("pid").alias("l_pid"), _ns("ts", base).alias("l_ns"))
              .unique(["rank", "corr"], keep="first"))
    steps = (t.step.select(r, "step", "pid", _ns("ts", base).alias("start_ns"), dur_ns.alias("dur_ns"))
             .with_columns((pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"))
             .sort("start_ns").unique(["rank", "step"], keep="first", maintain_order=True))
    notes = t.note.select(r, "name", "pid", _ns("ts", base).alias("start_ns"), dur_ns.alias("dur_ns"))
    return gpu, launch, steps, notes


def _categorise(gpu: pl.DataFrame, rules: CategoryRules) -> pl.DataFrame:
    """Kernels by the category rules (NCCL kernels land in nccl_*); memcpy by direction; memset."""
    mapping = {}
    for name, kind in gpu.select("name", "kind").unique().iter_rows():
        if kind == "kernel":
            mapping[(name, kind)] = rules.classify(name)
        elif kind == "memset":
            mapping[(name, kind)] = "memset"
        else:  # 'Memcpy HtoD (Pageable -> Device)'; HtoH and unknown directions have no category: other
            m = _MEMCPY_NAME.search(name)
            mapping[(name, kind)] = _MEMCPY_KIND[m.group(1)] if m else "other"
    lookup = pl.DataFrame({"name": [k[0] for k in mapping], "kind": [k[1] for k in mapping],
                           "category": list(mapping.values())}, schema={"name": pl.Utf8, "kind": pl.Utf8, "category": pl.Utf8})
    return gpu.join(lookup, on=["name", "kind"], how="left")


def _attribute(gpu: pl.DataFrame, launch: pl.DataFrame, steps: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, int]]:
    """Step of each GPU activity: by its launch's CPU time on the launching process, else its own start."""
    g = gpu.with_row_index("_i").join(launch, on=["rank", "corr"], how="left")
    by_launch = (
        g.filter(pl.col("l_ns").is_not_null()).sort("l_ns")
        .join_asof(steps.select("rank", pl.col("pid").alias("l_pid"), pl.col("start_ns").alias("_s"),
                                pl.col("end_ns").alias("_e"), pl.col("step").alias("_by_launch")).sort("_s"),
                   left_on="l_ns", right_on="_s", by=["rank", "l_pid"], strategy="backward", check_sortedness=False)
        .filter(pl.col("l_ns") < pl.col("_e")).select("_i", "_by_launch"))
    by_start = (
        g.sort("start_ns")
        .join_asof(steps.select("rank", pl.col("start_ns").alias("_s"), pl.col("end_ns").alias("_e"),
                                pl.col("step").alias("_by_start")).sort("_s"),
                   left_on="start_ns", right_on="_s", by="rank", strategy="backward", check_sortedness=False)
        .filter(pl.col("start_ns") < pl.col("_e")).select("_i", "_by_start"))
    g = g.join(by_launch, on="_i", how="left").join(by_start, on="_i", how="left").sort("_i")
    stepped = pl.col("rank").is_in(steps["rank"].unique().to_list())
    counts = {
        "fallback": g.filter(pl.col("_by_launch").is_null() & pl.col("_by_start").is_not_null()).height,
        "unattributed": g.filter(stepped & pl.col("_by_launch").is_null() & pl.col("_by_start").is_null()).height,
    }
    g = g.with_columns(pl.coalesce("_by_launch", "_by_start").alias("step"),
                       pl.when(pl.col("_by_launch").is_not_null()).then(pl.lit("launch"))
                       .when(pl.col("_by_start").is_not_null()).then(pl.lit("gpu_start")).alias("attributed_by"))
    return g.drop("_i", "_by_launch", "_by_start", "l_pid").rename({"l_ns": "launch_ns"}), counts


def _spans(events: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """GPU window per (rank, step) for idle: from the end of the previous step's GPU work (its own first
    activity for the first step) to the end of its own work, so the windows tile HTA's first-to-last span."""
    own = events.group_by("rank", "step").agg(pl.col("start_ns").min().alias("_first"), pl.col("end_ns").max().alias("_last"))
    busy_ranks = events["rank"].unique().to_list()
    stepped = (
        steps.filter(pl.col("rank").is_in(busy_ranks)).select("rank", "step", "start_ns")
        .join(own, on=["rank", "step"], how="left").sort("rank", "start_ns")
        .with_columns(pl.col("_last").cum_max().over("rank").alias("_end"))
        .with_columns(pl.col("_end").forward_fill().over("rank"))
        .with_columns(pl.col("_end").shift(1).over("rank").alias("_prev"))
        .with_columns(pl.coalesce("_prev", "_first", "start_ns").alias("span_start_ns"))
        .with_columns(pl.coalesce("_end", "span_start_ns").alias("span_end_ns")))
    whole = (own.filter(pl.col("step").is_null() & ~pl.col("rank").is_in(steps["rank"].unique().to_list()))
             .select("rank", "step", pl.col("_first").alias("span_start_ns"), pl.col("_last").alias("span_end_ns")))
    return pl.concat([stepped.select("rank", "step", "span_start_ns", "span_end_ns"), whole])


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
