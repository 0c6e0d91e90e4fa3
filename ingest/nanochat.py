"""nanochat training logs (karpathy/nanochat: base_train, mid_train, chat_sft).

Step lines, as `print0` writes them (field set varies by script and version):
  base_train  step 00100/21400 (0.47%) | loss: 3.14 | lrm: 1.00 | dt: 456.78ms | tok/sec: 1,148,000 | mfu: 48.52 | total time: 0.76m
  chat_sft    step 00001 (0.00%) | loss: 5.47 | lrm: 1.00 | dt: 1142.98ms | tok/sec: 111 | mfu: 0.00 | epoch: 1 | total time: 0.00m
  older sft   Step 00010/00500 | Training loss: 1.23| lrm: 1.000000| num_tokens: 12,345
`dt` is the wall time of that one step (synchronised), `tok/sec` is global (all ranks), `mfu` percent.
Header lines (logger or print0): `Distributed world size: N`, `GPU: <name> | Peak FLOPS ...`,
`Building model with config: {...}`; the end of base_train prints `Peak memory usage: X MiB`
(torch.cuda.max_memory_allocated, so it is an allocated peak, MiB = 2**20 bytes); `Peak memory reserved: X MiB`
(and `... allocated:`) where a version prints them, a per-step `| mem: X GiB` (the allocated peak so far).
Lines may stand behind a launcher's rank label (kept as the step's rank) or a logger's prefix
(ingest/line_prefix.py).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

import polars as pl

from receipts.errors import InputError
from receipts.ingest.spool import RowSpool
from receipts.ingest.line_prefix import LINE_PREFIX, RANK_LABEL
from receipts.ingest.textlog import ChunkEnd, LogChunk, LogText, cut_short_note
from receipts.schema.model import MemoryPeak, ParsedRun, steps_frame

FORMAT = "nanochat"
STEP_LINE = LINE_PREFIX + r"[Ss]tep ([0-9]+)(?:/([0-9]+))?(?: \([0-9.]+%\))? ?\|"
_DETECT = re.compile(STEP_LINE + r".*\b(?:dt|loss): ")
# ASCII classes: unicode \d makes every extract ~1.5x slower on 1M lines.
# Fields are extracted one by one (not one positional regex) because their set and order vary.
_FIELDS = {
    "loss": r"\| ?(?:[Tt]raining )?loss: ([^ |]+)",
    "step_ms": r"\| ?dt: ([0-9.]+)ms",
    "tokens_per_s": r"\| ?tok/sec: ([0-9,.]+)",
    "mfu_pct": r"\| ?(?:bf16_)?mfu: ([0-9.]+)",
}
# `| mem: 24.65GiB` (or MiB, GB, MB): the allocator's peak so far, as nanochat's forks print it per step.
_MEM = r"\| ?mem: ([0-9.]+)\s*([KMG]i?B)"
_UNITS = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "KB": 10**3, "MB": 10**6, "GB": 10**9}
# base_train's and chat_sft's own layout, read in one pass (a third of the time of one pass per field). Where it
# matches, each group is the first match of that field's own pattern above (no '|' comes before the fields
# it skips), so both ways give the same numbers; other lines are read field by field.
# One-pass: at every byte at most one way on (`(?: (?:\(p%\) ?)?)?\|` rather than STEP_LINE's `(?: \(p%\))? ?\|`,
# whose space could begin either), so the regex crate reads the groups with its one-pass DFA instead of
# backtracking: half the time of this extract.
_USUAL_LINE = (r"^step ([0-9]+)(?:/[0-9]+)?(?: (?:\([0-9.]+%\) ?)?)?\| loss: ([^ |]+) \| lrm: [^|]*\| dt: ([0-9.]+)ms "
               r"\| tok/sec: ([0-9,.]+) \| mfu: ([0-9.]+)")
_USUAL_GROUPS = {"loss": "2", "step_ms": "3", "tokens_per_s": "4", "mfu_pct": "5"}
_HEADER = (r"(?:Distributed world size: |GPU: |Building model with config: |(?i:peak memory (?:usage|allocated|reserved)): "
           r"|Autodetected device type: )")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_MIB = 1024 * 1024


def detect(head: list[str]) -> bool:
    return any(_DETECT.match(line) for line in head)


def _plain_number(column: str) -> pl.Expr:
    return pl.col(column).str.replace_all(",", "", literal=True).cast(pl.Float64, strict=False)


def _numbers(rx: str) -> pl.Expr:
    return pl.col("text").str.extract(rx, 1).str.replace_all(",", "", literal=True).cast(pl.Float64, strict=False)


def parse(log: LogText) -> ParsedRun:
    return parse_chunks(log.path, log.chunks())


def _step_rows(frame: pl.DataFrame) -> pl.DataFrame:
    """Step lines with their numbers: line, text, step, loss, step_ms, tokens_per_s, mfu_pct."""
    lines = frame.filter(pl.col("text").str.contains("tep ", literal=True))
    fast = lines.with_columns(pl.col("text").str.extract_groups(_USUAL_LINE).alias("g")).unnest("g")
    rows = fast.filter(pl.col("1").is_not_null()).select(
        "line", "text", pl.col("1").cast(pl.Int64, strict=False).alias("step"),
        pl.lit(None, dtype=pl.Int32).alias("rank"), pl.lit(None, dtype=pl.Int64).alias("allocated_bytes"),
        # dt and mfu match [0-9.]+ in this layout: cast as they are, no separators to strip (6% of the parse).
        *[(pl.col(group).cast(pl.Float64, strict=False) if name in ("step_ms", "mfu_pct") else _plain_number(group))
          .alias(name) for name, group in _USUAL_GROUPS.items()])
    others = fast.filter(pl.col("1").is_null())
    if others.height:
        rows = pl.concat([rows, _step_rows_field_by_field(others.select("line", "text"))]).sort("line")
    rows = _with_memory(rows)
    # `Step 00000 | Validation bpb: ...` has the step prefix but is an eval line, not a training step
    return rows.filter(pl.col("step").is_not_null() & (pl.col("loss").is_not_null() | pl.col("step_ms").is_not_null()))


def _step_rows_field_by_field(lines: pl.DataFrame) -> pl.DataFrame:
    """Lines in any other layout: behind a launcher's rank label or a logger's prefix (ingest/line_prefix.py),
    fields in another order, a per-step `mem:`."""
    return (
        lines.with_columns(pl.col("text").str.extract(STEP_LINE, 1).cast(pl.Int64, strict=False).alias("step"))
        .filter(pl.col("step").is_not_null())
        .with_columns([_numbers(rx).alias(name) for name, rx in _FIELDS.items()])
        .with_columns(pl.col("text").str.extract(RANK_LABEL, 1).cast(pl.Int32, strict=False).alias("rank"),
                      pl.lit(None, dtype=pl.Int64).alias("allocated_bytes"))
        .select("line", "text", "step", "rank", "allocated_bytes", *_FIELDS)
    )


def _with_memory(rows: pl.DataFrame) -> pl.DataFrame:
    """A per-step `| mem: X GiB` read where the chunk has one (most logs have none: no extract paid)."""
    if not rows.height or not rows["text"].str.contains("mem: ", literal=True).any():
        return rows
    mem = pl.col("text").str.extract_groups(_MEM)
    return rows.with_columns((mem.struct.field("1").cast(pl.Float64, strict=False)
                              * mem.struct.field("2").replace_strict(_UNITS, default=None, return_dtype=pl.Float64))
                             .round(0).cast(pl.Int64).alias("allocated_bytes"))


def parse_chunks(path: Path, chunks: Iterable[LogChunk], spill: Path | None = None) -> ParsedRun:
    """Each chunk is reduced to its step numbers and header lines; only the first and the last two step
    lines' text is kept (the total step count; whether an unterminated last line is complete). `spill`: a
    directory the step rows go to as they are read (ingest/spool.py), else they are held in memory."""
    spool = RowSpool(spill, FORMAT)
    headers: list[pl.DataFrame] = []
    first_text: str | None = None
    last_texts: list[str] = []
    end: ChunkEnd | None = None
    too_big: list[int] = []  # lines whose step number does not fit an integer column (64 bits)
    for chunk in chunks:
        rows = _step_rows(chunk.frame)
        too_big += _overflowing_steps(chunk.frame)
        if rows.height:
            first_text = rows["text"][0] if first_text is None else first_text
            last_texts = (last_texts + rows["text"].tail(2).to_list())[-2:]
        # only the columns the format has: the missing ones are added once, as constants, by steps_frame
        spool.add(rows.select("step", "rank", "step_ms", "tokens_per_s", "loss", "mfu_pct", "allocated_bytes", "line"))
        headers.append(chunk.frame.filter(pl.col("text").str.contains(_HEADER)).select("text"))
        end = chunk.as_end()
    assert end is not None, "a log has at least one chunk"
    n_steps = spool.height
    last_line_parsed = True
    if end.unterminated_last and spool.last is not None and spool.last["line"] == end.n_lines:
        # A complete step line ends in the same field as the step line before it ('total time: 0.01m');
        # a killed writer leaves a prefix of it, whose numbers may parse but are wrong.
        if not _same_shape(last_texts):
            n_steps -= 1
            last_line_parsed = False
    elif end.unterminated_last:
        last_line_parsed = False
    if n_steps == 0 and not last_line_parsed and spool.height:
        raise InputError(path, f"its only step line (line {end.n_lines}) is cut short (no newline at end of file): "
                               "no complete step to store", line=end.n_lines)
    if n_steps == 0:
        raise InputError(path, "no nanochat step lines found; expected `step N/M (p%) | loss: ... | dt: ...ms | "
                               "tok/sec: ... | mfu: ...`")
    steps = spool.settle(steps_frame(spool.rows().head(n_steps)))

    facts = _header_facts(pl.concat(headers))
    if "memory" not in facts:
        # no `Peak memory` summary (a run cut short, or a fork that prints none): the per-step `mem:` is the
        # allocator's peak so far, so its largest value over the stored steps is the run's peak allocated
        column = steps.lazy().select(pl.col("allocated_bytes").max()).collect()
        printed = column.item() if column.height else None
        if printed is not None:
            facts["memory"] = (MemoryPeak(None, int(printed), None),)
    world = facts.get("world_size")
    warnings = (f"{len(too_big)} step line(s) left out, their step number too large for a 64-bit integer "
                f"(line {too_big[0]}{' and more' if len(too_big) > 1 else ''})",) if too_big else ()
    return ParsedRun(
        source_format=FORMAT,
        format_version=None,
        steps=steps,
        memory=facts.get("memory", ()),
        features=facts.get("features", {}),
        gpu_model=facts.get("gpu_model"),
        # nanochat runs one process per GPU on one node (torchrun --nproc_per_node), so GPUs = world size
        gpu_count=world,
        world_size=world,
        ended_early=cut_short_note(end, last_line_parsed),
        provenance=_total_steps(first_text),
        warnings=warnings,
    )


def _overflowing_steps(frame: pl.DataFrame) -> list[int]:
    """Lines of step lines whose step number has 19 digits or more and does not fit Int64 (a damaged line)."""
    long = frame.filter(pl.col("text").str.contains(r"[Ss]tep [0-9]{19,}"))
    if not long.height:
        return []
    raw = long.with_columns(pl.col("text").str.extract(STEP_LINE, 1).alias("raw"))
    return raw.filter(pl.col("raw").is_not_null() & pl.col("raw").cast(pl.Int64, strict=False).is_null())["line"].to_list()


def _total_steps(first_text: str | None) -> dict:
    total = pl.Series([first_text], dtype=pl.Utf8).str.extract(STEP_LINE, 2)[0]
    return {"total_steps": int(total)} if total else {}


# A field label and what a complete value after it looks like: a line holding the label without such a value
# was cut inside it (`dt: 989.44m` is a cut `dt: 989.44ms`).
_COMPLETE = {"dt: ": _FIELDS["step_ms"], "tok/sec: ": _FIELDS["tokens_per_s"], "loss: ": _FIELDS["loss"],
             "total time: ": r"total time: [0-9.]+m\s*$", "eta: ": r"eta: [0-9.]+m\s*$"}


def _same_shape(texts: list[str]) -> bool:
    """Two step lines with digits blanked out compare equal when the second is complete. A step line alone
    is complete when it ends like one and every field it names holds a whole value. What stands before
    `step` (a rank label, a logger's prefix with its own level and module) is not the step line's shape:
    two lines of one run may carry different ones."""
    texts = [t[m.start():] if (m := re.search(r"[Ss]tep [0-9]", t)) else t for t in texts]
    if len(texts) < 2:
        text = texts[-1]
        return bool(re.search(r"(?:m|ms|\d)\s*$", text)) and all(
            re.search(rx, text) for label, rx in _COMPLETE.items() if label in text)
    a, b = (re.sub(r"nan|inf|[-\d.,]+", "#", t) for t in texts)
    return a == b


def _header_facts(header: pl.DataFrame) -> dict:
    facts: dict = {}
    peaks: dict[str, int] = {}
    for text in header["text"].to_list():
        text = _ANSI.sub("", text)
        if m := re.search(r"Distributed world size: (\d+)", text):
            facts["world_size"] = int(m.group(1))
        elif m := re.search(r"(?:^|\| |- )GPU: ([^|]+?)\s*(?:\||$)", text):
            facts["gpu_model"] = m.group(1)
        elif m := re.search(r"Building model with config: (\{.*\})", text):
            try:
                config = ast.literal_eval(m.group(1))
            except (ValueError, SyntaxError):
                continue  # a config we cannot read is not evidence; the steps still are
            if isinstance(config, dict):
                facts["features"] = {k: v for k, v in config.items() if isinstance(v, (int, float, str, bool))}
        elif m := re.search(r"Peak memory (usage|allocated|reserved): ([\d.,]+)\s*([KMG]i?B)", text, re.I):
            size = int(float(m.group(2).replace(",", "")) * _UNITS.get(m.group(3), _MIB))
            peaks["reserved" if m.group(1).lower() == "reserved" else "allocated"] = size
    if peaks:  # one peak of the logging rank: allocated and reserved as printed, unknown where not printed
        facts["memory"] = (MemoryPeak(None, peaks.get("allocated"), peaks.get("reserved")),)
    return facts
