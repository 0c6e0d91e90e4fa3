"""modded-nanogpt speedrun logs (KellerJordan/modded-nanogpt records/*.txt).

A record log is the training script's own source, a `nvidia-smi` table, then lines such as
  step:0/1670 val_loss:10.8258 train_time:0ms step_avg:0.02ms
  step:1/1670 train_time:435ms step_avg:434.72ms                  (2025 records)
  step:13/6000 train_loss:9.8811 train_time:2049ms step_avg:682.95ms   (2024 records)
and at the end `peak memory allocated: 32712 MiB reserved: 48456 MiB` (2024: `peak memory consumption:
X MiB`, allocated only; both are torch max_memory_* // 2**20, so bytes are exact to within 1 MiB).

train_time is a clock that stops during validation and checkpointing, and by design leaves out the
warm-up: 2024 records zero it when the loop reaches step 10 (so train_time drops at step:11 and steps
1-10 hold compile time), 2025 records run their warm-up steps before the clock starts and never log
them. step_ms is the growth of train_time between consecutive train lines over the steps between them;
where the clock was zeroed, the new reading itself is the time since the reset, and the steps before
it are reported as a 'warmup' phase. Only train lines are differenced: their reading (approx_time) is
taken without a device sync while the validation line's comes after one, so anchoring on validation
lines would drop the queued GPU work of the step before each validation from the series;
train-to-train deltas telescope to the final train reading instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import polars as pl

from receipts.errors import InputError
from receipts.ingest.spool import RowSpool
from receipts.ingest.textlog import ChunkEnd, LogChunk, LogText, cut_short_note
from receipts.schema.model import MemoryPeak, ParsedRun, steps_frame

FORMAT = "modded-nanogpt"
STEP = r"^step:([0-9]+)/([0-9]+) (?:val_loss:([^ ]+) |train_loss:([^ ]+) )?train_time:([0-9.]+)ms"
# The script's own source opens the log, so its print statement is the earliest sign of the format.
_DETECT = re.compile(r"^step:[0-9]+/[0-9]+ .*train_time:[0-9.]+ms|step:\{[^}]*\}/\{[^}]*\}.*train_time:\{")
GPU_ROW = r"^\|\s+([0-9]+)\s+([A-Za-z][^|]*?)\s+(?:On|Off)\s+\|\s+[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:"
PEAK = r"^peak memory (?:allocated|consumption): ([0-9]+) MiB(?:\s+reserved: ([0-9]+) MiB)?"
_MIB = 1024 * 1024


def detect(head: list[str]) -> bool:
    return any(_DETECT.search(line) for line in head)


def parse(log: LogText) -> ParsedRun:
    return parse_chunks(log.path, log.chunks())


def _step_rows(frame: pl.DataFrame) -> pl.DataFrame:
    return (
        frame.filter(pl.col("text").str.starts_with("step:"))
        .with_columns(pl.col("text").str.extract_groups(STEP).alias("g")).unnest("g")
        .filter(pl.col("1").is_not_null())
        .select(
            "line",
            pl.col("1").cast(pl.Int64, strict=False).alias("step"),
            pl.col("2").cast(pl.Int64, strict=False).alias("total"),
            pl.col("3").is_not_null().alias("is_val"),
            pl.col("4").cast(pl.Float64, strict=False).alias("loss"),
            pl.col("5").cast(pl.Float64, strict=False).alias("train_ms"),
        )
        .filter(pl.col("step").is_not_null())  # a step number past 2^63: a damaged line, not a step
    )


def parse_chunks(path: Path, chunks: Iterable[LogChunk], spill: Path | None = None) -> ParsedRun:
    """Each chunk is reduced to its step numbers and the few header lines; the steps are differenced once
    all are in (a difference spans chunks), streaming over them. `spill`: a directory the step rows go to
    as they are read (ingest/spool.py), else they are held in memory."""
    spool = RowSpool(spill, FORMAT)
    gpu_parts: list[pl.DataFrame] = []
    info_parts: list[pl.DataFrame] = []
    last_line_parsed = True
    end: ChunkEnd | None = None
    for chunk in chunks:
        frame = chunk.frame
        if chunk.last and chunk.unterminated_last and frame.height:
            # complete step lines end in 'ms' and memory lines in 'MiB'; a prefix of either may parse wrongly
            last_line_parsed = frame["text"][-1].rstrip().endswith(("ms", "MiB"))
            if not last_line_parsed:
                frame = frame.head(frame.height - 1)
        spool.add(_step_rows(frame))
        gpu_parts.append(_gpu_rows(frame))
        info_parts.append(_info_rows(frame))
        end = chunk.as_end()
    assert end is not None, "a log has at least one chunk"
    lines = spool.rows()
    if spool.last is None or lines.filter(~pl.col("is_val")).select(pl.len()).collect(engine="streaming").item() == 0:
        raise InputError(path, "no modded-nanogpt step lines found; expected `step:N/M train_time:Tms "
                               "step_avg:Sms` (with val_loss: or train_loss: on some lines)")
    last = spool.last
    lines = lines.filter(~pl.col("is_val"))
    # The clock starts at 0 before the first step, so the first reading is measured from (step 0, 0 ms).
    d_ms = pl.col("train_ms") - pl.col("train_ms").shift(1, fill_value=0.0)
    d_step = pl.col("step") - pl.col("step").shift(1, fill_value=0)
    lines = lines.with_columns(
        (d_ms < 0).alias("reset"),
        pl.when(d_step <= 0).then(None)
        .when(d_ms < 0).then(pl.col("train_ms") / d_step)
        .otherwise(d_ms / d_step).alias("step_ms"),
    )
    steps = lines
    first_step, first_reset = steps.select(pl.col("step").first(), pl.col("step").filter(pl.col("reset")).first()
                                           .alias("reset")).collect(engine="streaming").row(0)
    phases: tuple = ()
    if first_reset is not None:
        phases = (("warmup", first_step, first_reset - 1),)

    header = _header(pl.concat(gpu_parts), pl.concat(info_parts))
    return ParsedRun(
        source_format=FORMAT,
        format_version=None,
        steps=spool.settle(steps_frame(steps.select("step", "step_ms", "loss", "line"))),
        phases=phases,
        memory=header.pop("memory", ()),
        software=header.pop("software", {}),
        gpu_model=header.get("gpu_model"),
        gpu_count=header.get("gpu_count"),
        ended_early=cut_short_note(end, last_line_parsed) or _short_of_total(last),
        provenance={"total_steps": last["total"]},
    )


def _short_of_total(last: dict) -> str | None:
    if last["total"] is not None and last["step"] < last["total"]:
        return f"last step line (line {last['line']}) is step {last['step']} of {last['total']}"
    return None


def _gpu_rows(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.filter(pl.col("text").str.starts_with("|")).select(
        pl.col("text").str.extract_groups(GPU_ROW).alias("g")).unnest("g").drop_nulls()


def _info_rows(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.filter(pl.col("text").str.contains(r"Driver Version:|^Running [Pp]y[Tt]orch |^peak memory ")).select("text")


def _header(gpus: pl.DataFrame, info: pl.DataFrame) -> dict:
    facts: dict = {"software": {}}
    if gpus.height:
        facts["gpu_model"] = gpus["2"][0]
        facts["gpu_count"] = gpus["1"].n_unique()
    for text in info["text"].to_list():
        if m := re.search(r"Driver Version: ([0-9.]+)", text):
            facts["software"].setdefault("nvidia_driver", m.group(1))
        elif m := re.search(r"^Running [Pp]y[Tt]orch (\S+) compiled for CUDA (\S+)", text):
            facts["software"].update(torch=m.group(1), cuda=m.group(2))
        elif m := re.search(PEAK, text):
            reserved = int(m.group(2)) * _MIB if m.group(2) else None
            facts["memory"] = (MemoryPeak(None, int(m.group(1)) * _MIB, reserved),)
    return facts
