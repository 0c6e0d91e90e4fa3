"""analysis/student_t.py against scipy.special (stdtr, stdtrit, ndtr, ndtri), the functions it stands in for: every
verdict's Student t without scipy's import. Relative 1e-10 over a grid of t, probabilities and degrees of freedom
(integer and not, 0.5 to 1e6: a floor's n - 2, Satterthwaite's between), tails to 1e-300 included."""

from __future__ import annotations

import math

import pytest

from receipts.analysis.student_t import normal_cdf, normal_quantile, t_cdf, t_quantile

special = pytest.importorskip("scipy.special")

DFS = (0.5, 0.9, 1, 1.5, 2, 2.5, 3, 4, 5, 5.7, 6, 7, 8, 10, 13.3, 20, 30, 47.2, 100, 169.9, 170, 170.2, 333.3,
       1e3, 2718.3, 1e4, 1e5, 1e6)
TS = (1e-3, 0.1, 0.5, 1, 1.5, 1.73, 1.96, 2, 2.5, 3, 4, 5, 7, 10, 20, 50, 100, 1e3, 1e5)
QS = (1e-12, 1e-8, 1e-5, 1e-3, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.4, 0.6, 0.75, 0.9, 0.95, 0.975, 0.99, 0.995,
      0.999, 1 - 1e-5, 1 - 1e-8)
REL = 1e-10


def _close(mine: float, theirs: float) -> bool:
    return abs(mine - theirs) <= REL * abs(theirs)


def test_the_cdf_is_scipys_stdtr():
    wrong = []
    for df in DFS:
        for t in TS:
            for x in (t, -t):
                theirs = float(special.stdtr(df, x))
                if theirs < 1e-300:  # subnormal: scipy keeps digits a double cannot hold relative to anything
                    assert t_cdf(x, df) < 1e-300
                    continue
                if not _close(t_cdf(x, df), theirs):
                    wrong.append((df, x, t_cdf(x, df), theirs))
    assert not wrong, wrong[:5]


def test_the_quantile_is_scipys_stdtrit():
    wrong = [(df, q, t_quantile(q, df), float(special.stdtrit(df, q))) for df in DFS for q in QS
             if not _close(t_quantile(q, df), float(special.stdtrit(df, q)))]
    assert not wrong, wrong[:5]


def test_quantile_and_cdf_invert_each_other():
    for df in DFS:
        for q in QS:
            assert abs(t_cdf(t_quantile(q, df), df) - q) <= REL * min(q, 1 - q)


def test_the_middle_and_the_ends():
    for df in DFS:
        assert t_cdf(0.0, df) == 0.5 and t_quantile(0.5, df) == 0.0
        assert t_cdf(math.inf, df) == 1.0 and t_cdf(-math.inf, df) == 0.0
        # symmetric: the lower tail is the upper one, to the bit
        assert all(t_cdf(-t, df) == 1.0 - t_cdf(t, df) or _close(t_cdf(-t, df), 1.0 - t_cdf(t, df)) for t in TS[:8])
    # the Cauchy distribution (df 1) in closed form, where scipy's stdtr itself drifts near 0 (1.6e-9 at t = 1e-8)
    for t in (1e-8, 1e-4, 0.3, 1.0, 12.0):
        assert _close(t_cdf(-t, 1), 0.5 - math.atan(t) / math.pi)
    assert math.isnan(t_cdf(math.nan, 3))
    for bad in (0, -1, math.nan):
        with pytest.raises(ValueError):
            t_cdf(1.0, bad)
    for q in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError):
            t_quantile(q, 4)


def test_infinite_degrees_of_freedom_are_the_normal():
    for x in (-37.0, -20.0, -8.0, -3.0, -1.96, -0.5, 0.0, 0.5, 1.96, 3.0, 8.0):
        assert _close(normal_cdf(x), float(special.ndtr(x)))
        assert t_cdf(x, math.inf) == normal_cdf(x)
    for q in QS:
        assert _close(normal_quantile(q), float(special.ndtri(q)))
        assert t_quantile(q, math.inf) == normal_quantile(q)


def test_beyond_a_million_degrees_of_freedom_still_close():
    """Past df = 1e6 the continued fraction's own rounding grows (x within 3 / df of 1, where it converges slowest):
    1e-8 at df = 1e8. No receipts test reaches that: Satterthwaite's df is at most the runs' and steps' count."""
    for df in (1e7, 1e8):
        for t in (0.5, 1.5, 1.96, 2.5, 5.0):
            assert abs(t_cdf(-t, df) - float(special.stdtr(df, -t))) <= 1e-7 * float(special.stdtr(df, -t))
        assert abs(t_quantile(0.975, df) - float(special.stdtrit(df, 0.975))) <= 1e-8
