"""Lane history: change points on synthetic series, the E-divisive statistic against a hand computation,
and `receipts history` on the real H100 runs (change point at the first slowed run), run dates, tags,
superseded receipts and bad references."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cli_helpers import cli, cli_json
from conftest import write_native_log
from receipts.analysis.changepoint import _candidate, change_points

NOISE = Path(__file__).resolve().parent / "data" / "noise"
LANE = "h100-device-x1 toy_fsdp2_v1 fsdp2/no-compile"


# ------------------------------------------------------------------------------ change points
def _q_by_hand(x: np.ndarray, tau: int, kappa: int) -> float:
    """Matteson & James' Q for X = x[:tau], Y = x[tau:kappa], straight from the definition."""
    X, Y = x[:tau], x[tau:kappa]
    n, m = X.size, Y.size
    between = np.abs(X[:, None] - Y[None, :]).mean()
    within_x = np.abs(X[:, None] - X[None, :]).sum() / (n * (n - 1)) if n > 1 else 0.0
    within_y = np.abs(Y[:, None] - Y[None, :]).sum() / (m * (m - 1)) if m > 1 else 0.0
    return n * m / (n + m) * (2 * between - within_x - within_y)


def test_e_divisive_candidate_maximises_the_energy_statistic():
    rng = np.random.default_rng(4)
    x = np.r_[rng.normal(0, 1, 9), rng.normal(3, 1, 7)]
    tau, q = _candidate(x)
    best = max((_q_by_hand(x, t, k), t) for t in range(1, x.size) for k in range(t + 1, x.size + 1))
    assert tau == best[1] and q == pytest.approx(best[0])


def test_a_step_change_is_found_where_it_starts():
    rng = np.random.default_rng(1)
    x = np.r_[55 * (1 + rng.normal(0, 0.006, 12)), 56.5 * (1 + rng.normal(0, 0.006, 6))]
    (cp,) = change_points(x)
    assert cp.index == 12 and cp.pvalue < 0.001 and 0.02 < cp.rel_change < 0.035


def test_up_then_down_gives_two_change_points():
    rng = np.random.default_rng(2)
    x = np.r_[rng.normal(100, 0.5, 15), rng.normal(104, 0.5, 10), rng.normal(100, 0.5, 15)]
    assert [c.index for c in change_points(x)] == [15, 25]


def test_aa_series_rarely_have_a_change_point():
    rng = np.random.default_rng(3)
    series = [55 * (1 + rng.normal(0, 0.007, n)) for n in (8, 15, 30, 60) for _ in range(40)]
    false = sum(bool(change_points(x)) for x in series)
    assert false / len(series) <= 0.05, false


def test_small_or_sub_threshold_changes_are_not_change_points():
    assert change_points([1.0, 2.0]) == () and change_points(np.full(20, 7.0)) == ()
    # significant but 0.5%: under the 1% minimum magnitude
    x = np.r_[np.full(10, 100.0), np.full(10, 100.5)] + np.tile([0.01, -0.01], 10)
    assert change_points(x) == () and change_points(x, min_magnitude=0.001)[0].index == 10


# 8 base runs, 4 at +2.9%, 2 back at +0.7% (run medians, ms): 8 vs the 4 slowed runs p 1e-5, but 8 vs the 6 after
# the cut (slowed and recovered mixed) p 0.00101 under the pooled t-test, just over the 0.001 a change point needs
SLOWED_THEN_RECOVERED = [99.61, 100.02, 100.58, 98.99, 99.94, 100.79, 100.3, 99.46,
                         102.41, 102.93, 103.76, 102.63, 101.3, 100.09]


def _pooled_only(monkeypatch):
    """The change-point rule with Otava's pooled t-test alone (the comparison the before-side test must beat)."""
    from receipts.analysis import changepoint

    monkeypatch.setattr(changepoint, "_test", changepoint._ttest)


def test_a_clear_change_followed_by_a_weaker_one_is_found_at_its_first_run(monkeypatch):
    x = np.array(SLOWED_THEN_RECOVERED)
    from receipts.analysis.changepoint import _ttest

    assert _ttest(x[:8], x[8:12]) < 1e-4 and 0.001 < _ttest(x[:8], x[8:]) < 0.0011
    (cp,) = change_points(x)
    assert cp.index == 8 and cp.pvalue < 0.001 and 0.02 < cp.rel_change < 0.03
    # the same shape over 100 noise draws (0.5% run-to-run): the first change point is the first slowed run
    rng = np.random.default_rng(7)
    series = [np.r_[100 * (1 + rng.normal(0, 0.005, 8)), 103 * (1 + rng.normal(0, 0.005, 4)),
                    100.7 * (1 + rng.normal(0, 0.005, 2))] for _ in range(100)]
    found = sum([c.index for c in change_points(x)][:1] == [8] for x in series)
    _pooled_only(monkeypatch)
    assert change_points(SLOWED_THEN_RECOVERED) == ()
    pooled_found = sum([c.index for c in change_points(x)][:1] == [8] for x in series)
    assert found >= 95 and pooled_found < 85, (found, pooled_found)


def test_the_before_side_test_adds_no_false_alarms_on_flat_series(monkeypatch):
    # the same 1,200 flat series (8-40 runs, 0.7% Gaussian noise) under both rules: no more false alarms
    rng = np.random.default_rng(11)
    series = [55 * (1 + rng.normal(0, 0.007, n)) for n in (8, 15, 25, 40) for _ in range(300)]
    flagged = {i for i, x in enumerate(series) if change_points(x)}
    _pooled_only(monkeypatch)
    pooled = {i for i, x in enumerate(series) if change_points(x)}
    assert len(flagged) <= len(pooled) and len(flagged) / len(series) < 0.02, (len(flagged), len(pooled))


# ------------------------------------------------------------------------------ the CLI on real runs
def test_history_puts_the_change_point_at_the_first_slowed_run(noise_db):
    code, out = cli_json(noise_db, "history", "aa_03")
    assert code == 0
    assert out["lane"] == {"host_lineage": "h100-device-x1", "preset_family": "toy_fsdp2_v1",
                           "launch_regime": "fsdp2/no-compile"}
    runs = out["runs"]
    names = [r["run_name"] for r in runs]
    # run order is the order the runs ran in (their RECEIPT headers' started_at; README of tests/data/noise)
    assert names == [f"aa_{i:02d}" for i in range(1, 11)] + ["subfloor_1", "subfloor_2", "slow_1", "slow_2", "slow_3"]
    assert all(r["run_date_source"] == "header" for r in runs)
    flagged = [i for i, r in enumerate(runs) if r["change_point"]]
    first_slow = names.index("slow_1")
    assert len(flagged) == 1 and abs(flagged[0] - first_slow) <= 1
    for r in runs:
        assert r["ci_low"] <= r["median_step_ms"] <= r["ci_high"] and r["n_steps"] > 100
        for key in ("id", "run_name", "run_date", "median_step_ms", "z", "change_point"):
            assert key in r
    floor = out["noise_floor"]
    assert floor["source"] == "lane" and floor["n_runs"] == 15 and 0.3 < floor["floor_pct"] < 1.5
    # the slowed runs sit ~2.5% above the lane: several floor sigmas out; A/A runs within +-3
    assert all(runs[i]["z"] > 2 for i in range(first_slow, len(runs)))
    assert all(abs(r["z"]) < 3 for r in runs[:10])


def test_history_by_lane_and_tag(noise_db):
    code, out = cli_json(noise_db, "history", LANE, "--tag", "main")
    assert code == 0 and out["tag"] == "main"
    assert [r["run_name"] for r in out["runs"]] == [f"aa_{i:02d}" for i in range(1, 11)]
    assert not any(r["change_point"] for r in out["runs"]) and out["noise_floor"]["n_runs"] == 10
    text = cli(noise_db, "history", "h100-device-x1 · toy_fsdp2_v1 · fsdp2/no-compile", "--format", "table").stdout
    assert "noise floor:" in text and "1 change point" in text and "slow_1" in text


def test_history_errors_are_one_line(noise_db):
    result = cli(noise_db, "history", "no-such-run")
    assert result.exit_code == 2 and "no receipt matches 'no-such-run'" in result.stderr
    assert "HOST_LINEAGE PRESET_FAMILY LAUNCH_REGIME" in result.stderr
    result = cli(noise_db, "history", LANE, "--tag", "nope")
    assert result.exit_code == 2 and "no current receipts tagged 'nope'" in result.stderr


def test_history_uses_ingest_time_without_a_start_and_skips_superseded(tmp_path, db):
    rng = np.random.default_rng(0)
    logs = [write_native_log(tmp_path / f"r{i}.log", list(100 * (1 + rng.normal(0, 0.01, 40)))) for i in range(4)]
    assert cli(db, "ingest", *map(str, logs)).exit_code == 0
    code, out = cli_json(db, "history", "r0")
    assert code == 0 and sorted(r["run_name"] for r in out["runs"]) == ["r0", "r1", "r2", "r3"]
    assert {r["run_date_source"] for r in out["runs"]} == {"ingest"}
    dates = [r["run_date"] for r in out["runs"]]
    assert dates == sorted(dates)  # ingest time (second resolution; ties in id order)
    assert "(ingest)" in cli(db, "history", "r0", "--format", "table").stdout
    # a superseded receipt is an old copy of a run: not in the history, not in the floor
    import duckdb
    con = duckdb.connect(db)
    ids = {r["run_name"]: r["id"] for r in out["runs"]}
    con.execute("UPDATE receipts SET superseded_by = ? WHERE id = ?", [ids["r3"], ids["r1"]])
    con.close()
    code, out = cli_json(db, "history", "r0")
    assert sorted(r["run_name"] for r in out["runs"]) == ["r0", "r2", "r3"] and out["noise_floor"]["n_runs"] == 3
    assert ids["r1"] not in out["noise_floor"]["run_ids"]
    code, cmp = cli_json(db, "compare", "r0", "r2")
    # compare's floor: A's configuration (untagged, no drift), B being judged left out: r0 and r3
    assert cmp["noise_floor"]["n_runs"] == 2 and ids["r1"] not in cmp["noise_floor"]["run_ids"]
    assert ids["r2"] not in cmp["noise_floor"]["run_ids"]


def test_show_prints_the_lanes_noise_floor(noise_db):
    code, out = cli_json(noise_db, "show", "aa_01")
    floor = out["noise_floor"]
    assert code == 0 and floor["source"] == "lane" and floor["n_runs"] == 15 and out["id"] in floor["run_ids"]
    assert "lane noise floor:" in cli(noise_db, "show", "aa_01").stdout


def test_history_reads_the_stored_intervals_and_recomputes_the_same_without_them(noise_db, tmp_path):
    # Each run's interval comes from its summary stored at ingest (reading and bootstrapping every run's series
    # again took 1.1 s over a lane of 278 runs); a store without them (before schema 6) gives the same history.
    code, stored = cli_json(noise_db, "history", "aa_03")
    assert code == 0
    bare = _without_summaries(noise_db, tmp_path, "aa_0%")  # a mix of both paths
    code, recomputed = cli_json(bare, "history", "aa_03")
    assert code == 0 and recomputed == stored
    assert all(r["ci_low"] is not None and r["block_length"] for r in stored["runs"])


@settings(max_examples=400, deadline=None, derandomize=True)
@given(left=st.lists(st.floats(50, 150), min_size=1, max_size=30), right=st.lists(st.floats(50, 150), min_size=1, max_size=30),
       digits=st.integers(0, 3))
def test_the_t_test_is_scipys_pooled_t_test(left, right, digits):
    # spelled out over scipy.special (importing scipy.stats costs 0.6 s of a lane history's 2 s)
    from scipy.stats import ttest_ind

    from receipts.analysis.changepoint import _ttest

    a, b = np.round(left, digits), np.round(right, digits)
    assume(a.size + b.size >= 3 and np.ptp(np.concatenate([a, b])) > 0)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = float(ttest_ind(a, b, equal_var=True).pvalue)
    expected = 0.0 if math.isnan(expected) else expected  # both sides constant: as before, as different as can be
    assert _ttest(a, b) == pytest.approx(expected, rel=1e-9, abs=1e-300)


def test_the_lane_view_reads_stored_medians_and_recomputes_the_same_without_them(noise_db, tmp_path):
    # sql/dash_lanes.sql takes the receipts without a summary as a value (over a subquery the postgres scanner
    # read every step row of the store): with some summaries deleted, the same medians from the steps.
    params = {"lane_filter": None, "tag": None, "since": None, "until": None,
              "search": None}
    frames = [f.select("id", "n_steady_steps", "median_step_ms").sort("id") for f in
              _both(noise_db, _without_summaries(noise_db, tmp_path, "slow%"), "dash_lanes", params)]
    assert len(ids := set(frames[0]["id"])) == 15 and ids == set(frames[1]["id"])
    assert frames[0].equals(frames[1])


def test_the_dashboard_lane_history_reads_stored_summaries_and_recomputes_the_same(noise_db, tmp_path):
    # sql/lane_history.sql: median, p10 and p90 from the stored summaries (numpy's linear percentiles), from the
    # steps (quantile_cont) for a receipt without one; over a subquery it read every step row on PostgreSQL.
    from receipts.schema.lane import Lane

    lane = {"lane_key": Lane("h100-device-x1", "toy_fsdp2_v1", "fsdp2/no-compile").key}
    frames = _both(noise_db, _without_summaries(noise_db, tmp_path, "%"), "lane_history", lane)
    stored, recomputed = frames
    assert stored.height == 15 and stored["receipt_id"].to_list() == recomputed["receipt_id"].to_list()
    assert stored["n_steps"].to_list() == recomputed["n_steps"].to_list()
    for column in ("median_step_ms", "p10_step_ms", "p90_step_ms"):
        assert stored[column].is_not_null().all()
        assert ((stored[column] - recomputed[column]).abs() <= 1e-9 * recomputed[column].abs()).all(), column
    assert stored.drop("median_step_ms", "p10_step_ms", "p90_step_ms").equals(
        recomputed.drop("median_step_ms", "p10_step_ms", "p90_step_ms"))


def _without_summaries(noise_db: str, tmp_path: Path, runs_like: str) -> str:
    """A copy of the store whose receipts named LIKE `runs_like` have no stored summary (as before schema 6)."""
    import shutil

    import duckdb

    bare = tmp_path / "bare.duckdb"
    shutil.copy(noise_db, bare)
    with duckdb.connect(str(bare)) as con:
        con.execute("DELETE FROM receipt_summaries WHERE receipt_id IN (SELECT id FROM receipts WHERE run_name LIKE ?)",
                    [runs_like])
    return str(bare)


def _both(with_summaries: str, without: str, query: str, params: dict) -> list:
    """sql/<query> on each store, given the receipts each lacks a summary for."""
    from receipts.analysis.listing import unsummarised
    from receipts.store import open_store

    frames = []
    for db in (with_summaries, without):
        with open_store(db, read_only=True) as store:
            frames.append(store.query(query, {**params, "unsummarised": unsummarised(store)}))
    return frames

