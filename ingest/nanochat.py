"""nanochat training logs (karpathy/nanochat: base_train, mid_train, chat_sft).

Step lines, as `print0` writes them (field set varies by script and version):
  base_train  step 00100/21400 (0.47%) | loss: 3.14 | lrm: 1.00 | dt: 456.78ms | tok/sec: 1,148,000 | mfu: 48.52 | total time: 0.76m
  chat_sft    step 00001 (0.00%) | loss: 5.47 | lrm: 1.00 | dt: 1142.98ms | tok/sec: 111 | mfu: 0.00 | epoch: 1 | total time: 0.00m
  older sft   Step 00010/00500 | Training loss: 1.23| lrm: 1.000000| num_tokens: 12,345
`dt` is the wall time of that one step (synchronised), `tok/sec` is global (all ranks), `mfu` percent.
Header lines (logger or print0): `Distributed world size: N`, `GPU: <name> | Peak FLOPS ...`,
`Building model with config: {...}`; the end of base_train prints `Peak memory usage: X MiB`
(torch.cuda.max_memory_allocated, so it is an allocated peak, MiB = 2**20 bytes).
"""

from __future__ import annotations

import ast
import re

import polars as pl

from receipts.errors import InputError
from receipts.ingest.textlog import LogText, cut_short_note
from receipts.schema.model import MemoryPeak, ParsedRun, steps_frame

FORMAT = "nanochat"
_PREFIX = r"^(?:\[[^\]]*\]:?\s*)?"  # torchrun --tee / srun label, when present
STEP_LINE = _PREFIX + r"[Ss]tep ([0-9]+)(?:/([0-9]+))?(?: \([0-9.]+%\))? ?\|"
_DETECT = re.compile(STEP_LINE + r".*\b(?:dt|loss): ")
# ASCII classes: unicode \d makes every extract ~1.5x slower on 1M lines.
# Fields are extracted one by one (not one positional regex) because their set and order vary.
_FIELDS = {
    "loss": r"\| ?(?:[Tt]raining )?loss: ([^ |]+)",
    "step_ms": r"\| ?dt: ([0-9.]+)ms",
    "tokens_per_s": r"\| ?tok/sec: ([0-9,.]+)",
    "mfu_pct": r"\| ?mfu: ([0-9.]+)",
}
_HEADER = (r"(?:Distributed world size: |GPU: |Building model with config: |Peak memory usage: "
           r"|Autodetected device type: )")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_MIB = 1024 * 1024


def detect(head: list[str]) -> bool:
    return any(_DETECT.match(line) for line in head)


def _numbers(rx: str) -> pl.Expr:
    return pl.col("text").str.extract(rx, 1).str.replace_all(",", "", literal=True).cast(pl.Float64, strict=False)


def parse(log: LogText) -> ParsedRun:
    frame = log.frame()
    steps = (
        frame.filter(pl.col("text").str.contains("tep ", literal=True))
        .with_columns(pl.col("text").str.extract(STEP_LINE, 1).cast(pl.Int64, strict=False).alias("step"))
        .filter(pl.col("step").is_not_null())
        .with_columns([_numbers(rx).alias(name) for name, rx in _FIELDS.items()])
        # `Step 00000 | Validation bpb: ...` has the step prefix but is an eval line, not a training step
        .filter(pl.col("loss").is_not_null() | pl.col("step_ms").is_not_null())
    )
    last_line_parsed = True
    if log.unterminated_last and steps.height and steps["line"][-1] == log.n_lines:
        # A complete step line ends in the same field as the step line before it ('total time: 0.01m');
        # a killed writer leaves a prefix of it, whose numbers may parse but are wrong.
        if not _same_shape(steps["text"].tail(2).to_list()):
            steps = steps.head(steps.height - 1)
            last_line_parsed = False
    elif log.unterminated_last:
        last_line_parsed = False
    if steps.height == 0:
        raise InputError(log.path, "no nanochat step lines found; expected `step N/M (p%) | loss: ... | dt: ...ms | "
                                   "tok/sec: ... | mfu: ...`")

    header = frame.filter(pl.col("text").str.contains(_HEADER))
    facts = _header_facts(header)
    world = facts.get("world_size")
    return ParsedRun(
        source_format=FORMAT,
        format_version=None,
        steps=steps_frame(steps.select("step", "step_ms", "tokens_per_s", "loss", "mfu_pct", "line")),
        memory=facts.get("memory", ()),
        features=facts.get("features", {}),
        gpu_model=facts.get("gpu_model"),
        # nanochat runs one process per GPU on one node (torchrun --nproc_per_node), so GPUs = world size
        gpu_count=world,
        world_size=world,
        ended_early=cut_short_note(log, last_line_parsed),
        provenance=_total_steps(steps),
    )


def _total_steps(steps: pl.DataFrame) -> dict:
    total = steps["text"].head(1).str.extract(STEP_LINE, 2)[0]
    return {"total_steps": int(total)} if total else {}


def _same_shape(texts: list[str]) -> bool:
    """Two step lines with digits blanked out compare equal when the second is complete."""
    if len(texts) < 2:
        return bool(re.search(r"(?:m|ms|\d)\s*$", texts[-1]))
    a, b = (re.sub(r"nan|inf|[-\d.,]+", "#", t) for t in texts)
    return a == b


def _header_facts(header: pl.DataFrame) -> dict:
    facts: dict = {}
    peaks: list[MemoryPeak] = []
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
        elif m := re.search(r"Peak memory usage: ([\d.,]+)\s*MiB", text):
            peaks.append(MemoryPeak(None, int(float(m.group(1).replace(",", "")) * _MIB), None))
    if peaks:
        facts["memory"] = tuple(peaks)
    return facts
