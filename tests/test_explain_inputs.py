"""What `explain` reads of a profiled run as plain rows (analysis/explain_inputs.py) is what the ingest's polars makes
of the same stored rows (analysis/components.py): each category's, each rank's and each long gap place's per-step
series, hence each component's within-run spread, on real 2 x H200 exports."""

from __future__ import annotations

import math

import pytest

from receipts.analysis import components as comp
from receipts.analysis import explain_inputs as inputs
from receipts.analysis.profiles import profiled
from receipts.store import open_store


@pytest.mark.slow  # the explain lane's fourteen nsys exports, ingested once per test run
def test_the_step_spread_read_as_rows_is_the_one_polars_makes(explain_lane):
    with open_store(explain_lane, read_only=True) as store:
        ids = [r["id"] for r in store.sql_rows("SELECT id FROM receipts ORDER BY id")]
        profiles = profiled(store, ids)
        spread = inputs.spread_many(store, {rid: p["source_sha256"] for rid, p in profiles.items()})
        assert len(profiles) == len(ids) == 14 and spread.keys() == profiles.keys()
        gaps = 0
        for rid, profile in profiles.items():
            params = {"receipt_id": rid, "source_sha256": profile["source_sha256"]}
            expected = comp.step_spread(store.query("anatomy_rows", params), store.query("anatomy_steps", params),
                                        store.query("anatomy_gaps", params))
            assert spread[rid].keys() == expected.keys(), rid
            # the host gap, the time between steps and both ranks' exposed wait among them: every kind of series
            assert {("category", "host_gap"), ("category", "between_steps"), ("rank", "rank 1")} <= expected.keys()
            gaps += sum(level == "gap" for level, _ in expected)
            for key, (var, steps) in expected.items():
                assert spread[rid][key] == (pytest.approx(var, rel=1e-9, abs=1e-12), steps), (rid, key)
        assert gaps >= 2  # the stall runs' places: a gap level's series too (a mean's spread, not a median's)


def test_a_series_spread_by_hand():
    """Five steps 10, 11, 10, 30, 10: median 10, MAD 0 (one slow step does not make it noisy), a negative lag-1
    autocorrelation taken as 0; 11, 12, 13, 12, 11: MAD 1, lag-1 autocorrelation 0.16 / 2.8 (deviations -0.8, 0.2,
    1.2, 0.2, -0.8), which widens the variance by (1 + r) / (1 - r) and leaves 4 effective steps of 5."""
    assert inputs.series_spread([10.0, 11.0, 10.0, 30.0, 10.0]) == (0.0, 5)
    e = [-0.8, 0.2, 1.2, 0.2, -0.8]
    r = sum(u * v for u, v in zip(e[1:], e[:-1])) / sum(v * v for v in e)
    var, steps = inputs.series_spread([11.0, 12.0, 13.0, 12.0, 11.0])
    factor = (1 + r) / (1 - r)
    assert r == pytest.approx(0.16 / 2.8) and steps == 4
    assert var == pytest.approx(math.pi / 2 * 1.4826 ** 2 / 5 * factor)
    assert inputs.series_spread([]) == (0.0, 1)


def test_a_gap_place_s_spread_is_a_mean_s():
    """A place with a gap in 2 of 6 steps (0, 1, 1, 0, 0, 0 ms): a median's MAD would call it exact; the mean's
    variance is s^2 / n times the lag-1 factor (the two gaps in adjacent steps: r = 1/6, x 1.4), on 4 effective
    steps of 6."""
    x = [0.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    mean = sum(x) / len(x)
    e = [v - mean for v in x]
    r = sum(u * v for u, v in zip(e[1:], e[:-1])) / sum(v * v for v in e)
    s2 = sum(v * v for v in e) / (len(x) - 1)
    var, steps = inputs.mean_spread(x)
    assert r == pytest.approx(1 / 6) and var == pytest.approx(s2 / 6 * (1 + r) / (1 - r)) and steps == 4
    assert inputs.series_spread(x)[0] == 0.0
