"""Change points in a lane's series of run medians: E-divisive means with Student t-test confirmation.

The method of Apache Otava (formerly Hunter, Fleming et al., "Hunter: Using Change Point Detection to
Hunt for Performance Regressions", ICPE 2023) and of MongoDB's signal-processing-algorithms, written
here in numpy (apache-otava brings a CLI and database clients the gate must not install):

1. Split (E-divisive means, Matteson & James 2014): within a segment, the candidate is the split tau
   (with a right end kappa) that maximises the energy statistic
       Q(X, Y) = 2/(n+m) sum|X_i - Y_j| - 2m/((n+m)(n-1)) sum_{i<k}|X_i - X_k| - 2n/((n+m)(m-1)) sum_{j<k}|Y_j - Y_k|
   over X = x[start:tau], Y = x[tau:kappa]. Instead of Matteson & James' permutation test (random,
   slow), the candidate is confirmed by a two-sided Student t-test between the two sides (Otava's
   TTestSignificanceTester: "works well even with tiny numbers of points"); a confirmed split is split
   again, at a relaxed p-value (10x, Otava's "weak" change points).
   The t-test is taken twice: with the variance pooled from both sides (Otava's), and with the variance of
   the side before the cut alone (the runs before a change are its baseline). The side after a cut may hold a
   later change too short to confirm (8 runs, then 4 at +2.9%, then 2 back at +0.7%): that mix inflates the
   pooled variance until the first, clear change fails, while the runs before it are unaffected. The smaller
   p-value stands, doubled (Bonferroni over the two tests): on flat series this holds false alarms at or under
   the pooled test's alone (tests/test_history.py).
2. Merge (Otava's merge step): the weakest change point (largest p-value, each one re-tested between
   its neighbouring change points) is removed while its p-value is not below `max_pvalue` or its
   relative change is below `min_magnitude`; neighbours are re-tested after each removal.

Deterministic (no permutations). Cost O(n^2) per segment in memory and time: lane histories are
dozens to hundreds of runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from receipts.analysis.student_t import t_cdf

MAX_PVALUE = 0.001     # Otava's default: a change point is a strong statement about a whole history
MIN_MAGNITUDE = 0.01   # relative change of the mean (1%: the verdicts' min_effect); 0 disables


@dataclass(frozen=True)
class ChangePoint:
    index: int            # first element of the new segment
    pvalue: float         # t-tests of the segment before vs the segment after (between neighbours), see above
    mean_before: float
    mean_after: float

    @property
    def rel_change(self) -> float:
        """(mean after - mean before) / |mean before| (give raw values, not logs)."""
        return (self.mean_after - self.mean_before) / abs(self.mean_before) if self.mean_before else math.inf


def _candidate(x: np.ndarray) -> tuple[int, float] | None:
    """(tau, Q) maximising the E-divisive statistic over splits x[:tau] | x[tau:kappa]; None if len < 2."""
    n = x.size
    if n < 2:
        return None
    d = np.abs(x[:, None] - x[None, :])
    p = np.zeros((n + 1, n + 1))
    p[1:, 1:] = d.cumsum(0).cumsum(1)  # p[a, b] = sum of d[:a, :b]
    tau = np.arange(1, n)[:, None]         # left  = x[:tau]
    kappa = np.arange(2, n + 1)[None, :]   # right = x[tau:kappa]
    valid = kappa > tau
    tk = np.where(valid, kappa, tau + 1)
    ptt, ptk, pkk = p[tau, tau], p[tau, tk], p[tk, tk]
    between = ptk - ptt
    within_l = ptt / 2.0
    within_r = (pkk - 2.0 * ptk + ptt) / 2.0
    nl, nr = tau.astype(float), (tk - tau).astype(float)
    tot = nl + nr
    with np.errstate(divide="ignore", invalid="ignore"):
        q = (2.0 / tot * between
             - np.where(nl > 1, 2.0 * nr / (tot * (nl - 1)), 0.0) * within_l
             - np.where(nr > 1, 2.0 * nl / (tot * (nr - 1)), 0.0) * within_r)
    q = np.where(valid, q, -np.inf)
    i, j = np.unravel_index(int(np.argmax(q)), q.shape)
    return int(tau[i, 0]), float(q[i, j])


def _ttest(left: np.ndarray, right: np.ndarray) -> float:
    """Student's two-sample t-test, pooled variance, two-sided: scipy.stats.ttest_ind(equal_var=True)'s p-value,
    spelled out over Student's t (analysis/student_t.py; importing scipy.stats took 0.6 s of a lane history's 2)."""
    if left.size + right.size < 3:
        return 1.0
    if np.ptp(np.concatenate([left, right])) == 0:
        return 1.0
    n1, n2 = left.size, right.size
    df = n1 + n2 - 2
    # (n - 1) x the variance of each side is its sum of squared deviations: 0 for a side of one run, as scipy has it
    pooled = (np.sum((left - left.mean()) ** 2) + np.sum((right - right.mean()) ** 2)) / df
    with np.errstate(divide="ignore"):
        t = (left.mean() - right.mean()) / np.sqrt(pooled * (1.0 / n1 + 1.0 / n2))
    # both sides constant, different values: t is infinite, p 0 (as different as data can be)
    return 2.0 * t_cdf(-abs(float(t)), df)


def _ttest_before(left: np.ndarray, right: np.ndarray) -> float:
    """Two-sided t-test of the mean after against the mean before, with the variance of the side before alone:
    (mean_r - mean_l) / (s_l sqrt(1/n_l + 1/n_r)) is Student t on n_l - 1 df when nothing changed. 1 with fewer
    than 3 runs before (no spread worth the name) or none of them apart."""
    if left.size < 3 or right.size < 1:
        return 1.0
    s = float(np.std(left, ddof=1))
    if s == 0:
        return 1.0
    t = (right.mean() - left.mean()) / (s * np.sqrt(1.0 / left.size + 1.0 / right.size))
    return 2.0 * t_cdf(-abs(float(t)), left.size - 1)


def _test(left: np.ndarray, right: np.ndarray) -> float:
    """The cut's p-value: the smaller of the pooled and the before-side t-tests, doubled (Bonferroni)."""
    return min(1.0, 2.0 * min(_ttest(left, right), _ttest_before(left, right)))


def _stats(x: np.ndarray, cuts: list[int]) -> list[ChangePoint]:
    """Each cut re-tested between its neighbouring cuts."""
    bounds = [0, *cuts, x.size]
    out = []
    for k, c in enumerate(cuts):
        left, right = x[bounds[k]:c], x[c:bounds[k + 2]]
        out.append(ChangePoint(c, _test(left, right), float(left.mean()), float(right.mean())))
    return out


def change_points(series: Sequence[float], *, max_pvalue: float = MAX_PVALUE,
                  min_magnitude: float = MIN_MAGNITUDE) -> tuple[ChangePoint, ...]:
    """Change points of `series` (in order), each the first index of a new segment."""
    x = np.asarray(series, dtype=float)
    if x.size < 3 or not np.all(np.isfinite(x)):
        return ()
    weak_p = max_pvalue * 10 if max_pvalue < 0.05 else max_pvalue
    cuts: list[int] = []
    todo = [(0, x.size)]
    while todo:  # split: recursive bisection of each segment at its E-divisive candidate
        lo, hi = todo.pop()
        found = _candidate(x[lo:hi])
        if found is None:
            continue
        tau = lo + found[0]
        if _test(x[lo:tau], x[tau:hi]) < weak_p:
            cuts.append(tau)
            todo += [(lo, tau), (tau, hi)]
    cuts.sort()
    while cuts:  # merge: drop the weakest until every survivor is significant and large enough
        points = _stats(x, cuts)
        weakest = max(points, key=lambda c: c.pvalue)
        if weakest.pvalue < max_pvalue:
            weakest = min(points, key=lambda c: abs(c.rel_change))
            if abs(weakest.rel_change) >= min_magnitude:
                return tuple(points)
        cuts.remove(weakest.index)
    return ()
