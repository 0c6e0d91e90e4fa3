"""The digamma function and its first two derivatives (trigamma, tetragamma) for real x > 0, in the standard library.

`explain` fits the prior of each component's noise to the baseline runs (analysis/explain_noise.lane_prior, Smyth's
moment fit): a handful of these values per explanation. Why not scipy.special's digamma / polygamma: importing
scipy.special is ~0.17 s of CPU, more than `import duckdb` (benchmarks/bench_startup.py), for a few numbers; the
rest of the verdicts' distribution functions are analysis/student_t.py's for the same reason. tests/test_polygamma.py
holds these to scipy.special to 1e-12 (relative) from x = 1e-6 to 1e8.

Each is the recurrence up to x >= SHIFT, then its asymptotic series in 1/x (Abramowitz & Stegun 6.3.18, 6.4.12,
6.4.13; the Bernoulli numbers B2..B12): at x >= 10 the first omitted term is under 1e-15 of the value.
"""

from __future__ import annotations

import math

SHIFT = 10.0
# B_2k for k = 1..6: the series' coefficients
_BERNOULLI = (1.0 / 6.0, -1.0 / 30.0, 1.0 / 42.0, -1.0 / 30.0, 5.0 / 66.0, -691.0 / 2730.0)


def _check(x: float) -> float:
    x = float(x)
    if not x > 0.0 or math.isinf(x):
        raise ValueError(f"polygamma functions here take a finite x > 0, got {x!r}")
    return x


def digamma(x: float) -> float:
    """psi(x) = d/dx log Gamma(x)."""
    x = _check(x)
    shift = 0.0
    while x < SHIFT:          # psi(x) = psi(x + 1) - 1/x
        shift -= 1.0 / x
        x += 1.0
    inv2 = 1.0 / (x * x)
    series = sum(b / (2 * k) * inv2 ** k for k, b in enumerate(_BERNOULLI, start=1))
    return shift + math.log(x) - 0.5 / x - series


def trigamma(x: float) -> float:
    """psi'(x)."""
    x = _check(x)
    shift = 0.0
    while x < SHIFT:          # psi'(x) = psi'(x + 1) + 1/x^2
        shift += 1.0 / (x * x)
        x += 1.0
    inv = 1.0 / x
    series = sum(b * inv ** (2 * k + 1) for k, b in enumerate(_BERNOULLI, start=1))
    return shift + inv + 0.5 * inv * inv + series


def tetragamma(x: float) -> float:
    """psi''(x)."""
    x = _check(x)
    shift = 0.0
    while x < SHIFT:          # psi''(x) = psi''(x + 1) - 2/x^3
        shift -= 2.0 / (x * x * x)
        x += 1.0
    inv = 1.0 / x
    series = sum(b * (2 * k + 1) * inv ** (2 * k + 2) for k, b in enumerate(_BERNOULLI, start=1))
    return shift - inv * inv - inv ** 3 - series
