"""The step window: which steps are steady state, and which are warm-up / compile (badput).

Markers first: a native `phase` record named compile / warmup / warm-up marks its steps as warm-up.
Without markers, the documented rule `leading-slow-steps-v1`:
  1. the first logged step is always warm-up when there are >= 4 steps (first-step allocation,
     lazy init, cuDNN autotune and torch.compile all land there);
  2. the warm-up then lasts until the first run of SETTLE_RUN consecutive steps that are all within
     1.25 x the median of the second half (compile and autotuning settle early; an isolated slow step
     later - a log flush, a periodic eval sync - is steady-state noise, not warm-up), capped at half the log;
  3. steps with no step time never count as steady state.
The rule is stored on the receipt (window_rule) and always shown beside the numbers.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import polars as pl

# Choosing a window is here; applying one (mark_warmup) is the model's, re-exported for callers of this module.
from receipts.schema.model import Steps, StepWindow, mark_warmup, one_row_per_step

WARMUP_PHASES = ("compile", "warmup", "warm-up", "warm_up")
SLOW_FACTOR = 1.25
SETTLE_RUN = 5
# A final step shorter than this fraction of the median steady step (or with that little GPU work) was cut short.
TAIL_FRACTION = 0.1
MIN_STEADY_STEPS = 3  # a window with fewer says so
RULE_NAME = "leading-slow-steps-v2"


def _step_times(steps: Steps) -> pl.LazyFrame:
    """step, step_ms: one time per step (the slowest rank: a step ends when its last rank does), in step order,
    strictly increasing steps whichever path made them. The caller collects one column at a time: from a spilled
    frame a column is read in row groups and copied whole into one array, 16 B a step while it is made."""
    timed = steps.lazy().select("step", "rank", "step_ms").filter(pl.col("step_ms").is_not_null())
    if not one_row_per_step(timed):
        timed = timed.group_by("step").agg(pl.col("step_ms").max()).sort("step")
    return timed


def _column(frame: pl.LazyFrame, name: str) -> np.ndarray:
    return frame.select(name).collect().to_series().to_numpy()


def warmup_steps_from_phases(phases: tuple[tuple[str, int | None, int | None], ...]) -> int | None:
    """Last warm-up step named by markers, or None when no marker names one."""
    last = None
    for name, first, final in phases:
        if name.lower() in WARMUP_PHASES:
            candidate = final if final is not None else first
            if candidate is not None:
                last = candidate if last is None else max(last, candidate)
    return last


def choose_window(steps: Steps, phases: tuple[tuple[str, int | None, int | None], ...], *,
                  tail: int | None = None) -> StepWindow:
    """`tail`: a last step known to be cut short (cut_short_tail), left out of the steady window."""
    timed = _step_times(steps)
    # the times first, then the step numbers, never both: 8 B a step each, 80 MB at 10M steps
    ms = _column(timed, "step_ms")  # numpy, not lists: a log's series runs to millions of steps
    if ms.size == 0:
        return StepWindow(None, None, 0, None, "no step times", 0)
    marker_last = warmup_steps_from_phases(phases)
    settled_at = None  # position of the first steady step, by the slow-steps rule
    if marker_last is not None:
        names = sorted({n for n, _, _ in phases if n.lower() in WARMUP_PHASES})
        rule = "marker:" + "+".join(names)
    else:
        rule = RULE_NAME
        if tail is not None and timed.select(pl.col("step").last()).collect().item() == tail:
            ms = ms[:-1]  # a cut-short tail is no steady step: the rule judges the others without it
        settled_at = first_steady(ms) or None
    del ms
    step_nums = _column(timed, "step")
    warmup_last = marker_last if settled_at is None else int(step_nums[settled_at - 1])
    if tail is not None and bool((step_nums == tail).any()):
        rule += "+cut-short-tail"
    steady = np.ones(step_nums.size, dtype=bool) if warmup_last is None else step_nums > warmup_last
    if tail is not None:
        steady &= step_nums != tail
    n_steady = int(np.count_nonzero(steady))
    # the first and last steady step by position (no array of positions: 8 bytes a step at millions of steps)
    first, last = int(np.argmax(steady)), step_nums.size - 1 - int(np.argmax(steady[::-1]))
    return StepWindow(
        first_step=int(step_nums[first]) if n_steady else None,
        last_step=int(step_nums[last]) if n_steady else None,
        warmup_steps=int(step_nums.size - n_steady),
        warmup_last_step=warmup_last,
        rule=rule,
        n_steady=n_steady,
    )


def first_steady(ms: np.ndarray) -> int:
    """The position of the first steady step of a series of step times by the leading-slow-steps rule (see the
    module docstring); 0 when it marks no warm-up (fewer than 4 steps)."""
    n = ms.size
    if n < 4:
        return 0
    half = n // 2
    return _settled(ms, SLOW_FACTOR * cast(float, pl.Series(ms[half:]).median()), half)


def _settled(ms: np.ndarray, limit: float, half: int) -> int:
    """The first i in 1..half where the SETTLE_RUN steps from i (fewer at the end) are all <= limit, else half.

    Such a first i is 1 or follows a slow step (were i - 1 not slow, i - 1 would qualify first), so only the
    slow steps among the first half + SETTLE_RUN are looked at: memory in the slow steps, not the run's length."""
    end = min(half + SETTLE_RUN, ms.size)
    slow = np.flatnonzero(~(ms[1:end] <= limit)) + 1  # NaN counts as slow
    starts = np.concatenate(([1], slow + 1))
    starts = starts[starts <= half]
    next_slow = np.append(slow, ms.size)[np.searchsorted(slow, starts)]  # first slow step at or after each start
    quiet = next_slow >= np.minimum(starts + SETTLE_RUN, ms.size)
    return int(starts[np.argmax(quiet)]) if quiet.any() else half


def cut_short_tail(steps: pl.DataFrame, busy_ms: dict[int, float] | None = None) -> int | None:
    """The last step when it was cut short: a profiler's final step often closes as the capture stops, with
    no GPU work or a few microseconds of it (a tail, not a steady step). Returns that step or None.
    `steps` carries step and step_ms; `busy_ms` the GPU busy time per step where a profile knows it.

    A last step without GPU work, in a profile whose other steps have some, is the tail whatever the number of
    steps. Otherwise (3 steps or more) the last step is judged against the steady steps before it only (the
    warm-up rule over them): its time, or its GPU work, under TAIL_FRACTION of their median. Against all the
    steps, a compile or graph-capture step (ten times a steady step's work) made a full last step look cut short."""
    timed = _step_times(steps)  # a profile's steps: thousands, not millions
    step_nums, ms = _column(timed, "step"), _column(timed, "step_ms")
    if step_nums.size < 2:
        return None
    last = int(step_nums[-1])
    busy = {} if busy_ms is None else busy_ms
    if busy_ms is not None and busy.get(last, 0.0) <= 0.0 and any(v > 0 for k, v in busy.items() if k != last):
        return last
    if step_nums.size < 3:
        return None
    steady = slice(first_steady(ms[:-1]), step_nums.size - 1)
    tail_ms = float(ms[-1])
    short = tail_ms < TAIL_FRACTION * float(np.median(ms[steady]))
    no_work = busy_ms is not None and busy.get(last, 0.0) < TAIL_FRACTION * float(
        np.median([busy.get(int(s), 0.0) for s in step_nums[steady]]))
    return last if short or no_work else None


def few_steady_steps(window: StepWindow) -> str | None:
    """A warning when the window holds fewer than MIN_STEADY_STEPS steady steps: its figures are those few steps,
    not the steady state of a run (said, never averaged silently)."""
    if window.first_step is None or window.n_steady >= MIN_STEADY_STEPS:
        return None
    which = (f"step {window.first_step}" if window.first_step == window.last_step
             else f"steps {window.first_step}..{window.last_step}")
    return (f"only {window.n_steady} steady step{'s' if window.n_steady != 1 else ''} ({which}, rule {window.rule}): "
            f"too few for a steady state (at least {MIN_STEADY_STEPS}); its median is those steps' own")


def in_window(steps: pl.DataFrame, window: StepWindow) -> pl.DataFrame:
    """A profile's per-step frame with `warmup` set from the receipt's window (mark_warmup), so the anatomy's
    steady state is the receipt's; a step-less row (null step) stays steady. A window without steady steps
    leaves the profile's own marking."""
    if window.first_step is None or window.last_step is None:
        return steps
    return mark_warmup(steps, window).with_columns(pl.col("warmup").fill_null(False))
