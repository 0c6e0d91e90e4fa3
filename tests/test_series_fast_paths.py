"""The step-series shortcuts the ingest of a long log takes give what the general path gives.

A log's usual series has one row per step, in step order, without a rank: the window (analysis/window.py) and
the steady series (analysis/summary.py) then skip their per-step group_by, the settle search runs over numpy
arrays instead of Python lists, and sanity rewrites only a column holding a bad value. Each is compared here
with the general path on every real log (the same rows with a rank set, which no shortcut takes) and, for the
settle search, with the loop it replaced, on series made to hit its edges.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from conftest import REALDATA
from receipts.analysis import summary
from receipts.analysis.window import SETTLE_RUN, _settled, choose_window
from receipts.errors import InputError
from receipts.ingest.sanity import checked_run
from receipts.pipeline import parse_log
from receipts.schema.model import ParsedRun, mark_warmup, one_row_per_step, steps_frame

LOGS = sorted(p for p in (REALDATA / "logs").glob("*") if p.suffix != ".json") if (REALDATA / "logs").is_dir() else []


def _parsed(path: Path) -> ParsedRun:
    try:
        return parse_log(path)
    except InputError:
        pytest.skip(f"{path.name} is not a step log")


def _general(steps: pl.DataFrame) -> pl.DataFrame:
    """The same rows as one rank's: every shortcut's condition fails, the per-step aggregate runs."""
    return steps.with_columns(pl.lit(0, pl.Int32).alias("rank"))


@pytest.mark.skipif(not LOGS, reason="no real logs")
@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.name)
def test_window_and_series_shortcuts_match_the_general_path(path: Path) -> None:
    parsed = _parsed(path)
    steps = parsed.steps
    window = choose_window(steps, parsed.phases, tail=parsed.tail_step)
    assert window == choose_window(_general(steps), parsed.phases, tail=parsed.tail_step)
    fast = summary.steady_series(mark_warmup(steps, window))
    slow = summary.steady_series(mark_warmup(_general(steps), window))
    for a, b in zip(fast, slow):
        np.testing.assert_array_equal(a, b)
    assert summary.summarise(*fast) == summary.summarise(*slow)


def _settled_loop(ms: list[float], limit: float, half: int) -> int:
    """The search as it was written over lists (window.choose_window before it took numpy arrays)."""
    return next((i for i in range(1, half + 1) if all(v <= limit for v in ms[i:i + SETTLE_RUN])), half)


@pytest.mark.parametrize("seed", range(40))
def test_settle_search_matches_the_list_loop(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice([4, 5, 6, 7, 9, 12, 30, 200])
    ms = [rng.choice([1.0, 1.1, 1.3, 5.0, math.nan, math.inf]) if rng.random() < 0.4 else 1.0 for _ in range(n)]
    limit = rng.choice([1.25, 1.0, math.nan, 6.0])
    half = n // 2
    assert _settled(np.array(ms), limit, half) == _settled_loop(ms, limit, half)


def test_window_on_series_with_warmup_marks_the_same_steps_as_by_rank() -> None:
    ms = [900.0, 400.0, 120.0, 100.0, 101.0, 99.0, 100.0, 102.0, 98.0, 100.0, 5.0]
    steps = steps_frame({"step": list(range(1, len(ms) + 1)), "step_ms": ms})
    assert one_row_per_step(steps)
    window = choose_window(steps, (), tail=11)
    assert window == choose_window(_general(steps), (), tail=11)
    assert (window.first_step, window.last_step, window.rule) == (3, 10, "leading-slow-steps-v2+cut-short-tail")


def test_sanity_rewrites_only_columns_with_bad_values() -> None:
    steps = steps_frame({"step": [1, 2, 3], "step_ms": [1.0, -2.0, math.inf], "tokens_per_s": [5.0, 6.0, None],
                         "loss": [math.nan, 1.0, 2.0]})
    run = checked_run(ParsedRun(source_format="t", format_version=None, steps=steps), Path("x.log"))
    assert run.steps["step_ms"].to_list() == [1.0, None, None]
    assert run.steps["tokens_per_s"].to_list() == [5.0, 6.0, None]
    assert math.isnan(run.steps["loss"][0])  # a diverged loss stays what it was
    assert run.steps.schema == steps.schema
