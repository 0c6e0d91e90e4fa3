"""A step line the user declares: `[logs] step_line` in receipts.toml (or --registry), a regular expression
with named groups, for logs no built-in format reads.

  step          required: the iteration number (an integer)
  step_ms       the step's wall time in milliseconds
  loss          the training loss
  tokens_per_s  throughput in tokens per second
  memory        the allocator's memory at that step, as bytes or with a unit (`24.6GiB`, `1200 MiB`, `3.1 GB`)

Python's named-group syntax `(?P<name>...)`, read by RE2 (the sniff over the log's head) and polars (the
parse), both linear-time engines: a user's pattern cannot make either run for ever. The pattern is searched
anywhere in a line (anchor it with `^` if it must start one). Checked when the registry is loaded
(schema/registry.py check_step_line): an invalid pattern, or one without a `step` group or with a group of
another name, is refused with one line naming the file.
"""

from __future__ import annotations

import polars as pl

from receipts.errors import InputError
from receipts.ingest.textlog import LogText, cut_short_note
from receipts.schema.model import ParsedRun, steps_frame
from receipts.schema.registry import STEP_LINE_GROUPS as GROUPS, compile_step_line

FORMAT = "declared"
_UNITS = {"": 1, "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "KB": 10**3, "MB": 10**6,
          "GB": 10**9, "TB": 10**12}


def detect(head: list[str], pattern: str) -> bool:
    rx = compile_step_line(pattern)
    return any(rx.search(line) for line in head)


def parse(log: LogText, pattern: str) -> ParsedRun:
    names = [n for n in GROUPS if n in compile_step_line(pattern).groupindex]
    found = (log.frame()
             .with_columns(pl.col("text").str.extract_groups(pattern).alias("g"))
             .filter(pl.col("g").struct.field("step").is_not_null())
             .unnest("g"))
    if found.height == 0:
        raise InputError(log.path, f"no line matches the declared step line {pattern!r} ([logs] step_line)")
    numbers = [pl.col("step").cast(pl.Int64, strict=False).alias("step")]
    for name in ("step_ms", "loss", "tokens_per_s"):
        if name in names:
            numbers.append(pl.col(name).str.replace_all(",", "", literal=True).cast(pl.Float64, strict=False))
    if "memory" in names:
        parts = pl.col("memory").str.extract_groups(r"^\s*([0-9.]+)\s*([KMGT]i?B|B)?\s*$")
        numbers.append((parts.struct.field("1").cast(pl.Float64, strict=False)
                        * parts.struct.field("2").fill_null("").replace_strict(_UNITS, default=None,
                                                                               return_dtype=pl.Float64))
                       .round(0).cast(pl.Int64).alias("allocated_bytes"))
    steps = found.select("line", *numbers).filter(pl.col("step").is_not_null())
    last_line_parsed = not log.unterminated_last or steps["line"][-1] != log.n_lines
    if not last_line_parsed:
        steps = steps.head(steps.height - 1)  # a killed writer's half line: its numbers may parse but be wrong
    return ParsedRun(source_format=FORMAT, format_version=None, steps=steps_frame(steps),
                     ended_early=cut_short_note(log, last_line_parsed),
                     provenance={"step_line": pattern})
