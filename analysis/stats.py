"""Small, pure statistics helpers for steady-state step times.

The ratio CI is a percentile bootstrap (scipy.stats.bootstrap, independent resampling of both runs'
steady-state steps) of median(B)/median(A), seeded so the same receipts always give the same answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
N_RESAMPLES = 2000
SEED = 20260319  # fixed: a gate must give the same verdict on the same receipts


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
    value: float      # median(b) / median(a)
    ci_low: float
    ci_high: float
    confidence: float
    method: str


def summarize(values: np.ndarray) -> Summary | None:
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return None
    mean = float(x.mean())
    cv = float(x.std(ddof=1) / mean) if x.size > 1 and mean > 0 else 0.0
    p10, med, p90 = np.percentile(x, [10, 50, 90])
    return Summary(int(x.size), float(med), float(p10), float(p90), mean, cv)


def _median_ratio(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(b, axis=axis) / np.median(a, axis=axis)


def ratio_ci(a: np.ndarray, b: np.ndarray, *, confidence: float = CONFIDENCE,
             n_resamples: int = N_RESAMPLES, seed: int = SEED) -> RatioCI | None:
    """Ratio of medians B/A with a percentile-bootstrap CI; None when either side has < 2 values."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if a.size < 2 or b.size < 2:
        return None
    value = float(np.median(b) / np.median(a))
    from scipy import stats  # imported here: scipy costs seconds of start-up every command would pay

    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return RatioCI(value, value, value, confidence, "exact (no variation in either run)")
    res = stats.bootstrap((a, b), _median_ratio, n_resamples=n_resamples, confidence_level=confidence,
                          method="percentile", vectorized=True, paired=False, rng=np.random.default_rng(seed))
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return RatioCI(value, min(low, value), max(high, value), confidence,
                   f"percentile bootstrap of median(B)/median(A), {n_resamples} resamples, seed {seed}")
