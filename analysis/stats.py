"""Small, pure statistics helpers for one run's steady-state step times.

The unit of comparison is a run (issue 12): a run is summarised by its steady-state median with a
**moving-block bootstrap** interval. Steps are autocorrelated (a slow data-loader stretch, a thermal
drift, a periodic checkpoint make neighbouring steps alike), so resampling single steps as if they
were independent gives intervals far too narrow for long runs ([2.713, 2.713] on logs with thousands
of steps). The moving-block bootstrap (Kuensch 1989) resamples contiguous blocks of `block_length`
steps, keeping the dependence inside a block.

Block length: the Politis-White rule (Politis & White 2004, with the correction of Patton, Politis &
White 2009), the data-driven choice `arch.bootstrap.optimal_block_length` makes, implemented here in
numpy (a few dot products) so the gate does not need arch and its pandas/statsmodels. It estimates the
autocovariances up to the first run of insignificant ones and returns the MSE-optimal block for the
circular/moving-block bootstrap, b = (2 G^2 / D)^(1/3) n^(1/3) (the n^(1/3) rate of Hall, Horowitz
& Jing 1995). Independent steps give b ~ 1 (the ordinary bootstrap); strongly autocorrelated steps
give long blocks. It is clipped to [1, min(3 sqrt(n), n / 3)] like arch.

What the interval is NOT: it says how well this run's steps pin down this run's median. It says
nothing about the next run of the same configuration; that is the lane's noise floor
(analysis.noise), and verdicts combine both (analysis.verdict).

Deterministic: fixed seed, so the same receipts always give the same interval and the same verdict.
With a block length of 1 the resample medians are drawn exactly from their bootstrap distribution
through order statistics instead of materialising every resample: the median of n draws with
replacement from sorted x is x[floor(n * U_(m))], with U_(m) the m-th order statistic of n uniforms
~ Beta(m, n - m + 1) (for even n the next one, U_(m+1) = U_(m) + (1 - U_(m)) * Beta(1, n - m)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
N_RESAMPLES = 2000  # percentile interval at 95%: 50 resamples in each tail; more moves the ends < 0.1%
SEED = 20260319     # fixed: a gate must give the same verdict on the same receipts
_CHUNK_VALUES = 2_000_000  # resample values materialised at once (16 MB of float64)


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    p10: float
    p90: float
    mean: float
    cv: float  # coefficient of variation (std / mean), a fraction


@dataclass(frozen=True)
class RatioCI:
    """A ratio B/A with its interval (from analysis.verdict.decide: run-to-run noise included)."""
    value: float
    ci_low: float
    ci_high: float
    confidence: float
    method: str


@dataclass(frozen=True)
class RunInterval:
    """One run's steady-state median and its moving-block bootstrap interval (same unit as the input)."""
    n: int                 # steady steps used
    median: float
    ci_low: float
    ci_high: float
    confidence: float
    block_length: int      # steps per resampled block (1: the steps look independent)
    method: str

    @property
    def log_se(self) -> float:
        """Standard error of log(median) implied by the interval (a fraction: 0.003 = 0.3%)."""
        if self.ci_low <= 0 or self.ci_high <= 0:
            return math.inf
        return (math.log(self.ci_high) - math.log(self.ci_low)) / (2.0 * _z(self.confidence))


def _z(confidence: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def summarize(values: np.ndarray) -> Summary | None:
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return None
    mean = float(x.mean())
    cv = float(x.std(ddof=1) / mean) if x.size > 1 and mean > 0 else 0.0
    p10, med, p90 = np.percentile(x, [10, 50, 90])
    return Summary(int(x.size), float(med), float(p10), float(p90), mean, cv)


def block_length(x: np.ndarray) -> int:
    """Politis-White (2004; Patton, Politis & White 2009) block length for the moving-block bootstrap.

    Follows arch.bootstrap.optimal_block_length's circular-block estimate: the flat-top lag window is
    cut at twice the first lag m after which kn = max(5, log10 n) autocorrelations in a row are
    insignificant (|rho| < 2 sqrt(log10 n / n)); then G = sum lambda(k/M) |k| gamma(k),
    g(0) = sum lambda(k/M) gamma(k) and b = (2 G^2 / (4/3 g(0)^2))^(1/3) n^(1/3).
    """
    x = np.asarray(x, dtype=float)
    n = x.size
    if n < 8:
        return 1
    eps = x - x.mean()
    gamma0 = float(eps @ eps) / n
    if gamma0 <= 0:
        return 1
    kn = max(5, int(math.log10(n)))
    m_max = int(math.ceil(math.sqrt(n))) + kn
    m_max = min(m_max, n - 2)
    critical = 2.0 * math.sqrt(math.log10(n) / n)
    acov = np.array([float(eps[k:] @ eps[:n - k]) / n for k in range(m_max + 1)])
    rho = np.abs(acov / gamma0)
    first_quiet = None
    for m in range(1, m_max - kn + 2):
        if np.all(rho[m:m + kn] < critical):
            first_quiet = m - 1
            break
    lag = m_max if first_quiet is None else min(2 * max(first_quiet, 1), m_max)
    k = np.arange(1, lag + 1)
    window = np.where(k / lag <= 0.5, 1.0, 2.0 * (1.0 - k / lag))  # the flat-top (trapezoid) lag window
    g = float(np.sum(2.0 * window * k * acov[1:lag + 1]))
    long_run = acov[0] + float(np.sum(2.0 * window * acov[1:lag + 1]))
    if long_run <= 0:
        return 1
    b = ((2.0 * g * g) / (4.0 / 3.0 * long_run * long_run)) ** (1.0 / 3.0) * n ** (1.0 / 3.0)
    b_max = math.ceil(min(3.0 * math.sqrt(n), n / 3.0))
    return int(min(max(1, round(b)), b_max))


def bootstrap_medians(x: np.ndarray, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Medians of `n_resamples` i.i.d. bootstrap resamples of x, drawn through the uniform order statistics."""
    xs = np.sort(x)
    n = xs.size
    m = (n + 1) // 2
    lower = rng.beta(m, n - m + 1, n_resamples)
    lo = xs[np.minimum((lower * n).astype(np.int64), n - 1)]
    if n % 2:
        return lo
    upper = lower + (1.0 - lower) * rng.beta(1, n - m, n_resamples)
    hi = xs[np.minimum((upper * n).astype(np.int64), n - 1)]
    return (lo + hi) / 2.0


def block_bootstrap_medians(x: np.ndarray, length: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Medians of moving-block bootstrap resamples: ceil(n / length) blocks of `length` consecutive values,
    block starts uniform over the n - length + 1 possible ones, concatenated and cut to n values."""
    n = x.size
    if length <= 1:
        return bootstrap_medians(x, n_resamples, rng)
    n_blocks = -(-n // length)
    offsets = np.arange(length)
    out = np.empty(n_resamples)
    per_chunk = max(1, _CHUNK_VALUES // (n_blocks * length))
    for lo in range(0, n_resamples, per_chunk):
        hi = min(n_resamples, lo + per_chunk)
        starts = rng.integers(0, n - length + 1, (hi - lo, n_blocks))
        idx = (starts[:, :, None] + offsets).reshape(hi - lo, -1)[:, :n]
        out[lo:hi] = np.median(x[idx], axis=1)
    return out


def median_interval(values: np.ndarray, *, confidence: float = CONFIDENCE, n_resamples: int = N_RESAMPLES,
                    seed: int = SEED, length: int | None = None) -> RunInterval | None:
    """A run's steady-state median with a percentile moving-block bootstrap interval.

    `values` in step order (the order carries the autocorrelation). `length` overrides the Politis-White
    block length. None when fewer than 2 finite values.
    """
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if x.size < 2:
        return None
    median = float(np.median(x))
    if np.ptp(x) == 0:
        return RunInterval(int(x.size), median, median, median, confidence, 1, "exact (no variation in the run)")
    b = block_length(x) if length is None else max(1, min(int(length), x.size))
    medians = block_bootstrap_medians(x, b, n_resamples, np.random.default_rng(seed))
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(medians, [alpha, 1.0 - alpha])
    return RunInterval(int(x.size), median, min(float(low), median), max(float(high), median), confidence, b,
                       f"moving-block bootstrap of the median, block {b} steps (Politis-White), "
                       f"{n_resamples} resamples, seed {seed}")
