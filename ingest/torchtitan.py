"""torchtitan training logs (pytorch/torchtitan, MetricsProcessor.log).

Step lines, after the launcher prefix `[rank0]:` (torchrun --tee / LOG_RANK), the logger prefix
`[titan] 2025-06-16 22:30:50,322 - root - INFO - ` and ANSI colour codes (unless disable_color_printing):
  step: 10  loss:  9.61  grad_norm:  2.64  memory: 24.65GiB(25.94%)  tps: 5,123  tflops: 240.1  mfu: 24.3%
Older versions have no grad_norm and print `wps` for `tps`. `validate step:` lines are evaluation, not steps.

What the numbers are (torchtitan/components/metrics.py):
  memory  torch memory_stats()["reserved_bytes.all.peak"] / 2**30, and the peak is reset after every
          logged step, so it is the caching allocator's PEAK RESERVED over the logging interval: it goes to
          reserved_bytes (rounded to the 0.01 GiB printed). Allocated memory is not printed.
  tps     tokens per second PER DEVICE over the interval (ntokens / (time_delta * non_data_parallel_size)).
  mfu     percent, from the same tps.
torchtitan prints no step time; step_ms is the wall time between consecutive step lines of one rank,
from the logger's millisecond timestamps, divided by the steps between them. Like torchtitan's own
end_to_end metric it covers the whole interval, including logging, GC and checkpoint/profiler dumps.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import cast

import polars as pl

from receipts.errors import InputError
from receipts.ingest.line_prefix import RANK_LABEL
from receipts.ingest.textlog import LogText, cut_short_note, same_shape
from receipts.schema.model import MemoryPeak, ParsedRun, steps_frame

FORMAT = "torchtitan"
ANSI = r"\x1b\[[0-9;]*m"
STEP = r"(validate )?step:\s*([0-9]+)\s+loss:"
_DETECT = re.compile(r"(?:^|[\s\]-])step:\s*[0-9]+\s+loss:\s*\S+.*\b(?:memory|tps|wps):")
_GIB = 1024 ** 3
_NUM = r"([-+0-9.eE]+|nan|inf)"


def detect(head: list[str]) -> bool:
    return any(_DETECT.search(re.sub(ANSI, "", line)) for line in head if "step:" in line)


def _num(rx: str) -> pl.Expr:
    return pl.col("clean").str.extract(rx, 1).str.replace_all(",", "", literal=True).cast(pl.Float64, strict=False)


def parse(log: LogText) -> ParsedRun:
    candidates = (
        log.frame()
        .filter(pl.col("text").str.contains("step:", literal=True))
        .with_columns(pl.col("text").str.replace_all(ANSI, "").alias("clean"))
        .with_columns(pl.col("clean").str.extract_groups(STEP).alias("g"))
        .filter(pl.col("g").struct.field("2").is_not_null() & pl.col("g").struct.field("1").is_null())
    )
    last_line_parsed = not log.unterminated_last
    if log.unterminated_last and candidates.height and candidates["line"][-1] == log.n_lines:
        # every complete step line ends in 'mfu: x%' (or the '%' of memory in the oldest versions), and a
        # line cut just after 'memory: ...(x%)' also does: it must have its predecessor's shape too
        texts = candidates["clean"].tail(2).to_list()
        last_line_parsed = texts[-1].rstrip().endswith("%") and (len(texts) < 2 or same_shape(*texts))
        if not last_line_parsed:
            candidates = candidates.head(candidates.height - 1)
    if candidates.height == 0:
        raise InputError(log.path, "no torchtitan step lines found; expected `step: N  loss: X  memory: "
                                   "YGiB(Z%)  tps: ...`")
    steps = candidates.with_columns(
        pl.col("g").struct.field("2").cast(pl.Int64, strict=False).alias("step"),
        pl.col("clean").str.extract(RANK_LABEL, 1).cast(pl.Int32, strict=False).alias("rank"),
        _num(r"\bloss:\s*" + _NUM).alias("loss"),
        # '0.00GiB(0.00%)' is printed when the device reports no allocator stats (debug / CPU-side runs):
        # not a measurement, so it is stored as unknown rather than as a zero peak
        pl.when(_num(r"memory:\s*([0-9.]+)GiB") > 0).then((_num(r"memory:\s*([0-9.]+)GiB") * _GIB).round(0))
        .cast(pl.Int64, strict=False).alias("reserved_bytes"),
        _num(r"\b(?:tps|wps):\s*([0-9,.]+)").alias("tokens_per_s"),
        _num(r"mfu:\s*([0-9.]+)%").alias("mfu_pct"),
        pl.col("clean").str.extract(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})", 1)
        .str.strptime(pl.Datetime("ms"), "%Y-%m-%d %H:%M:%S,%3f", strict=False).alias("at"),
    ).filter(pl.col("step").is_not_null()).sort("rank", "line", nulls_last=True)
    steps = steps.with_columns(
        ((pl.col("at").diff().dt.total_milliseconds() / pl.col("step").diff()).over("rank"))
        .cast(pl.Float64).alias("step_ms")
    ).with_columns(
        # a restart within one log (step numbers going back) or duplicated lines give no interval
        # (0 / 0 is NaN, and polars orders NaN above every number: test finiteness, not just > 0)
        pl.when(pl.col("step_ms").is_finite() & (pl.col("step_ms") > 0)).then(pl.col("step_ms")).alias("step_ms")
    )
    memory = tuple(
        MemoryPeak(rank, None, peak)
        for rank, peak in steps.group_by("rank").agg(pl.col("reserved_bytes").max()).sort("rank").iter_rows()
        if peak is not None
    )
    header = _header(log)
    started = cast("datetime | None", steps["at"].drop_nulls().min())
    return ParsedRun(
        source_format=FORMAT,
        format_version=None,
        steps=steps_frame(steps.select("step", "rank", "step_ms", "tokens_per_s", "loss", "mfu_pct",
                                       "reserved_bytes", "line")),
        memory=memory,
        gpu_model=header.get("gpu_model"),
        world_size=header.get("world_size"),
        ended_early=cut_short_note(log, last_line_parsed),
        started_at=started.isoformat() if started is not None else None,
    )


def _header(log: LogText) -> dict:
    """`CUDA capacity: <device name> with 79.10GiB memory` and `Building N-D device mesh with [...], [...]`."""
    facts: dict = {}
    hits = log.frame().filter(pl.col("text").str.contains(r" capacity: .+ with [0-9.]+GiB memory|device mesh with"))
    for text in hits["text"].to_list():
        text = re.sub(ANSI, "", text)
        if m := re.search(r"[A-Z]+ capacity: (.+?) with [0-9.]+GiB memory", text):
            facts.setdefault("gpu_model", m.group(1).strip())
        elif m := re.search(r"device mesh with \[[^\]]*\], \[([0-9, ]+)\]", text):
            world = 1
            for size in m.group(1).split(","):
                world *= int(size)
            facts.setdefault("world_size", world)
    return facts
