"""Student's t and the normal distribution, CDF and quantile, in the standard library.

Every verdict of `compare`, `check`, `gate` and `explain` needs Student's t at any degrees of freedom (a floor's
n - 2, Satterthwaite's non-integer ones), and `history` its two-sided p. Why not scipy.special's stdtr / stdtrit:
importing scipy.special is ~0.17 s of CPU beyond numpy (scipy 1.17: its array-API layer loads with it, whichever
function is asked for), more than `import duckdb` itself, paid by each of those commands for a handful of numbers
(benchmarks/bench_startup.py). tests/test_student_t.py holds these to scipy.special to 1e-10 (relative) over a
grid of t, probabilities and degrees of freedom from 0.5 to 1e8.

  t_cdf        P(T <= t) = 1 - I_x(df/2, 1/2) / 2 for t > 0, x = df / (df + t^2): the regularised incomplete beta
               by its continued fraction, evaluated with the modified Lentz method (Numerical Recipes' betai /
               betacf), from the side where it converges (x < (a + 1) / (a + b + 2)), else through
               I_x(a, b) = 1 - I_(1-x)(b, a) with 1 - x = t^2 / (df + t^2) computed directly, so a tail keeps its
               relative precision.
  t_quantile   the t whose upper tail is 1 - q (or lower tail q), by Newton's method on the tail with a bisection
               safeguard inside a bracket that always holds the root.
  log B(a, 1/2)  Gamma(a) / Gamma(a + 1/2) from math.gamma below a = 170, else its asymptotic series (the
               difference of two lgamma values of size a log a would lose ~log10(a log a) digits).
  normal       ndtr(x) = erfc(-x / sqrt 2) / 2 (a tail without cancellation); the quantile is NormalDist's
               (Wichura's AS 241).
"""

from __future__ import annotations

import math
from statistics import NormalDist

_EPS = 1e-16          # the continued fraction stops when a step changes it by less than this, relative
_TINY = 1e-300        # Lentz's guard against a zero denominator
_MAX_TERMS = 100_000  # the fraction needs ~sqrt(df) terms: enough past df = 1e9


def normal_cdf(x: float) -> float:
    """P(Z <= x) for the standard normal."""
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def normal_quantile(q: float) -> float:
    """The x with P(Z <= x) = q, 0 < q < 1."""
    return NormalDist().inv_cdf(q)


def _log_beta_half(a: float) -> float:
    """log B(a, 1/2) = log Gamma(a) + log Gamma(1/2) - log Gamma(a + 1/2)."""
    half = 0.5 * math.log(math.pi)  # log Gamma(1/2)
    if a < 170.0:  # Gamma(a + 1/2) stays finite
        return half + math.log(math.gamma(a) / math.gamma(a + 0.5))
    # log Gamma(a + 1/2) - log Gamma(a) = log(a) / 2 - 1/(8a) + 1/(192 a^3) + 1/(640 a^5) - ...: from a = 170 the
    # terms left out are below 1e-16 of the result
    return half - (0.5 * math.log(a) - 1.0 / (8.0 * a) + 1.0 / (192.0 * a ** 3) + 1.0 / (640.0 * a ** 5))


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b) (Numerical Recipes' betacf), by the modified Lentz method."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _MAX_TERMS):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))  # the even step
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))  # the odd step
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        step = d * c
        h *= step
        if abs(step - 1.0) < _EPS:
            return h
    raise ArithmeticError(f"the incomplete beta's continued fraction did not converge (a={a}, b={b}, x={x})")


def _t_tail(t: float, df: float) -> float:
    """P(T > t) for t >= 0: I_x(df/2, 1/2) / 2, x = df / (df + t^2)."""
    if t == 0.0:
        return 0.5
    if math.isinf(t):
        return 0.0
    a, b = 0.5 * df, 0.5
    t2 = t * t
    x, y = df / (df + t2), t2 / (df + t2)  # y = 1 - x, without the cancellation near t = 0
    # log x as -log1p(t^2 / df): x within 1e-8 of 1 (df = 1e8) would lose half its digits to log(x)
    log_front = -a * math.log1p(t2 / df) + b * math.log(y) - _log_beta_half(a)
    if x < (a + 1.0) / (a + b + 2.0):
        return 0.5 * math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 0.5 - 0.5 * math.exp(log_front) * _beta_fraction(b, a, y) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with df > 0 degrees of freedom (inf: the normal)."""
    if not df > 0:
        raise ValueError(f"degrees of freedom must be positive, not {df}")
    if math.isnan(t):
        return math.nan
    if math.isinf(df):
        return normal_cdf(t)
    tail = _t_tail(abs(t), df)
    return tail if t < 0 else 1.0 - tail


def _t_pdf(t: float, df: float) -> float:
    return math.exp(-(0.5 * df + 0.5) * math.log1p(t * t / df) - 0.5 * math.log(df) - _log_beta_half(0.5 * df))


def _start(p: float, df: float) -> float:
    """A first t for the upper tail p: exact for 1 and 2 degrees of freedom, else the Cornish-Fisher expansion of
    the normal quantile in 1/df (Abramowitz & Stegun 26.7.5) from 3 df, the normal quantile below (left of the
    answer: a t's tail is heavier than the normal's)."""
    if df == 1.0:
        return math.tan(math.pi * (0.5 - p))
    if df == 2.0:
        return (1.0 - 2.0 * p) / math.sqrt(2.0 * p * (1.0 - p))
    z = -normal_quantile(p)
    if df < 3.0:
        return z
    z2 = z * z
    g1 = (z2 + 1.0) * z / 4.0
    g2 = ((5.0 * z2 + 16.0) * z2 + 3.0) * z / 96.0
    g3 = (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) * z / 384.0
    g4 = ((((79.0 * z2 + 776.0) * z2 + 1482.0) * z2 - 1920.0) * z2 - 945.0) * z / 92160.0
    return z + (g1 + (g2 + (g3 + g4 / df) / df) / df) / df


def t_quantile(q: float, df: float) -> float:
    """The t with P(T <= t) = q for Student's t with df > 0 degrees of freedom (inf: the normal), 0 < q < 1."""
    if not df > 0:
        raise ValueError(f"degrees of freedom must be positive, not {df}")
    if not 0.0 < q < 1.0:
        raise ValueError(f"a quantile needs 0 < q < 1, not {q}")
    if math.isinf(df):
        return normal_quantile(q)
    if q == 0.5:
        return 0.0
    p = min(q, 1.0 - q)  # the tail beyond |t|: found on the upper side, its sign set at the end
    # Newton's method on the tail, convex for t > 0: from either side of the answer a step lands on its left, and
    # from there it climbs to it without overshooting. A step out of the bracket (a heavy tail's nearly flat pdf far
    # to the right) bisects instead.
    t, lo, hi = _start(p, df), 0.0, math.inf
    for _ in range(400):
        tail = _t_tail(t, df)
        if tail > p:
            lo = t
        else:
            hi = t
        step = (tail - p) / _t_pdf(t, df)
        nxt = t + step
        if not lo < nxt < hi:
            nxt = 0.5 * (lo + hi) if hi < math.inf else 2.0 * lo
        converged = abs(nxt - t) <= 1e-13 * nxt  # the next step would be below 1e-16 of t
        t = nxt
        if converged:
            break
    return t if q > 0.5 else -t
