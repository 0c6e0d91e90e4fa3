"""A lane's run-to-run noise floor: how much one run's steady-state median moves when nothing changes.

Eight runs of one unchanged configuration on one H100 have medians 22.11..22.57 ms: about
2% apart with nothing changed, while each run's own interval is a fraction of that. That spread between
runs is the noise a verdict must clear; no amount of steps inside one run measures it.

Estimated from the lane's own current runs once it has at least MIN_RUNS, robustly: the median
absolute deviation of the run medians, scaled to a normal sigma (x 1.4826), relative to the median of
the run medians. One outlier run (a throttled GPU, a noisy neighbour) moves a MAD little, where it
would inflate a standard deviation.

With fewer runs the floor is DEFAULT_FLOOR_PCT, said to be a default. 1.5% is about twice the sigma
8 A/A runs of one quiet H100 give (a 2% range over 8 normal draws is ~2.85 sigma: sigma ~ 0.7%), because a
lane nobody has measured may be a multi-GPU or multi-node one, where collectives, stragglers and node
placement add run-to-run variance a single quiet H100 does not have. With it, a one-run-vs-one-run
difference must exceed 1.96 x sqrt(2) x 1.5% ~ 4.2% to be called, close to the 5% factor this
project's lane history used before it had a measured floor (seed notes: steady medians wobble 1-3%).

The floor is a relative sigma of ONE run's median, in percent of the lane's median; it includes the
within-run sampling noise of those medians. MIN_FLOOR_PCT keeps a MAD of 0 (run medians tied by a
log's rounding) from making every difference "significant".
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Literal, Sequence

MIN_RUNS = 3                 # fewer runs than this: no MAD worth the name; the default floor is used
DEFAULT_FLOOR_PCT = 1.5      # percent; see the module docstring for the source
MIN_FLOOR_PCT = 0.1          # percent; below this a GPU run-to-run floor is not credible (clocks, thermals)
MAD_TO_SIGMA = 1.4826        # MAD of a normal sample x this = its sigma (for large samples)
# Croux & Rousseeuw (1992) small-sample factors b_n: 1.4826 x MAD is biased low for a handful of runs
# (at n = 5 by ~20%), and an underestimated floor is a false "faster"/"slower". n > 9: n / (n - 0.8).
_SMALL_SAMPLE = {2: 1.196, 3: 1.495, 4: 1.363, 5: 1.206, 6: 1.200, 7: 1.140, 8: 1.129, 9: 1.107}


def mad_factor(n: int) -> float:
    """Small-sample correction b_n for 1.4826 x MAD of n values."""
    return _SMALL_SAMPLE.get(n, n / (n - 0.8) if n > 9 else 1.0)
FLOOR_WINDOW = 20            # the lane's most recent current runs a floor is estimated from

FloorSource = Literal["lane", "default"]


@dataclass(frozen=True)
class NoiseFloor:
    n_runs: int                   # runs with a steady-state median the estimate could use
    floor_pct: float              # relative sigma of one run's median, percent (0.7 = 0.7%)
    source: FloorSource           # 'lane': measured from run_ids; 'default': fewer than MIN_RUNS runs
    run_ids: tuple[str, ...]      # the runs it was measured from (all usable runs, also for a default)
    center_ms: float | None       # median of the run medians (ms), None without runs
    note: str                     # one line: how it was obtained
    basis: str = ""               # which runs: '4 runs tagged main' (analysis/configuration.py); '' = the lane's

    @property
    def fraction(self) -> float:
        return self.floor_pct / 100.0

    @property
    def df(self) -> int | None:
        """Degrees of freedom a verdict gives a measured floor: n_runs - 2 (a MAD is less efficient than a
        standard deviation's n - 1; analysis.verdict); None for the default, which is not estimated."""
        return self.n_runs - 2 if self.source == "lane" else None

    @property
    def runs_to_measure(self) -> int:
        """More runs the lane needs before its own floor replaces the default (0 when measured)."""
        return max(0, MIN_RUNS - self.n_runs)


def noise_floor(runs: Sequence[tuple[str, float]], *, min_runs: int = MIN_RUNS,
                default_pct: float = DEFAULT_FLOOR_PCT) -> NoiseFloor:
    """The noise floor from (run id, steady-state median) pairs of one lane's current runs.

    Runs whose median is missing or not positive are left out (they have no steady-state steps).
    """
    # A lane's floor comes from at most FLOOR_WINDOW run medians: plain floats, and `show` pays no numpy import.
    usable = [(rid, float(m)) for rid, m in runs if m is not None and math.isfinite(m) and m > 0]
    ids = tuple(rid for rid, _ in usable)
    medians = [m for _, m in usable]
    center = statistics.median(medians) if medians else None
    if len(medians) < min_runs:
        have = f"{len(medians)} run{'s' if len(medians) != 1 else ''}"
        return NoiseFloor(len(medians), default_pct, "default", ids, center,
                          f"default {default_pct:g}% (the lane has {have} with a steady state; "
                          f"{min_runs - len(medians)} more give it a measured floor)")
    assert center is not None  # len(medians) >= min_runs >= 1
    mad = statistics.median(abs(m - center) for m in medians)
    b = mad_factor(len(medians))
    pct = max(MIN_FLOOR_PCT, 100.0 * b * MAD_TO_SIGMA * mad / center)
    clamp = f" (MAD below the {MIN_FLOOR_PCT:g}% minimum)" if pct == MIN_FLOOR_PCT else ""
    return NoiseFloor(len(medians), pct, "lane", ids, center,
                      f"{pct:.2f}% = {b:.3f} x 1.4826 x MAD of {len(medians)} run medians / their median "
                      f"{center:.4g} ms{clamp}")


def default_floor() -> NoiseFloor:
    """The floor used when nothing is known about the lane's runs."""
    return noise_floor([])


def floor_json(f: NoiseFloor | None) -> dict[str, Any] | None:
    """A noise floor as `--json` shows it everywhere (show, compare, history, check)."""
    if f is None:
        return None
    out = asdict(f)
    out["run_ids"] = list(f.run_ids)
    out["runs_to_measure"] = f.runs_to_measure
    return out
