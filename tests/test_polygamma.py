"""analysis/polygamma.py against scipy.special (digamma, polygamma(1), polygamma(2)), the functions it stands in for
in the noise prior's fit (analysis/explain_noise.lane_prior) without scipy's import: 1e-12 of the value (of 1 near
digamma's root) from x = 1e-6 to 1e8, and the limits the fit relies on."""

from __future__ import annotations

import math

import pytest

from receipts.analysis.explain_noise import _trigamma_inverse
from receipts.analysis.polygamma import SHIFT, digamma, tetragamma, trigamma

special = pytest.importorskip("scipy.special")

# a log grid, the recurrence's edge at SHIFT, and digamma's positive root (1.4616...)
XS = sorted({*(10.0 ** (k / 8) for k in range(-48, 65)), SHIFT - 1e-9, SHIFT, SHIFT + 1e-9, 1.4616321449683623,
             0.5, 1.0, 1.5, 2.0, 2.5, 3.0})
PAIRS = ((digamma, special.digamma), (trigamma, lambda x: special.polygamma(1, x)),
         (tetragamma, lambda x: special.polygamma(2, x)))


@pytest.mark.parametrize(("mine", "theirs"), PAIRS, ids=("digamma", "trigamma", "tetragamma"))
def test_each_is_scipys(mine, theirs):
    wrong = [(x, mine(x), float(theirs(x))) for x in XS
             if not abs(mine(x) - float(theirs(x))) <= 1e-12 * max(1.0, abs(float(theirs(x))))]
    assert not wrong, wrong[:5]


def test_known_values():
    euler = 0.5772156649015329
    assert digamma(1.0) == pytest.approx(-euler, rel=1e-15)
    assert trigamma(1.0) == pytest.approx(math.pi ** 2 / 6, rel=1e-15)
    assert trigamma(0.5) == pytest.approx(math.pi ** 2 / 2, rel=1e-15)   # the fit's n_A = 2 case: 4.93


@pytest.mark.parametrize("x", [0.0, -1.0, math.inf, math.nan])
def test_outside_the_domain_is_refused(x):
    for f in (digamma, trigamma, tetragamma):
        with pytest.raises(ValueError, match="x > 0"):
            f(x)


@pytest.mark.parametrize("y", [1e-4, 0.01, 0.3, 1.0, 2.5, 17.0, 1e3, 1e5])
def test_trigamma_inverse_inverts_trigamma(y):
    assert _trigamma_inverse(trigamma(y)) == pytest.approx(y, rel=1e-7)
