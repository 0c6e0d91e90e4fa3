"""One verdict for every comparison of step times: `faster`, `slower`, `no change` or `inconclusive`.

Used by compare, the claims gate, `check` and the dashboard; nothing else decides a verdict.

The unit of comparison is a run. Each side is one or more runs of one lane, each summarised by its
steady-state median with a moving-block bootstrap interval (analysis.stats.RunInterval). The lane's
noise floor (analysis.noise.NoiseFloor) says how far one run's median moves when nothing changes.

Model, on the log scale (a ratio of medians is a difference of logs):
  log median(run) = log(true) + between-run noise (sigma = floor) + within-run sampling (se from its interval)
  d      = log(center(B)) - log(center(A)),  center = median of the side's run medians
  se(d)  = sqrt(e_A * mean(floor^2 + se_r^2 over A) / n_A + e_B * mean(...B) / n_B)
           e = 1 for 1-2 runs (the median is the mean), pi/2 for 3+ (the median's efficiency vs the mean)
  half   = for the default floor: 1.96 x se(d).  For a measured floor: the smaller of
           t(n_runs - 2 df) x se(d)   (a floor from a handful of runs is itself uncertain; the MAD is less
                                       efficient than a standard deviation, hence one df fewer: in simulation
                                       this keeps A/A false alarms <= 5% from 4 runs up, tests/test_verdicts.py)
           1.96 x se(d) with the default floor in place of the floor, when the measured floor is at most
           the default (measuring a quiet lane never makes a verdict harder to reach than not measuring
           it; a lane measured noisier than the default is judged by its own floor and t alone)
  interval for B/A = exp(d -+ half)
Adding the runs' own se_r to the floor counts within-run noise twice (the floor's MAD already contains
it): part of the calibration above (with the floor alone, A/A false alarms reach 5.4-6.7% for 5-10
baseline runs), negligible for long runs, decisive for short ones.

Verdicts (asv's rule: a size factor AND a significance test, each an explicit parameter; pyperf and
Pinpoint: "not significant" / UNKNOWN is a first-class answer):
  slower        the whole interval is above 1 AND B/A >= 1 + min_effect
  faster        the whole interval is below 1 AND B/A <= 1 - min_effect
  no change     the whole interval lies inside +-margin, margin = max(min_effect, floor)
  inconclusive  anything else; `why` says what was missing and `runs_needed` how many more runs of each
                side would settle it if the difference stayed as measured (None when no number would)
With the default floor (fewer than 3 runs in the lane) a change must clear 1.96 x the default floor
(x sqrt(2) for one run against one): anything smaller is inconclusive, never faster or slower.
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass
from typing import Literal, Sequence

from receipts.analysis.figures import CONFIDENCE, RunInterval
from receipts.analysis.noise import DEFAULT_FLOOR_PCT, NoiseFloor
from receipts.analysis.student_t import normal_quantile, t_quantile

Verdict = Literal["faster", "slower", "no change", "inconclusive"]
VERDICTS: tuple[Verdict, ...] = ("faster", "slower", "no change", "inconclusive")
MIN_EFFECT = 0.01       # a change below 1% is not worth a faster/slower verdict (asv's factor; claims' default)
_MAX_RUNS_NEEDED = 100  # beyond this, "more runs" is not advice


@dataclass(frozen=True)
class VerdictResult:
    verdict: Verdict
    ratio: float              # center(B) / center(A) of the metric (step time: > 1 is slower)
    ci_low: float             # interval for the ratio at `confidence`, run-to-run noise included
    ci_high: float
    confidence: float
    z: float                  # log ratio / its standard error
    resolvable_pct: float     # smallest |change| in percent this evidence could call (crit x se, as a ratio)
    margin_pct: float         # the no-change band, +- percent
    min_effect: float         # fraction
    floor: NoiseFloor
    n_a: int                  # runs on each side
    n_b: int
    why: str                  # one line: why this verdict
    runs_needed: int | None   # inconclusive only: more runs of each side that would settle it
    method: str

    @property
    def reading(self) -> str:
        """Where the change stands against the noise and the minimum effect, in words a headline carries. An
        inconclusive result is one of two different things: an interval that holds no change (within the noise),
        or one that excludes it around a change smaller than min_effect (beyond the noise, under the minimum
        effect); a reviewer acts differently on each."""
        effect = f"{100 * self.min_effect:g}% minimum effect"
        if self.verdict in ("faster", "slower"):
            return f"beyond the noise and the {effect}"
        if self.verdict == "no change":
            return f"inside the +-{self.margin_pct:.2f}% no-change band"
        if self.ci_low <= 1.0 <= self.ci_high:
            return "within the noise"
        return f"beyond the noise, under the {effect}"


def _efficiency(n: int) -> float:
    return 1.0 if n <= 2 else math.pi / 2.0


def _se(floor: float, within_a: float, n_a: int, within_b: float, n_b: int) -> float:
    """se of d for a floor (fraction) and each side's mean within-run variance of log medians."""
    f2 = floor * floor
    return math.sqrt(_efficiency(n_a) * (f2 + within_a) / n_a + _efficiency(n_b) * (f2 + within_b) / n_b)


@functools.lru_cache(maxsize=512)
def _quantile(q: float, df: int | None) -> float:
    """Normal (df None) or Student t quantile (analysis/student_t.py: the standard library, not scipy's import)."""
    return normal_quantile(q) if df is None else t_quantile(q, df)


def _half(floor: NoiseFloor, within_a: float, n_a: int, within_b: float, n_b: int,
          confidence: float) -> tuple[float, float]:
    """(half-width of the interval for d, se(d) with the floor as given); see the module docstring."""
    q = 0.5 + confidence / 2.0
    se = _se(floor.fraction, within_a, n_a, within_b, n_b)
    z = _quantile(q, None)
    if floor.source != "lane" or not floor.df or floor.df < 1:
        return z * se, se
    half = _quantile(q, floor.df) * se
    default = DEFAULT_FLOOR_PCT / 100.0
    if floor.fraction <= default:  # a quiet lane: the default rule already covers its noise
        half = min(half, z * _se(default, within_a, n_a, within_b, n_b))
    return half, se


def _decide(d: float, half: float, min_effect: float, margin: float) -> Verdict:
    low, high, ratio = math.exp(d - half), math.exp(d + half), math.exp(d)
    if low > 1.0 and ratio >= 1.0 + min_effect:
        return "slower"
    if high < 1.0 and ratio <= 1.0 - min_effect:
        return "faster"
    if low > 1.0 - margin and high < 1.0 + margin:
        return "no change"
    return "inconclusive"


def decide(a: Sequence[RunInterval], b: Sequence[RunInterval], floor: NoiseFloor, *,
           min_effect: float = MIN_EFFECT, confidence: float = CONFIDENCE, lower_is_better: bool = True,
           grow: Literal["both", "candidate"] = "both") -> VerdictResult | None:
    """The verdict on B (candidate runs) against A (baseline runs) of one lane; None when a side has no run.

    `lower_is_better`: True for step time; False for tokens/s, where a ratio above 1 is `faster`.
    `grow`: which side `runs_needed` adds runs to ("candidate" when the baseline is fixed, e.g. tag:main).
    """
    a = [r for r in a if r is not None and r.median > 0]
    b = [r for r in b if r is not None and r.median > 0]
    if not a or not b:
        return None
    # a few run medians: plain floats (sum in order, as numpy does below 8 values), so a verdict imports no numpy
    within_a = sum(r.log_se ** 2 for r in a) / len(a)
    within_b = sum(r.log_se ** 2 for r in b) / len(b)
    d = math.log(statistics.median(r.median for r in b)) - math.log(statistics.median(r.median for r in a))
    if not lower_is_better:
        d = -d  # decide on the time-like scale; the ratio reported stays in the metric's own direction
    half, se = _half(floor, within_a, len(a), within_b, len(b), confidence)
    margin = max(min_effect, floor.fraction)
    verdict = _decide(d, half, min_effect, margin)
    sign = 1.0 if lower_is_better else -1.0
    ratio, low, high = (math.exp(sign * d), *sorted((math.exp(sign * (d - half)), math.exp(sign * (d + half)))))
    needed = None
    if verdict == "inconclusive":
        needed = _runs_needed(d, within_a, len(a), within_b, len(b), floor, confidence, min_effect, margin, grow)
    why = _why(verdict, d, half, min_effect, margin, floor, len(a), len(b), needed, grow, lower_is_better)
    return VerdictResult(
        verdict, ratio, low, high, confidence, d / se if se > 0 else math.inf, 100.0 * (math.exp(half) - 1.0),
        100.0 * margin, min_effect, floor, len(a), len(b), why, needed,
        f"ratio of run medians with run-to-run noise: log-ratio +- {'t' if floor.source == 'lane' else 'z'} x se, "
        f"se from the noise floor ({floor.floor_pct:.2f}%, {floor.source}) and each run's moving-block bootstrap "
        f"interval; {confidence:.0%}")


def _runs_needed(d, within_a, n_a, within_b, n_b, floor, confidence, min_effect, margin, grow) -> int | None:
    """Fewest extra runs (each side, or the candidate only) after which the same d would be decided."""
    from dataclasses import replace

    target_decided = abs(d) >= math.log1p(min_effect) or abs(d) < math.log1p(margin)
    if not target_decided:
        return None
    for k in range(1, _MAX_RUNS_NEEDED + 1):
        na, nb = (n_a + k, n_b + k) if grow == "both" else (n_a, n_b + k)
        grown = floor
        if floor.source == "lane":  # the new runs land in the lane too: the floor gets firmer
            grown = replace(floor, n_runs=floor.n_runs + (na - n_a) + (nb - n_b))
        elif floor.n_runs + (na - n_a) + (nb - n_b) >= 3:
            grown = replace(floor, source="lane", n_runs=floor.n_runs + (na - n_a) + (nb - n_b))
        half, _ = _half(grown, within_a, na, within_b, nb, confidence)
        if _decide(d, half, min_effect, margin) != "inconclusive":
            return k
    return None


def _why(verdict, d, half, min_effect, margin, floor, n_a, n_b, needed, grow, lower_is_better) -> str:
    # d is on the time-like scale (> 0: slower); the change is quoted in the metric's own direction
    change = 100.0 * (math.exp(d if lower_is_better else -d) - 1.0)
    direction = "slower" if d > 0 else "faster"
    reach = 100.0 * (math.exp(half) - 1.0)
    runs = f"{n_a} run{'s' if n_a != 1 else ''} vs {n_b}"
    if floor.source == "lane":
        noise = f"noise floor {floor.floor_pct:.2f}% measured from {floor.basis or f'{floor.n_runs} runs of the lane'}"
    elif floor.basis:  # a comparison's floor from the baseline's configuration (analysis/configuration.py)
        noise = (f"too few baseline runs to bound this: {floor.basis}, {floor.runs_to_measure} more give a measured "
                 f"floor; default noise floor {floor.floor_pct:g}% assumed")
    else:
        noise = (f"default noise floor {floor.floor_pct:g}%: the lane has {floor.n_runs} run(s), "
                 f"{floor.runs_to_measure} more give it a measured floor")
    if verdict in ("faster", "slower"):
        return (f"{change:+.2f}% ({direction}), beyond the noise: {runs} resolve changes over {reach:.2f}% ({noise})")
    if verdict == "no change":
        return (f"{change:+.2f}%: the interval lies within +-{100 * margin:.2f}% (max of min_effect "
                f"{100 * min_effect:g}% and the noise floor) ({noise})")
    if abs(d) <= half:
        head = f"{change:+.2f}% is within the noise: {runs} resolve only changes over {reach:.2f}%"
    else:
        head = f"{change:+.2f}% is beyond the noise but under min_effect {100 * min_effect:g}% and not inside the +-{100 * margin:.2f}% no-change band"
    who = "each side" if grow == "both" else "the candidate"
    more = (f"; about {needed} more run{'s' if needed != 1 else ''} of {who} would settle it if the difference held"
            if needed else "; more runs would not settle a difference this close to the no-change band")
    return f"{head} ({noise}){more}"
