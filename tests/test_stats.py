"""The ratio CI says what it claims: it contains the true ratio at about the stated rate."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from receipts.analysis.compare import verdict_for
from receipts.analysis.stats import ratio_ci, summarize
from receipts.analysis.window import choose_window
from receipts.schema.model import steps_frame


@settings(max_examples=6, deadline=None, derandomize=True)  # a CI test must not flake
@given(mean_a=st.floats(50, 2000), true_ratio=st.floats(0.6, 1.4), noise=st.floats(0.005, 0.08),
       n=st.integers(25, 80), seed=st.integers(0, 2**31))
def test_ci_covers_the_true_ratio_at_about_the_stated_rate(mean_a, true_ratio, noise, n, seed):
    # Normal step times: median == mean, so the true ratio of medians is known exactly.
    rng = np.random.default_rng(seed)
    trials, covered = 150, 0
    for _ in range(trials):
        a = rng.normal(mean_a, mean_a * noise, n)
        b = rng.normal(mean_a * true_ratio, mean_a * true_ratio * noise, n)
        ci = ratio_ci(a, b)
        covered += ci.ci_low <= true_ratio <= ci.ci_high
    rate = covered / trials
    # Stated 95%; a percentile bootstrap of medians at n >= 25 lands near it. 150 trials: sd ~ 1.8 points.
    assert 0.87 <= rate <= 0.995, rate


def test_ci_is_deterministic():
    rng = np.random.default_rng(0)
    a, b = rng.normal(100, 3, 50), rng.normal(95, 3, 50)
    assert ratio_ci(a, b) == ratio_ci(a, b)


def test_verdict_needs_both_significance_and_a_minimum_effect():
    rng = np.random.default_rng(1)
    a = rng.normal(100, 0.01, 500)
    b = rng.normal(99.7, 0.01, 500)  # significant but 0.3%: below the 1% minimum effect
    assert verdict_for(ratio_ci(a, b)) == "no significant change"
    assert verdict_for(ratio_ci(a, rng.normal(90, 1, 500))) == "faster"
    assert verdict_for(ratio_ci(a, rng.normal(110, 1, 500))) == "slower"
    assert verdict_for(None) == "inconclusive"


def test_summary_percentiles():
    s = summarize(np.arange(1, 101, dtype=float))
    assert s.n == 100 and s.median == 50.5 and round(s.p10, 1) == 10.9 and round(s.p90, 1) == 90.1


def test_window_rule_excludes_leading_slow_steps():
    ms = [9000, 1500, 400, 210, 200, 205, 198, 202, 201, 199, 200, 203]
    window = choose_window(steps_frame({"step": list(range(1, 13)), "step_ms": ms}), ())
    assert window.rule == "leading-slow-steps-v2"
    assert window.warmup_last_step == 3 and window.first_step == 4 and window.n_steady == 9


def test_an_isolated_slow_step_after_settling_is_not_warmup():
    ms = [9000, 300] + [200] * 10 + [1500] + [200] * 20
    window = choose_window(steps_frame({"step": list(range(1, 34)), "step_ms": ms}), ())
    assert window.warmup_last_step == 2 and window.n_steady == 31


def test_window_markers_win_over_the_rule():
    ms = [9000, 200, 200, 200, 200, 200]
    window = choose_window(steps_frame({"step": list(range(1, 7)), "step_ms": ms}), (("compile", 1, 2),))
    assert window.rule == "marker:compile" and window.warmup_last_step == 2 and window.n_steady == 4


def test_order_statistic_medians_match_brute_force_resampling():
    # The shortcut must give the same bootstrap distribution as resampling every step.
    from receipts.analysis.stats import bootstrap_medians

    rng = np.random.default_rng(3)
    for n in (9, 10):
        x = rng.gamma(2.0, 50.0, n)
        fast = bootstrap_medians(x, 200_000, np.random.default_rng(4))
        brute = np.median(x[rng.integers(0, n, (200_000, n))], axis=1)
        assert np.allclose(np.quantile(fast, [0.05, 0.25, 0.5, 0.75, 0.95]),
                           np.quantile(brute, [0.05, 0.25, 0.5, 0.75, 0.95]), rtol=0.02)
