"""Megatron-LM, NeMo (Megatron core) and Megatron-DeepSpeed training logs.

Evidence read (everything else in the log is left alone):
  iteration   ` [2024-04-06 02:55:45] iteration        2/     100 | consumed samples: 256 | elapsed time per
              iteration (ms): 5630.1 | throughput per GPU (TFLOP/s/GPU): 231.9 | ... | lm loss: 2.02E+00 | ...`
              Megatron-DeepSpeed adds `consumed tokens:` and has no timestamp. The elapsed time is the MEAN
              over the last `log_interval` iterations (training_log divides the interval timer by it), so
              step_ms on a row stands for the whole interval ending at that iteration, not one step.
  memory      `[Rank 1] (after 10 iterations) memory (MB) | allocated: ... | max allocated: ... | reserved:
              ... | max reserved: ...` (torch.cuda.memory_allocated / max_memory_allocated / memory_reserved /
              max_memory_reserved, MB = 2**20 bytes), printed by ranks with data-parallel rank 0.
  arguments   `------------------------ arguments ------------------------` then `  name ..... value` lines
              until `-------------------- end of arguments ---------------------`. Other processes' output is
              interleaved into the dump in real logs (a value can carry a stray suffix), so only values that
              parse cleanly become features: every recipe argument (model shape, batch, precision, optimizer,
              learning-rate schedule, data, ...), not the paths, ranks and logging switches (NOT_RECIPE).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import polars as pl

from receipts.errors import InputError
from receipts.ingest.spool import RowSpool
from receipts.ingest.textlog import ChunkEnd, LogChunk, LogText, cut_short_note
from receipts.schema.model import IdentityClaim, MemoryPeak, ParsedRun, steps_frame

FORMAT = "megatron"
ITERATION = r"iteration\s+([0-9]+)/\s*([0-9]+) \|"
MEMORY = (r"\[Rank ([0-9]+)\] \(after ([0-9]+) iterations\) memory \(MB\) \| allocated: ([0-9.]+) \| "
          r"max allocated: ([0-9.]+) \| reserved: ([0-9.]+) \| max reserved: ([0-9.]+)")
ARGS_BEGIN = r"^-+ arguments -+\s*$"
ARGS_END = r"^-+ end of arguments -+\s*$"
ARG_LINE = r"([A-Za-z_][A-Za-z0-9_]*) \.{2,} (.*?)\s*$"
_DETECT = re.compile(ITERATION + "|" + ARGS_BEGIN + r"|\[Rank [0-9]+\] \(after [0-9]+ iterations\) memory \(MB\)")
_MB = 1024 * 1024
_LOSS = r"\| lm loss: ([-+0-9.eE]+|nan|inf)"
_TOKENS_PER_S = r"tokens per (?:sec|second): ([0-9.,]+)"

# Arguments of the dump that are not the recipe: where a run writes (paths that carry its name), which process
# printed the dump, resumption state, and logging switches. Every other argument is a recipe fact (a feature):
# two runs whose dumps differ there ran different recipes. log_interval stays: it sets what one row's step_ms
# averages over.
NOT_RECIPE = frozenset((
    "save", "load", "tensorboard_dir", "wandb_project", "wandb_exp_name", "wandb_save_dir", "log_dir",
    "rank", "local_rank", "world_size", "distributed_backend",
    "consumed_train_samples", "consumed_valid_samples", "consumed_train_tokens", "consumed_token_layers",
    "exit_duration_in_mins", "exit_interval", "exit_signal_handler", "tensorboard_log_interval",
    "tensorboard_queue_size", "timing_log_level", "timing_log_option",
))
_NOT_RECIPE_PREFIXES = ("log_", "wandb_")
# A value with another process's output glued on (`0.1Emitting ninja build file ...`) is not a fact
_GARBLED = re.compile(r"\s|^[-+]?[0-9][0-9.eE+-]*[A-Za-z]{2}")


def recipe_arguments(args: dict) -> dict:
    """The dump's recipe facts: every argument with a clean value (None, an unset argument, is no fact) except
    NOT_RECIPE and the log_* switches other than log_interval."""
    return {k: v for k, v in args.items()
            if v is not None and k not in NOT_RECIPE
            and (k == "log_interval" or not k.startswith(_NOT_RECIPE_PREFIXES))
            and not (isinstance(v, str) and _GARBLED.search(v))}


# Parallel degrees in the order the regime hint prints them; first name found wins.
DEGREES = (
    ("tp", ("tensor_model_parallel_size",)),
    ("pp", ("pipeline_model_parallel_size",)),
    ("cp", ("context_parallel_size",)),
    ("ep", ("expert_model_parallel_size", "moe_expert_parallel_size")),
    ("dp", ("data_parallel_size",)),
)


def detect(head: list[str]) -> bool:
    return any(_DETECT.search(line) for line in head)


def _num(rx: str) -> pl.Expr:
    return pl.col("text").str.extract(rx, 1).cast(pl.Float64, strict=False)


def parse(log: LogText) -> ParsedRun:
    return parse_chunks(log.path, log.chunks())


# The usual start of an iteration line (Megatron-LM, NeMo, Megatron-DeepSpeed), read in one pass instead of one
# per field. The prefix holds only a timestamp, so this `iteration` is the line's first and each group is the
# first match of that field's own pattern (ITERATION, consumed samples/tokens, elapsed time): same numbers.
_USUAL_START = (r"^\s*(?:\[[0-9: -]+\]\s*)?iteration\s+([0-9]+)/\s*([0-9]+) \| consumed samples:\s+([0-9]+) \| "
                r"(?:consumed tokens:\s+([0-9]+) \| )?elapsed time per iteration \(ms\): ([0-9.]+)")
# _LOSS without its group: the whole match, whose text after the fixed 11-character `| lm loss: ` is _LOSS's
# group. A pattern without groups is matched by the regex crate's DFAs alone, where a group costs a third pass
# over the match.
_LOSS_MATCH = r"\| lm loss: (?:[-+0-9.eE]+|nan|inf)"
_START_TIME = r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\]"
_CRASH = r"Traceback \(most recent call last\)|KeyboardInterrupt|CUDA out of memory|Killing subprocess|SIGTERM|SIGKILL"


@dataclass
class _Reading:
    """What a log's chunks leave behind: the per-line evidence reduced to rows, and the few lines whose
    text a later decision needs (the row texts themselves are dropped chunk by chunk)."""
    iters: RowSpool = field(default_factory=RowSpool)  # iteration rows, spilled when parse_chunks is given a directory
    memory: list[pl.DataFrame] = field(default_factory=list)
    args_first: int | None = None                 # line of the first `--- arguments ---`
    args_end: int | None = None                   # line of the first `--- end of arguments ---` after it
    arg_pairs: list[pl.DataFrame] = field(default_factory=list)
    banner: str | None = None                     # the first `using world size: ` line
    last_match: str | None = None                 # the last line matching ITERATION so far
    first_total: str | None = None                # `/ M` of the first iteration row
    last_total: str | None = None                 # `/ M` of the last iteration row
    started_at: str | None = None
    crash: tuple[int, str] | None = None          # the first crash line after the last iteration row so far

    def add(self, frame: pl.DataFrame) -> None:
        """One chunk's lines (line, text)."""
        if frame.height == 0:  # a chunk whose only line was a cut one
            return
        matched, iters, memory = _read_text(frame)
        if matched.height:
            self.last_match = matched["text"][-1]
        rows = iters.drop("text", "total")
        if rows.height:
            self.first_total = iters["total"][0] if self.first_total is None else self.first_total
            self.last_total = iters["total"][-1]
            if self.started_at is None:
                stamps = iters["text"].str.extract(_START_TIME, 1).drop_nulls()
                self.started_at = stamps[0] if len(stamps) else None
            # only a crash after the last iteration line counts: look after this chunk's last one
            self.crash = _first_crash(frame.filter(pl.col("line") > rows["line"][-1]))
        elif self.crash is None:
            self.crash = _first_crash(frame)
        self.iters.add(rows)
        self.memory.append(memory)
        self._add_arguments(frame)
        if self.banner is None:
            hit = frame.filter(pl.col("text").str.contains("using world size: ", literal=True)).head(1)
            self.banner = hit["text"][0] if hit.height else None

    def _add_arguments(self, frame: pl.DataFrame) -> None:
        """The dump runs from the first `--- arguments ---` to the first `--- end of arguments ---` after it
        (or 2000 lines, when a crash cut it); its `name ... value` lines are kept as they come."""
        if self.args_end is not None:
            return
        if self.args_first is None:
            begin = frame.filter(pl.col("text").str.contains(" arguments ", literal=True)
                                 & pl.col("text").str.contains(ARGS_BEGIN))
            if begin.height == 0:
                return
            self.args_first = int(begin["line"][0])
        first = self.args_first
        end = frame.filter((pl.col("line") > first) & pl.col("text").str.contains(" end of arguments ", literal=True)
                           & pl.col("text").str.contains(ARGS_END))
        if end.height:
            self.args_end = int(end["line"][0])
        block = frame.filter((pl.col("line") > first) & (pl.col("line") < (self.args_end or frame["line"][-1] + 1)))
        self.arg_pairs.append(block.select("line", pl.col("text").str.extract_groups(ARG_LINE).alias("a"))
                              .unnest("a").drop_nulls())

    def arguments(self) -> dict:
        if self.args_first is None:
            return {}
        last = self.args_end if self.args_end is not None else self.args_first + 2000  # a dump cut by a crash
        args: dict = {}
        for _, name, raw in pl.concat(self.arg_pairs).filter(pl.col("line") < last).iter_rows():
            args.setdefault(name, _value(raw))  # the first print of a name is the dump's; later ones are noise
        return args


def _read_text(frame: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """What polars reads of lines (line, text): the lines matching ITERATION (_iteration_rows), those whose step
    reads as a number with their tokens per second, and the memory reports' rows."""
    # Memory reports and tokens per second are rare in a long log: one pass over the text finds the lines
    # that hold either, for the two extracts below (a pass for each: 0.07 s more on 2M lines).
    rare = frame.filter(pl.col("text").str.contains_any(["memory (MB)", "tokens per "]))
    printed = rare["text"].str.contains("tokens per ", literal=True).any()  # else every extract gives null
    tokens_per_s = (pl.col("text").str.extract(_TOKENS_PER_S, 1).str.replace_all(",", "", literal=True)
                    .cast(pl.Float64, strict=False) if printed else pl.lit(None, pl.Float64))
    matched = _iteration_rows(frame)
    iters = (matched.with_columns(pl.col("step").cast(pl.Int64, strict=False)).filter(pl.col("step").is_not_null())
             .with_columns(tokens_per_s.alias("tokens_per_s")))
    memory = (
        rare.filter(pl.col("text").str.contains("memory (MB)", literal=True))
        .select(pl.col("text").str.extract_groups(MEMORY).alias("m")).unnest("m")
        .drop_nulls()
        .select(pl.col("1").cast(pl.Int32, strict=False).alias("rank"),
                pl.col("2").cast(pl.Int64, strict=False).alias("step"),
                *[(pl.col(c).cast(pl.Float64, strict=False) * _MB).cast(pl.Int64, strict=False).alias(n)
                  for c, n in (("3", "allocated"), ("4", "max_allocated"), ("5", "reserved"),
                               ("6", "max_reserved"))])
    )
    return matched, iters, memory


def _iteration_rows(frame: pl.DataFrame) -> pl.DataFrame:
    """Lines matching ITERATION: line, text, step and total (as printed), samples, tokens, step_ms, loss.
    Lines of the usual start are read in one pass, the others field by field."""
    # No literal prefilter: the anchored start fails within the first bytes of a line it does not fit, as cheaply
    # as the filter would, and it fits most lines of a long log.
    fast = frame.with_columns(pl.col("text").str.extract_groups(_USUAL_START).alias("g")).unnest("g")
    usual = pl.col("1").is_not_null()
    if fast.select(usual & pl.col("4").is_null()).to_series().any():
        # a line without consumed tokens at the start might still print them further on: read it field by field
        usual = usual & (pl.col("4").is_not_null() | ~pl.col("text").str.contains("consumed tokens:", literal=True))
    mask = fast.select(usual).to_series()
    rows = fast.filter(mask).select(
        "line", "text", pl.col("1").alias("step"), pl.col("2").alias("total"),
        *[pl.col(g).cast(pl.Float64, strict=False).alias(n) for g, n in (("3", "samples"), ("4", "tokens"),
                                                                          ("5", "step_ms"))],
        pl.col("text").str.extract(_LOSS_MATCH, 0).str.slice(len("| lm loss: ")).cast(pl.Float64, strict=False)
        .alias("loss"))
    others = fast.filter(~mask)
    if others.height == 0:
        return rows
    slow = _iteration_rows_field_by_field(others.select("line", "text"))
    return pl.concat([rows, slow]).sort("line") if slow.height else rows


def _iteration_rows_field_by_field(lines: pl.DataFrame) -> pl.DataFrame:
    return (lines.with_columns(pl.col("text").str.extract(ITERATION, 1).alias("step"))
            .filter(pl.col("step").is_not_null())
            .with_columns(pl.col("text").str.extract(ITERATION, 2).alias("total"),
                          _num(r"consumed samples:\s+([0-9]+)").alias("samples"),
                          _num(r"consumed tokens:\s+([0-9]+)").alias("tokens"),
                          _num(r"elapsed time per iteration \(ms\): ([0-9.]+)").alias("step_ms"),
                          _num(_LOSS).alias("loss")))


def _first_crash(frame: pl.DataFrame) -> tuple[int, str] | None:
    hit = frame.filter(pl.col("text").str.contains(_CRASH)).head(1)
    return (int(hit["line"][0]), hit["text"][0]) if hit.height else None


def parse_chunks(path: Path, chunks: Iterable[LogChunk], spill: Path | None = None) -> ParsedRun:
    """Each chunk is reduced to iteration and memory rows (numbers), the arguments dump and the few lines
    decisions need; what spans chunks (tokens/s from differences, the per-step memory join) is done once,
    streaming over the iteration rows. `spill`: a directory they go to as they are read (ingest/spool.py)."""
    reading = _Reading(iters=RowSpool(spill, FORMAT))
    last_line_parsed = True
    end: ChunkEnd | None = None
    for chunk in chunks:
        frame = chunk.frame
        if chunk.last and chunk.unterminated_last:
            # A killed writer's prefix of an iteration (or memory) line may still parse, with wrong numbers.
            # A complete iteration line ends with '|' and has as many fields as the iteration line before it.
            last_line_parsed = _complete_iteration(frame, _iteration_before_last(frame) or reading.last_match)
            if not last_line_parsed:
                frame = frame.head(frame.height - 1)
        reading.add(frame)
        end = chunk.as_end()
    assert end is not None, "a log has at least one chunk"

    if reading.iters.height == 0:
        raise InputError(path, "no Megatron iteration lines found; expected ` iteration N/ M | consumed "
                               "samples: ... | elapsed time per iteration (ms): ... |`")
    args = reading.arguments()
    iters = reading.iters.rows().with_columns(_derived_tokens_per_s(args.get("seq_length")))

    memory_rows = pl.concat(reading.memory)
    memory = tuple(
        MemoryPeak(rank, max_alloc, max_res)
        for rank, max_alloc, max_res in memory_rows.group_by("rank").agg(
            pl.col("max_allocated").max(), pl.col("max_reserved").max()).sort("rank").iter_rows()
    )
    # The per-step columns take the current allocated/reserved of the worst reporting rank at that
    # iteration (the max_* values are cumulative since start, so they are peaks, not per-step values).
    per_step = memory_rows.group_by("step").agg(pl.col("allocated").max().alias("allocated_bytes"),
                                                pl.col("reserved").max().alias("reserved_bytes"))
    # (a log without memory lines joins nothing: null columns, without copying millions of rows)
    steps = (iters.join(per_step.lazy(), on="step", how="left", maintain_order="left") if per_step.height else
             iters.with_columns(pl.lit(None, pl.Int64).alias("allocated_bytes"),
                                pl.lit(None, pl.Int64).alias("reserved_bytes")))

    world = _int(args.get("world_size")) or _world_from_banner(reading.banner)
    deepspeed = args.get("deepspeed") is True or "deepspeed_config" in args
    return ParsedRun(
        source_format=FORMAT,
        format_version="megatron-deepspeed" if deepspeed else None,
        steps=reading.iters.settle(steps_frame(steps.select("step", "step_ms", "tokens_per_s", "loss",
                                                            "allocated_bytes", "reserved_bytes", "line"))),
        claim=IdentityClaim(regime=_regime(args, deepspeed)),
        memory=memory,
        features=recipe_arguments(args),
        world_size=world,
        ended_early=cut_short_note(end, last_line_parsed) or _crash_after(reading),
        started_at=_iso([reading.started_at] if reading.started_at else []),
        provenance={"train_iters": _int(args.get("train_iters")) or int(cast(str, reading.first_total))},
    )


def _complete_iteration(frame: pl.DataFrame, previous: str | None) -> bool:
    """Whether the last line of `frame` (a cut log's last line) is a whole iteration line; `previous`: the last
    line matching ITERATION before it."""
    last = frame["text"][-1].rstrip()
    if not (re.search(ITERATION, last) and last.endswith("|")):
        return False
    return previous is None or last.count("|") >= previous.count("|")


def _iteration_before_last(frame: pl.DataFrame) -> str | None:
    """The chunk's last line matching ITERATION before its last line, or None when the chunk has none."""
    before = frame.head(frame.height - 1).filter(pl.col("text").str.contains(ITERATION)).tail(1)
    return before["text"][0] if before.height else None


def _value(raw: str):
    text = raw.strip()
    if text in ("True", "False"):
        return text == "True"
    if text == "None":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if m := re.fullmatch(r"\[(\d+)\]", text):  # Megatron-DeepSpeed prints num_experts as a list: [1]
        return int(m.group(1))
    return text


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _derived_tokens_per_s(seq_length) -> pl.Expr:
    """Tokens per second over the interval: printed when the version prints it; else from the growth of
    `consumed tokens` (Megatron-DeepSpeed) or `consumed samples` x seq_length, divided by the interval time."""
    # x - x.shift(1) is diff(), spelled so that it streams over spilled rows (diff() collects its column)
    d_iter = pl.col("step") - pl.col("step").shift(1)
    per_iter = (pl.col("tokens") - pl.col("tokens").shift(1)) / d_iter
    if isinstance(seq_length, int):
        per_iter = per_iter.fill_null((pl.col("samples") - pl.col("samples").shift(1)) / d_iter * seq_length)
    # x * 1000 / ms, not x / (ms / 1000): polars divides a column by a literal through its reciprocal, except
    # where the column is one row long, so ms / 1000 was not the same number in a one-row chunk or morsel
    derived = per_iter * 1000.0 / pl.col("step_ms")
    return pl.coalesce(pl.col("tokens_per_s"), derived).alias("tokens_per_s")


def _regime(args: dict, deepspeed: bool) -> str | None:
    words = []
    for short, names in DEGREES:
        value = next((_int(args[n]) for n in names if _int(args.get(n)) is not None), None)
        if value is not None:
            words.append(f"{short}{value}")
    if args.get("sequence_parallel") is True:
        words.append("sp")
    if not words:
        return None
    return " ".join(["megatron-deepspeed" if deepspeed else "megatron", *words])


def _world_from_banner(banner: str | None) -> int | None:
    # `using world size: 8, data-parallel-size: 8, tensor-model-parallel size: 1, ...` (printed by rank 0
    # before the arguments dump in every Megatron flavour)
    m = re.search(r"using world size: (\d+)", banner) if banner is not None else None
    return int(m.group(1)) if m else None


def _crash_after(reading: _Reading) -> str | None:
    """A traceback or kill after the last iteration line means the run stopped before its last iteration."""
    assert reading.iters.last is not None, "called on a log with iteration rows"
    last_line, last_step = reading.iters.last["line"], reading.iters.last["step"]
    total = pl.Series([reading.last_total], dtype=pl.Utf8).cast(pl.Int64, strict=False)[0]
    if total is None or last_step >= total:
        return None
    if reading.crash is None:
        return None
    line, text = reading.crash
    return (f"line {line}: {text.strip()[:80]!r} after the last iteration line {last_line} "
            f"(iteration {last_step} of {total})")


def _iso(values: list[str]) -> str | None:
    return values[0].replace(" ", "T") if values else None
