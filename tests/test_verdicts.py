"""The four verdicts: unit rules, the noise floor, the false-alarm rate and power under a model with
between-run variance and autocorrelated steps, and the real H100 runs in tests/data/noise."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import cli, cli_json
from receipts.analysis.noise import DEFAULT_FLOOR_PCT, MIN_FLOOR_PCT, NoiseFloor, default_floor, noise_floor
from receipts.analysis.stats import RunInterval, median_interval
from receipts.analysis.verdict import VERDICTS, decide
from test_stats import ar1

NOISE = Path(__file__).resolve().parent / "data" / "noise"


def run(median: float, se_pct: float = 0.2, n: int = 120) -> RunInterval:
    """A run summary with a symmetric (in logs) interval of +-1.96 se."""
    half = 1.96 * se_pct / 100
    return RunInterval(n, median, median * math.exp(-half), median * math.exp(half), 0.95, 1, "test")


def lane(pct: float, n: int) -> NoiseFloor:
    return NoiseFloor(n, pct, "lane", tuple(f"r{i}" for i in range(n)), 100.0, "test floor")


# ------------------------------------------------------------------------------ the noise floor
def test_floor_is_the_scaled_mad_of_run_medians_relative_to_their_median():
    medians = [100.0, 101.0, 99.0, 100.5, 130.0]  # one outlier run: a MAD barely notices it
    f = noise_floor([(f"r{i}", m) for i, m in enumerate(medians)])
    # by hand: median 100.5; |deviations| 0.5, 0.5, 1.5, 0, 29.5 -> MAD 0.5; Croux-Rousseeuw b_5 = 1.206
    assert f.source == "lane" and f.n_runs == 5 and f.center_ms == 100.5
    assert f.floor_pct == pytest.approx(100 * 1.206 * 1.4826 * 0.5 / 100.5)
    assert f.run_ids == ("r0", "r1", "r2", "r3", "r4") and f.df == 3 and f.runs_to_measure == 0


def test_fewer_than_three_runs_get_the_default_floor_and_say_so():
    f = noise_floor([("a", 50.0), ("b", 51.0), ("c", None)])
    assert f.source == "default" and f.floor_pct == DEFAULT_FLOOR_PCT and f.n_runs == 2 and f.df is None
    assert f.runs_to_measure == 1 and "1 more" in f.note
    assert default_floor().n_runs == 0 and default_floor().runs_to_measure == 3


def test_tied_run_medians_do_not_make_the_floor_zero():
    f = noise_floor([(str(i), 55.0) for i in range(4)])
    assert f.floor_pct == MIN_FLOOR_PCT and "minimum" in f.note


# ------------------------------------------------------------------------------ verdict rules
def test_a_clear_slowdown_against_a_measured_floor_is_slower():
    v = decide([run(100.0)], [run(104.0)], lane(0.7, 10))
    assert v.verdict == "slower" and v.ratio == pytest.approx(1.04) and v.ci_low > 1.0
    assert "beyond the noise" in v.why and v.runs_needed is None
    assert decide([run(104.0)], [run(100.0)], lane(0.7, 10)).verdict == "faster"


def test_a_floor_from_few_runs_is_never_stricter_than_the_default():
    # 3 runs: t with 1 df would demand a 12x-sigma change; the default rule caps it
    few, unknown = decide([run(100.0)], [run(105.0)], lane(0.5, 3)), decide([run(100.0)], [run(105.0)], default_floor())
    assert few.verdict == unknown.verdict == "slower" and few.resolvable_pct <= unknown.resolvable_pct
    # a noisy lane, well measured: its own floor rules, not the (smaller) default
    noisy = decide([run(100.0)], [run(105.0)], lane(3.0, 20))
    assert noisy.verdict == "inconclusive" and noisy.resolvable_pct > 8


def test_the_default_floor_makes_small_single_run_differences_inconclusive():
    v = decide([run(100.0)], [run(103.0)], default_floor())
    assert v.verdict == "inconclusive" and v.ci_low < 1.0 < v.ci_high
    assert "default noise floor 1.5%" in v.why and "3 more give it a measured floor" in v.why
    assert v.runs_needed and f"about {v.runs_needed} more runs" in v.why
    # 1.96 x sqrt(2) x 1.5% ~ 4.2% (plus the runs' own 0.2%): 6% clears it, 4% does not
    assert 4.2 < v.resolvable_pct < 4.6
    assert decide([run(100.0)], [run(106.0)], default_floor()).verdict == "slower"
    assert decide([run(100.0)], [run(104.0)], default_floor()).verdict == "inconclusive"


def test_no_change_needs_the_interval_inside_the_band():
    # many runs on both sides, 0.2% apart, floor 0.5%: interval well inside +-1%
    many = lambda m: [run(m * (1 + d)) for d in (-0.004, -0.002, 0.0, 0.002, 0.004) * 2]  # noqa: E731
    v = decide(many(100.0), many(100.2), lane(0.5, 20))
    assert v.verdict == "no change" and v.margin_pct == 1.0 and v.ci_low > 0.99 and v.ci_high < 1.01
    # one run each: the same 0.2% is not "no change", only inconclusive
    assert decide([run(100.0)], [run(100.2)], lane(0.5, 20)).verdict == "inconclusive"


def test_significant_but_below_min_effect_is_not_a_speedup():
    many = lambda m: [run(m) for _ in range(30)]  # noqa: E731
    v = decide(many(100.0), many(99.5), lane(0.2, 60))
    assert v.ci_high < 1.0 and v.verdict == "no change"  # 0.5% < min_effect 1%
    assert decide(many(100.0), many(99.5), lane(0.2, 60), min_effect=0.003).verdict == "faster"


def test_the_reading_tells_the_two_kinds_of_inconclusive_apart():
    many = lambda m: [run(m) for _ in range(10)]  # noqa: E731
    beyond = decide(many(100.0), many(100.8), lane(0.3, 30))   # +0.8%: the interval excludes 1, under min_effect
    assert beyond.verdict == "inconclusive" and beyond.ci_low > 1.0
    assert beyond.reading == "beyond the noise, under the 1% minimum effect"
    within = decide([run(100.0)], [run(100.5)], lane(1.5, 2))   # one run each, default floor: holds 1
    assert within.verdict == "inconclusive" and within.ci_low < 1.0 < within.ci_high
    assert within.reading == "within the noise"
    assert decide(many(100.0), many(103.0), lane(0.3, 30)).reading == "beyond the noise and the 1% minimum effect"
    assert decide(many(100.0), many(100.0), lane(0.3, 30)).reading.startswith("inside the +-")


def test_tokens_per_second_higher_is_faster():
    v = decide([run(1000.0)], [run(1100.0)], lane(0.7, 10), lower_is_better=False)
    assert v.verdict == "faster" and v.ratio == pytest.approx(1.1) and v.ci_low > 1.0
    assert "+10.00% (faster)" in v.why


def test_runs_needed_is_honest():
    # 1.5% slower, floor 0.7%, one run each: more runs would settle it
    v = decide([run(100.0)], [run(101.5)], lane(0.7, 5))
    assert v.verdict == "inconclusive" and v.runs_needed is not None
    k = v.runs_needed
    more = decide([run(100.0)] * (1 + k), [run(101.5)] * (1 + k), lane(0.7, 5 + 2 * k))
    assert more.verdict == "slower"
    # a difference right at the edge of the no-change band can never be settled
    edge = decide([run(100.0)], [run(100.999)], lane(0.7, 5), min_effect=0.01)
    assert edge.verdict == "inconclusive" and edge.runs_needed is None and "would not settle" in edge.why
    assert set(VERDICTS) == {"faster", "slower", "no change", "inconclusive"}


def test_no_runs_no_verdict():
    assert decide([], [run(1.0)], default_floor()) is None


# ------------------------------------------------------------------------------ the model: A/A and power
def simulate_lane(rng, n_runs: int, *, level: float = 55.0, between: float = 0.01, slow: float = 0.0,
                  steps: int = 120, phi: float = 0.5, within: float = 0.02) -> list[RunInterval]:
    """Runs of one configuration: a run-level offset (between-run sigma) times AR(1) step noise."""
    out = []
    for _ in range(n_runs):
        run_level = level * (1.0 + slow) * math.exp(rng.normal(0.0, between))
        out.append(median_interval(run_level * (1.0 + ar1(rng, steps, phi, within))))
    return out


def test_aa_pairs_false_alarm_rate_is_at_most_5_percent():
    # The target: repeated runs of one configuration, every pair compared with the lane's floor.
    rng = np.random.default_rng(2026)
    calls = pairs = 0
    for n_runs in (3, 5, 8, 12):
        for _ in range(12):
            runs = simulate_lane(rng, n_runs)
            floor = noise_floor([(str(i), r.median) for i, r in enumerate(runs)])
            for a, b in itertools.combinations(runs, 2):
                pairs += 1
                calls += decide([a], [b], floor).verdict in ("faster", "slower")
    assert pairs > 500 and calls / pairs <= 0.05, (calls, pairs)


@pytest.mark.parametrize("n_baseline", [4, 8])
def test_baseline_group_against_fresh_aa_candidates_rarely_alarms(n_baseline):
    # `check`'s shape: the lane's baseline runs (their own floor) vs a new run of the same configuration.
    rng = np.random.default_rng(7 + n_baseline)
    alarms = 0
    trials = 200
    for _ in range(trials):
        base = simulate_lane(rng, n_baseline)
        floor = noise_floor([(str(i), r.median) for i, r in enumerate(base)])
        alarms += decide(base, simulate_lane(rng, 1), floor).verdict in ("faster", "slower")
    assert alarms / trials <= 0.05, alarms


def test_power_on_a_planted_3_percent_slowdown():
    # 10 baseline runs (the floor measured from them, as `check --against tag:main` does) vs 5 slowed runs:
    # 3% is 3 between-run sigmas; a single slowed run against them is only detected about half the time.
    rng = np.random.default_rng(11)
    slower = faster = 0
    trials = 100
    for _ in range(trials):
        base = simulate_lane(rng, 10)
        cand = simulate_lane(rng, 5, slow=0.03)
        floor = noise_floor([(str(i), r.median) for i, r in enumerate(base)])
        verdict = decide(base, cand, floor).verdict
        slower += verdict == "slower"
        faster += verdict == "faster"
    assert faster == 0 and slower / trials >= 0.8, slower


# ------------------------------------------------------------------------------ real runs on an H100
def names(prefix: str) -> list[str]:
    return sorted(p.parent.name for p in NOISE.glob(f"{prefix}*/run.log"))


def test_real_aa_pairs_are_not_called_faster_or_slower(noise_db):
    called = []
    for a, b in itertools.combinations(names("aa_"), 2):
        code, out = cli_json(noise_db, "compare", a, b)
        assert code == 0 and out["verdict"] in VERDICTS
        # the baseline's configuration (the 10 runs tagged main), B left out
        assert out["noise_floor"]["source"] == "lane" and out["noise_floor"]["basis"] == "9 runs tagged main"
        if out["verdict"] in ("faster", "slower"):
            called.append((a, b, out["verdict"]))
    pairs = math.comb(len(names("aa_")), 2)
    assert pairs == 45 and len(called) <= 0.05 * pairs, called


def test_real_planted_slowdowns_against_the_aa_baseline(noise_db):
    from receipts.analysis.lanes import lane_floors, lane_runs, Lane
    from receipts.analysis.record import load_many
    from receipts.store import open_store

    with open_store(noise_db, read_only=True) as store:
        lane_ = Lane("h100-device-x1", "toy_fsdp2_v1", "fsdp2/no-compile")
        rows = lane_runs(store, [lane_])
        ids = dict(zip(rows["run_name"], rows["receipt_id"]))
        loaded = load_many(store, list(ids.values()))
        floor = lane_floors(store, [lane_], tag="main")[lane_]
    runs = {name: median_interval(loaded[rid].steady_step_ms) for name, rid in ids.items()}
    baseline = [runs[n] for n in names("aa_")]
    assert floor.source == "lane" and floor.n_runs == 10 and 0.3 < floor.floor_pct < 1.5
    for name in names("slow_"):  # 8 extra 4096^2 matmuls per step: 2.54% of a step (calibration.json)
        v = decide(baseline, [runs[name]], floor, grow="candidate")
        assert v.verdict == "slower" and 1.015 < v.ratio < 1.04, (name, v)
    for name in names("subfloor_"):  # 0.29% of a step: under the floor
        v = decide(baseline, [runs[name]], floor, grow="candidate")
        assert v.verdict in ("no change", "inconclusive"), (name, v)


def test_compare_json_keeps_its_keys_and_adds_the_verdicts_parts(noise_db):
    code, out = cli_json(noise_db, "compare", "aa_01", "slow_1")
    assert code == 0
    for key in ("comparable", "reason", "a", "b", "differences", "resolution", "ratio", "tokens_per_s_ratio",
                "verdict", "drift", "why", "runs_needed", "noise_floor"):
        assert key in out
    interval = out["a"]["steady_state"]["interval"]
    assert interval["ci_low"] <= out["a"]["steady_state"]["median_step_ms"] <= interval["ci_high"]
    assert interval["block_length"] >= 1 and "moving-block" in interval["method"]
    assert out["noise_floor"]["floor_pct"] == pytest.approx(out["noise_floor"]["floor_pct"]) and out["ratio"]["value"] > 1
    text = cli(noise_db, "compare", "aa_01", "slow_1").stdout
    assert "noise floor:" in text and "verdict:" in text and "MAD of 10 run medians" in text


def test_critical_values_match_scipy():
    from scipy.stats import norm, t

    from receipts.analysis.verdict import _quantile

    for q in (0.975, 0.995, 0.9):
        assert _quantile(q, None) == pytest.approx(norm.ppf(q), rel=1e-9)
        for df in (1, 2):
            assert _quantile(q, df) == pytest.approx(t.ppf(q, df), rel=1e-9)
        for df in (3, 4, 5, 8, 18, 100):
            assert _quantile(q, df) == pytest.approx(t.ppf(q, df), rel=1e-9), (q, df)
