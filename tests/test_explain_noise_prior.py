"""The prior of the between-run variance fitted to the baseline runs themselves (analysis/explain_noise.py
lane_prior, Smyth's fitFDist): it recovers a known prior, it is the lane's level relative to the calibration's shape,
it never reads the candidates, it falls back to the calibration where there is nothing to fit, and a quiet lane
names a change its calibration would have hidden."""

from __future__ import annotations

import math

import numpy as np
import pytest

from receipts.analysis.explain import RunComponents, StepChange, Value, explain
from receipts.analysis.explain_noise import (CALIBRATION, Calibration, MIN_PRIOR_RUNS, calibrated_prior, fitted,
                                             lane_prior, noise)


def test_the_fit_recovers_a_known_prior():
    """True variances drawn from a scaled inverse chi-square (s0^2 = 2, d0 = 6), each seen through a sample variance
    on 4 df: the moment fit on the log scale gives them back."""
    rng = np.random.default_rng(7)
    true = 2.0 * 6.0 / rng.chisquare(6.0, 4000)
    s2 = true * rng.chisquare(4.0, 4000) / 4.0
    scale, d0 = fitted(s2, 4.0)
    assert scale == pytest.approx(2.0, rel=0.1) and 4.0 < d0 < 9.0
    # every component with the same true variance: nothing beyond sampling, the prior is known (inf df)
    same = fitted(3.0 * rng.chisquare(4.0, 4000) / 4.0, 4.0)
    assert same[1] > 50.0 and same[0] == pytest.approx(3.0, rel=0.05)


def _lane(rng, n: int, spread: float, *, kernels: int = 30, idle_sd: float | None = None) -> list[RunComponents]:
    """n runs of one configuration: `kernels` compute kernels of 1-3 ms whose between-run sd is `spread` x the
    calibration's (kappa 3%), and idle at 1 ms (sd idle_sd, default the same share of the calibration's)."""
    kappa = CALIBRATION.kappa_pct["compute"] / 100.0
    idle_sd = spread * CALIBRATION.kappa_pct["gap"] / 100.0 if idle_sd is None else idle_sd
    means = np.linspace(1.0, 3.0, kernels)
    runs = []
    for r in range(n):
        values = {("kernel", f"k{i}"): Value(float(m + rng.normal(0.0, spread * kappa * m)), 4.0, "gemm")
                  for i, m in enumerate(means)}
        values[("category", "idle")] = Value(float(1.0 + rng.normal(0.0, idle_sd)))
        runs.append(RunComponents(f"r{r}", f"r{r}", values))
    return runs


def _rows(runs: list[RunComponents]):
    keys = runs[0].values
    return [(np.array([r.values[k].ms_per_step for r in runs]), np.zeros(len(runs)),
             "gap" if k[0] == "category" else "compute") for k in keys]


def test_the_prior_is_the_lanes_level_relative_to_the_calibration():
    rng = np.random.default_rng(11)
    quiet = lane_prior(_rows(_lane(rng, 5, 0.1)), step_ms=50.0)
    loud = lane_prior(_rows(_lane(rng, 5, 2.0)), step_ms=50.0)
    assert quiet.source == loud.source == "lane" and quiet.components == loud.components == 31
    assert 0.003 < quiet.scale < 0.03 and 2.0 < loud.scale < 8.0   # 0.1^2 and 2^2 of the calibrated variance
    # too few runs (one df each) or too few components of >= 1% of the step: the calibration itself
    assert lane_prior(_rows(_lane(rng, MIN_PRIOR_RUNS - 1, 0.1)), step_ms=50.0) == calibrated_prior()
    assert lane_prior(_rows(_lane(rng, 5, 0.1, kernels=4)), step_ms=50.0) == calibrated_prior()
    assert lane_prior(_rows(_lane(rng, 5, 0.1)), step_ms=1000.0).source == "calibrated"  # all under 1% of it


def test_the_noise_never_reads_the_candidates():
    """Lane mode: each component's noise and the prior come from the baseline runs alone, whatever the candidate."""
    rng = np.random.default_rng(5)
    base = _lane(rng, 5, 0.3)
    step = StepChange("no change", 50.0, 50.0, "")
    calm, wild = _lane(rng, 1, 0.3), _lane(rng, 1, 30.0)
    e1, e2 = explain(base, calm, step=step), explain(base, wild, step=step)
    assert e1.noise_note == e2.noise_note and "fitted to their 31 components" in e1.noise_note
    assert {c.name: c.noise_ms for c in e1.components} == {c.name: c.noise_ms for c in e2.components}


def test_a_quiet_lane_names_a_stall_its_calibration_hid():
    """Idle at 1 ms spreads 0.03 ms between runs where the calibration says 25%: 0.5 ms more idle against five
    baseline runs is named; under the calibrated prior it was not."""
    rng = np.random.default_rng(3)
    runs = _lane(rng, 6, 0.1, idle_sd=0.03)
    base, cand = runs[:5], runs[5:]
    cand[0].values[("category", "idle")] = Value(cand[0].values[("category", "idle")].ms_per_step + 0.5)
    e = explain(base, cand, step=StepChange("inconclusive", 50.0, 50.5, ""))
    assert [(c.level, c.name) for c in e.changed] == [("category", "idle")]
    a = np.array([r.values[("category", "idle")].ms_per_step for r in base])
    b = np.array([cand[0].values[("category", "idle")].ms_per_step])
    calibrated = noise(a, b, np.zeros(5), np.zeros(1), "gap", floor_ms=0.05, prior=calibrated_prior())
    assert calibrated.se > 0.5 / 4.0   # t < 4 on 10 df among 31 components: not named at 5% FDR


def test_a_class_the_calibration_adds_needs_no_other_edit():
    """The fit and the noise read a class's kappa from the calibration alone: a new class works as it is listed."""
    cal = Calibration({**CALIBRATION.kappa_pct, "long_gap": 40.0}, 6, "a test calibration")
    rng = np.random.default_rng(2)
    rows = [(1.0 + rng.normal(0.0, 0.04, 5), np.zeros(5), "long_gap") for _ in range(10)]
    prior = lane_prior(rows, step_ms=50.0, calibration=cal)
    assert prior.source == "lane" and prior.scale == pytest.approx(0.01, rel=1.0)
    nz = noise(rows[0][0], np.array([1.0]), rows[0][1], np.zeros(1), "long_gap", floor_ms=0.01, calibration=cal,
               prior=prior)
    assert math.isfinite(nz.se) and nz.source == "lane"


@pytest.mark.slow
def test_the_quiet_2xh200_lane_names_one_ms_of_idle_against_its_own_runs(explain_lane):
    """tests/data/explain: idle spreads 3.3% between its runs where the nsys calibration says 25% (a noisier one-GPU
    corpus set it). 1 ms more idle in the A/A run, against the five baseline runs, is named first: the lane's own
    runs set its noise (under the calibrated prior it took 2 ms)."""
    from dataclasses import replace

    from receipts.analysis.profiles import profiled
    from receipts.analysis.explain_run import _runs
    from receipts.store import open_store

    names = [f"base_{i}" for i in range(1, 6)] + ["aa_1"]
    with open_store(explain_lane, read_only=True) as store:
        ids = {store.resolve(n): n for n in names}
        runs, _ = _runs(store, list(ids), ids, profiled(store, list(ids)), baseline=list(ids))
    by_name = {r.run_name: r for r in runs.values()}
    aa = by_name["aa_1"]
    idle = aa.values[("category", "idle")]
    stalled = RunComponents("stalled", "stalled", {**aa.values, ("category", "idle"): replace(
        idle, ms_per_step=idle.ms_per_step + 1.0)})
    e = explain([by_name[n] for n in names[:5]], [stalled], step=StepChange("inconclusive", 55.9, 56.9, ""))
    assert e.changed and (e.changed[0].level, e.changed[0].name) == ("category", "idle")
    assert "fitted to their" in e.noise_note
