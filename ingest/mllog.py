"""MLPerf Training result logs: `:::MLLOG {json}` records (mlcommons/logging), among other output.

Each record has key, value, time_ms (epoch ms), event_type and metadata. What a receipt takes:
  system    submission_platform `<nodes>x<system>` (NVIDIA's systems end in `x<gpus per node><gpu>`, e.g.
            1xE9680x8H100-SXM-80GB); NVIDIA's launch script also prints `Run vars: ... gpus N`
  recipe    scalar POINT_IN_TIME hyperparameters (global_batch_size, opt_*, ...) become features; 6.x's
            tensor/pipeline/context/expert_parallelism as tp/pp/cp/ep, micro_batch_size, and the
            lowest_numerical_precision_in_linear/attn/comm as precision_linear/attn/comm, the lowest of
            them as `precision`
  outcome   run_start / run_stop (metadata.status: success | aborted), time to train
  steps     the finest series the log has, and its unit (provenance step_unit; show prints it):
              step    tracked_stats records carrying `train_step_time` (seconds; NeMo-based results such as
                      llama31_8b / llama31_405b): step = metadata.step, step_ms = that time
              epoch   epoch_start/epoch_stop pairs by metadata.epoch_num (ResNet, RetinaNet): step = epoch,
                      step_ms = the epoch's time (evaluation is outside it)
              block   block_start/block_stop pairs in log order, each stop closing the latest open start
                      (keyed by samples_count or first_epoch_num, whose values differ between a block's start
                      and stop in some benchmarks): step = the block's ordinal, step_ms = its time
              segment tracked_stats records (BERT): step = metadata.epoch_num as the benchmark numbers
                      its progress (samples for BERT), step_ms = time since the previous boundary
                      (run/block/epoch start, eval_stop or tracked_stats), so evaluation is outside it
            an epoch or block that run_stop cut short (its stop logged after run_stop) is a tail, never steady
            state (ParsedRun.tail_step); a single block covering the whole run is no series at all: time to
            train (run_start -> run_stop) is an MLPerf receipt's headline.
            tracked_stats throughput is samples/s, not tokens/s, so tokens_per_s stays empty.
  results   train_loss, eval_accuracy and any key logged more than once with different values are
            measurements, not recipe features (they never count as recipe drift).
  machine   `:::SYSJSON {json}` (the system description the submission embeds): accelerator model and
            accelerators per node x nodes, preferred over the submission_platform name.
Records repeated by several ranks are kept once (first occurrence).
"""

from __future__ import annotations

import json
import re

import polars as pl

from receipts.errors import InputError
from receipts.ingest.textlog import LogText, cut_short_note
from receipts.schema.model import ParsedRun, epoch_iso, steps_frame

FORMAT = "mllog"
RECORD = r":::MLLOG (\{.*)$"
_DETECT = re.compile(r":::MLLOG \{")
_PATHS = {
    "key": "$.key", "time_ms": "$.time_ms", "event_type": "$.event_type", "value": "$.value",
    "epoch_num": "$.metadata.epoch_num", "first_epoch_num": "$.metadata.first_epoch_num",
    "status": "$.metadata.status", "samples_count": "$.metadata.samples_count", "meta_step": "$.metadata.step",
    "train_step_time": "$.value.train_step_time",
}
_NOT_FEATURES = {"cache_clear", "seed", "data_file", "weights_initialization", "eval_accuracy", "tracked_stats",
                 "train_samples", "eval_samples", "init_start", "init_stop", "run_start", "run_stop",
                 "train_loss", "eval_loss", "eval_error", "status"}
SYSJSON = re.compile(r":::SYSJSON (\{.*)$")
# MLPerf Training 6.x discloses the parallel layout and the lowest numerical precisions: the receipt's own
# names for them (the degrees as Megatron's regime spells them), so a layout or precision change is drift.
_V6_FEATURES = {
    "tensor_parallelism": "tp", "pipeline_parallelism": "pp", "context_parallelism": "cp",
    "expert_parallelism": "ep", "micro_batch_size": "micro_batch_size",
    "lowest_numerical_precision_in_linear": "precision_linear",
    "lowest_numerical_precision_in_attn": "precision_attn",
    "lowest_numerical_precision_in_comm": "precision_comm",
}
_PRECISION_BITS = {"fp4": 4, "mxfp4": 4, "nvfp4": 4, "fp6": 6, "mxfp6": 6, "fp8": 8, "mxfp8": 8, "e4m3": 8, "e5m2": 8,
                   "int8": 8, "bfloat16": 16, "bf16": 16, "float16": 16, "fp16": 16, "tf32": 19, "float32": 32,
                   "fp32": 32}
_BOUNDARIES = ("run_start", "block_start", "epoch_start", "eval_stop", "tracked_stats")


def detect(head: list[str]) -> bool:
    return any(_DETECT.search(line) for line in head)


def parse(log: LogText) -> ParsedRun:
    records = (
        log.frame()
        .filter(pl.col("text").str.contains(":::MLLOG", literal=True))
        .with_columns(pl.col("text").str.extract(RECORD, 1).alias("payload"))
        .filter(pl.col("payload").is_not_null())
    )
    last_line_parsed = not log.unterminated_last
    if log.unterminated_last and records.height and records["line"][-1] == log.n_lines:
        last_line_parsed = _loads(records["payload"][-1]) is not None
        if not last_line_parsed:
            records = records.head(records.height - 1)  # a killed writer's half record
    if records.height == 0:
        raise InputError(log.path, "no `:::MLLOG {json}` records found; expected MLPerf logging output")
    events = records.select(
        "line", *[pl.col("payload").str.json_path_match(p).alias(name) for name, p in _PATHS.items()]
    )
    events = events.with_columns(pl.col("time_ms").cast(pl.Float64, strict=False).cast(pl.Int64, strict=False),
                                 pl.col("epoch_num").cast(pl.Int64, strict=False),
                                 pl.col("first_epoch_num").cast(pl.Int64, strict=False))
    bad = events.filter(pl.col("key").is_null() | pl.col("time_ms").is_null())
    if bad.height:
        line = bad["line"][0]
        raise InputError(log.path, "malformed :::MLLOG record; expected one JSON object with 'key' and "
                                   "'time_ms' (epoch milliseconds, a number)", line=line)
    first = {k: v for k, v in events.group_by("key", maintain_order=True).first()
             .select("key", "value").iter_rows()}
    steps, unit, tail = _step_series(events)
    warnings: list[str] = []
    if unit in ("epoch", "block") and steps.height == 1:
        warnings.append(f"one {unit} covers the whole run: no steady-state series; time to train is the headline")
        steps = steps.clear()

    run_start = events.filter(pl.col("key") == "run_start").head(1)
    run_stop = events.filter(pl.col("key") == "run_stop").head(1)
    provenance: dict = {f"mlperf_{k}": first[f"submission_{k}"] for k in
                        ("benchmark", "org", "division", "status", "platform") if first.get(f"submission_{k}")}
    provenance["step_unit"] = unit
    ended_early = cut_short_note(log, last_line_parsed)
    if run_stop.height == 0:
        ended_early = ended_early or (f"no run_stop record: the run ended before MLPerf's end marker "
                                      f"(last record at line {events['line'][-1]})")
    else:
        status = run_stop["status"][0]
        provenance["run_status"] = status
        if status and status != "success":
            ended_early = ended_early or f"run_stop at line {run_stop['line'][0]} has status {status!r}"
        if run_start.height:
            provenance["time_to_train_ms"] = run_stop["time_ms"][0] - run_start["time_ms"][0]
    nodes, per_node, model = _platform(first.get("submission_platform"), log)
    system = _sysjson(log)
    if system:
        provenance["mlperf_system"] = system.get("system_name")
        model = system.get("accelerator_model_name") or model
        per_node = _int(system.get("accelerators_per_node")) or per_node
        nodes = _int(system.get("number_of_nodes")) or nodes
    return ParsedRun(
        source_format=FORMAT,
        format_version=None,
        steps=steps_frame(steps),
        features=_features(events),
        provenance=provenance,
        gpu_model=model,
        gpu_count=nodes * per_node if nodes and per_node else None,
        topology={"nodes": nodes, "gpus_per_node": per_node} if nodes else {},
        ended_early=ended_early,
        started_at=_iso(run_start["time_ms"][0]) if run_start.height else None,
        tail_step=tail,
        warnings=tuple(warnings),
    )


def _int(text) -> int | None:
    return int(text) if isinstance(text, (str, int)) and re.fullmatch(r"[0-9]{1,6}", str(text)) else None


def _sysjson(log: LogText) -> dict:
    """The first `:::SYSJSON {...}` object (NVIDIA's scripts echo it, sometimes with trailing text)."""
    hit = log.frame().filter(pl.col("text").str.contains(":::SYSJSON {", literal=True)).head(1)
    if hit.height == 0 or not (m := SYSJSON.search(hit["text"][0])):
        return {}
    try:
        obj, _ = json.JSONDecoder().raw_decode(m.group(1))
    except ValueError:
        return {}
    return {k: v for k, v in obj.items() if isinstance(v, str)} if isinstance(obj, dict) else {}


def _iso(time_ms: int) -> str | None:
    return epoch_iso(time_ms / 1000)


def _loads(payload: str):
    try:
        return json.loads(payload)
    except ValueError:  # JSONDecodeError, or an integer past Python's 4,300-digit limit
        return None


def _pairs(events: pl.DataFrame, start: str, stop: str, by: str) -> pl.DataFrame:
    begin = events.filter(pl.col("key") == start).unique(by, keep="first").select(by, pl.col("time_ms").alias("t0"))
    end = events.filter(pl.col("key") == stop).unique(by, keep="first").select(by, "time_ms", "line")
    return (end.join(begin, on=by).drop_nulls(by)
            .select(pl.col(by).alias("step"), (pl.col("time_ms") - pl.col("t0")).cast(pl.Float64).alias("step_ms"),
                    "line").sort("step"))


def _blocks(events: pl.DataFrame) -> pl.DataFrame:
    """block_start/block_stop in log order, each stop closing the latest open start (their keys need not
    match: llama2_70b_lora starts a block at samples_count 0 and stops it at 1536). Repeats of one record
    by several ranks (same key and time) are kept once."""
    marks = (events.filter(pl.col("key").is_in(["block_start", "block_stop"]))
             .unique(["key", "time_ms", "samples_count", "first_epoch_num"], keep="first", maintain_order=True))
    open_at: list[int] = []
    rows: list[tuple[int, float, int]] = []
    for key, t, line in marks.select("key", "time_ms", "line").iter_rows():
        if key == "block_start":
            open_at.append(t)
        elif open_at:
            rows.append((len(rows), float(t - open_at.pop()), line))
    return pl.DataFrame(rows, schema={"step": pl.Int64, "step_ms": pl.Float64, "line": pl.Int64}, orient="row")


def _tail(series: pl.DataFrame, events: pl.DataFrame) -> int | None:
    """The last epoch/block when run_stop cut it short: its stop is logged after run_stop."""
    stop_line = events.filter(pl.col("key") == "run_stop")["line"].min()
    if stop_line is None or series.height < 2:
        return None
    last = series.sort("line").row(-1, named=True)
    return int(last["step"]) if last["line"] > stop_line else None


def _step_series(events: pl.DataFrame) -> tuple[pl.DataFrame, str, int | None]:
    per_step = (events.filter((pl.col("key") == "tracked_stats") & pl.col("train_step_time").is_not_null())
                .with_columns(pl.col("train_step_time").cast(pl.Float64, strict=False),
                              pl.col("meta_step").cast(pl.Float64, strict=False).cast(pl.Int64, strict=False))
                .filter(pl.col("train_step_time").is_not_null() & pl.col("meta_step").is_not_null())
                .unique("meta_step", keep="first", maintain_order=True)
                .select(pl.col("meta_step").alias("step"), (pl.col("train_step_time") * 1000.0).alias("step_ms"), "line"))
    if per_step.height >= 2:
        return per_step, "step", None
    epochs = _pairs(events, "epoch_start", "epoch_stop", "epoch_num")
    if epochs.height >= 2:
        return epochs, "epoch", _tail(epochs, events)
    blocks = _blocks(events)
    if blocks.height >= 2:
        return blocks, "block", _tail(blocks, events)
    stop_line = events.filter(pl.col("key") == "run_stop")["line"].min()
    timeline = events.filter(pl.col("key").is_in(_BOUNDARIES))
    if stop_line is not None:
        timeline = timeline.filter(pl.col("line") < stop_line)  # the closing summary is not a segment
    segments = (
        timeline.with_columns(pl.col("time_ms").shift(1).alias("since"))
        .filter((pl.col("key") == "tracked_stats") & pl.col("epoch_num").is_not_null())
        .unique("epoch_num", keep="first", maintain_order=True)
        .select(pl.col("epoch_num").alias("step"), (pl.col("time_ms") - pl.col("since")).cast(pl.Float64)
                .alias("step_ms"), "line")
    )
    if segments.height:
        return segments, "segment", None
    return (epochs, "epoch", None) if epochs.height else (blocks, "block", None)


def _features(events: pl.DataFrame) -> dict:
    points = events.filter((pl.col("event_type") == "POINT_IN_TIME") & ~pl.col("key").is_in(_NOT_FEATURES)
                           & ~pl.col("key").str.starts_with("submission_"))
    # A key logged with more than one value is a measurement over the run, not a setting of the recipe.
    varying = points.group_by("key").agg(pl.col("value").n_unique().alias("n")).filter(pl.col("n") > 1)["key"].to_list()
    points = points.filter(~pl.col("key").is_in(varying)).unique("key", keep="first", maintain_order=True)
    features = {}
    for key, raw in points.select("key", "value").iter_rows():
        value = _loads(raw) if raw is not None else None
        if value is None and raw is not None:
            value = raw  # json_path_match gives strings unquoted
        if isinstance(value, (int, float, str, bool)):
            features[_V6_FEATURES.get(key, key)] = value
    precisions = [features[k] for k in ("precision_linear", "precision_attn", "precision_comm") if k in features]
    if precisions:  # the run's numerical precision in one word: its lowest (the submission's own disclosure)
        features["precision"] = min(precisions, key=lambda p: _PRECISION_BITS.get(str(p).lower(), 99))
    return features


def _platform(platform: str | None, log: LogText) -> tuple[int | None, int | None, str | None]:
    nodes = per_node = model = None
    if platform and (m := re.match(r"^(\d+)x(.+)$", platform)):
        nodes = int(m.group(1))
        if g := re.search(r"(\d+)x?((?:NVIDIA-)?(?:[ABHLV]|GB|MI)\d{2,3}[A-Z]?(?:-[A-Za-z0-9]+)*)$", m.group(2)):
            per_node, model = int(g.group(1)), g.group(2)
    if per_node is None:
        # NVIDIA's run_and_time.sh echoes `Run vars: id <job> gpus <n> mparams ...` and its bind script
        # `num_gpus=<n> num_sockets = 2 num_nodes=2 ...` (there num_nodes counts NUMA nodes, not hosts)
        hit = log.frame().filter(pl.col("text").str.contains(r"^Run vars: .*\bgpus [0-9]+|^num_gpus=[0-9]+")).head(1)
        if hit.height and (m := re.search(r"\bgpus (\d+)\b|^num_gpus=(\d+)", hit["text"][0])):
            per_node = int(m.group(1) or m.group(2))
    return nodes, per_node, model
