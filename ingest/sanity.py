"""What every parser's output must satisfy before it can become a receipt.

Parsers read numbers out of text with regexes and casts; a damaged file can still match and yield a
step time of `inf`, a NaN from 0/0, or a world size of thirty digits. Those are not measurements: a
time, rate or size that is not a finite non-negative number becomes unknown (null) here, once, for
every format; an integer fact that cannot fit the store's 64-bit columns is refused with the file
named; NaN/inf inside the JSON facts (features, provenance, software) are kept as text, since the
stores' JSON columns (PostgreSQL jsonb) reject them.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, cast

import polars as pl

from receipts.errors import InputError
from receipts.schema.model import F, Anatomy, MemoryPeak, ParsedRun

_I64_MAX = 2**63 - 1
# Step-series columns that are measurements (never negative); loss may legitimately be NaN (a diverged run).
_MEASURED = ("step_ms", "tokens_per_s", "mfu_pct", "allocated_bytes", "reserved_bytes")


def _fits(value: Any, what: str, path: Path) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value <= _I64_MAX:
        raise InputError(path, f"{what} {value} is out of range (expected 0 to 2^63-1)")
    return value


def _measured(frame: F, columns: tuple[str, ...]) -> F:
    # A column is rewritten only when it holds a bad value: a step series of millions of rows is not copied
    # (nor its all-null columns filled in) to change nothing. One pass finds the bad columns (streamed, for a
    # spilled frame); the fix of a lazy frame applies wherever its rows are read.
    schema = frame.collect_schema()
    ok = {c: (pl.col(c) >= 0) & (pl.col(c).is_finite() if schema[c].is_float() else pl.lit(True))
          for c in columns if c in schema}
    if not ok:
        return frame
    bad = frame.lazy().select([(~cond).any().alias(c) for c, cond in ok.items()]).collect(engine="streaming").row(0)
    fixes = [pl.when(cond).then(pl.col(c)).otherwise(None).alias(c) for (c, cond), b in zip(ok.items(), bad) if b]
    return cast(F, frame.with_columns(fixes)) if fixes else frame


def json_safe(value: Any) -> Any:
    """NaN / inf as text ('nan', 'inf'), recursively; everything else unchanged."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(json_safe(v) for v in value)
    return value


def checked_run(parsed: ParsedRun, path: Path) -> ParsedRun:
    for field in ("gpu_count", "world_size"):
        _fits(getattr(parsed, field), field, path)
    memory = tuple(MemoryPeak(_fits(m.rank, "memory rank", path), _fits(m.peak_allocated_bytes, "peak allocated bytes", path),
                              _fits(m.peak_reserved_bytes, "peak reserved bytes", path)) for m in parsed.memory)
    return dataclasses.replace(
        parsed, steps=_measured(parsed.steps, _MEASURED), memory=memory,
        features=json_safe(parsed.features), provenance=json_safe(parsed.provenance),
        software=json_safe(parsed.software), topology=json_safe(parsed.topology))


def checked_anatomy(anatomy: Anatomy, path: Path) -> Anatomy:
    for field in ("gpu_count", "world_size"):
        _fits(getattr(anatomy, field), field, path)
    return dataclasses.replace(
        anatomy, rows=_measured(anatomy.rows, ("time_ms",)),
        steps=_measured(anatomy.steps, ("wall_ms", "gpu_ms", "comm_ms", "kernels")),
        nvtx=_measured(anatomy.nvtx, ("count", "total_ms", "gpu_ms")),
        software=json_safe(anatomy.software))
