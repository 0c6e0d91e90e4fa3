"""Small, pure statistics helpers for steady-state step times.

The ratio CI is a percentile bootstrap of median(B)/median(A): both runs' steady-state steps are
resampled independently, seeded so the same receipts always give the same answer. The resample
medians are drawn exactly from their bootstrap distribution through order statistics instead of
materialising every resample: the median of n draws with replacement from sorted x is
x[floor(n * U_(m))], with U_(m) the m-th order statistic of n uniforms ~ Beta(m, n - m + 1) (and for
even n the next one, U_(m+1) = U_(m) + (1 - U_(m)) * Beta(1, n - m)). Same distribution as
scipy.stats.bootstrap's percentile method, in O(n log n + resamples) instead of O(n * resamples).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
N_RESAMPLES = 4000
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


def bootstrap_medians(x: np.ndarray, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Medians of `n_resamples` bootstrap resamples of x, drawn through the uniform order statistics."""
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


def ratio_ci(a: np.ndarray, b: np.ndarray, *, confidence: float = CONFIDENCE,
             n_resamples: int = N_RESAMPLES, seed: int = SEED) -> RatioCI | None:
    """Ratio of medians B/A with a percentile-bootstrap CI; None when either side has < 2 values."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if a.size < 2 or b.size < 2:
        return None
    value = float(np.median(b) / np.median(a))
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return RatioCI(value, value, value, confidence, "exact (no variation in either run)")
    rng = np.random.default_rng(seed)
    ratios = bootstrap_medians(b, n_resamples, rng) / bootstrap_medians(a, n_resamples, rng)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(ratios, [alpha, 1.0 - alpha])
    return RatioCI(value, min(float(low), value), max(float(high), value), confidence,
                   f"percentile bootstrap of median(B)/median(A), {n_resamples} resamples, seed {seed}")
