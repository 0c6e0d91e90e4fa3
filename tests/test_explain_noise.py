"""The component noise model on real runs (analysis/explain_noise.py, analysis/components.py): the step's parts with
the host gap sum to the step's range under both profilers, a slow step does not make a run look noisy, identical
runs name nothing pairwise and either way round, call counts that changed are facts, and one component has one
verdict whatever --level shows. tests/data/explain: 2 x H200 FSDP2 lane (README there)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from cli_helpers import cli_json
from receipts.analysis import components as comp
from receipts.schema.categories import STEP_PARTS

AA = [f"base_{i}" for i in range(1, 6)] + ["aa_1"]
GPU = Path(__file__).resolve().parent / "data" / "gpu"
SLOW = Path(__file__).resolve().parent / "data" / "slow_step" / "slowstep_1"


def _rules():
    from receipts.schema.categories import load_category_rules

    return load_category_rules()


@pytest.fixture(scope="module")
def kineto_anatomy():
    from receipts.ingest import kineto

    return kineto.parse_dir(GPU / "fsdp2_2gpu_kineto" / "traces", rules=_rules())


@pytest.fixture(scope="module")
def slow_anatomy(tmp_path_factory):
    import gzip
    import shutil

    from receipts.ingest import nsys

    path = tmp_path_factory.mktemp("slow") / "profile.sqlite"
    with gzip.open(SLOW / "profile.sqlite.gz") as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return nsys.parse(path, rules=_rules())


def _parts_sum_to_the_range(anatomy) -> None:
    steps = comp.category_steps(anatomy.rows, anatomy.steps)
    parts = steps.filter(pl.col("category").is_in(STEP_PARTS)).group_by("step").agg(pl.col("ms").sum())
    steady = anatomy.steps.filter(~pl.col("warmup") & pl.col("step").is_not_null())
    wall = steady.group_by("step").agg(pl.col("wall_ms").mean())
    joined = parts.join(wall, on="step")
    assert joined.height == steady["step"].n_unique() > 0
    assert np.allclose(joined["ms"].to_numpy(), joined["wall_ms"].to_numpy(), rtol=1e-9, atol=1e-6)


def test_the_step_parts_and_the_host_gap_sum_to_the_step_range_under_kineto(kineto_anatomy):
    _parts_sum_to_the_range(kineto_anatomy)
    cats = set(comp.components(kineto_anatomy.rows, kineto_anatomy.steps, None, None)["name"])
    assert "host_gap" in cats


def test_the_step_parts_and_the_host_gap_sum_to_the_step_range_under_nsys(slow_anatomy):
    _parts_sum_to_the_range(slow_anatomy)


def test_a_slow_step_does_not_make_the_run_look_noisy(slow_anatomy):
    """Step 17 idles 25 ms, step 12 runs 48 extra GEMMs (README there): the run's value is a median and its
    within-run spread a MAD, so neither planted step widens the noise of idle in long gaps or of gemm."""
    steps = comp.category_steps(slow_anatomy.rows, slow_anatomy.steps)
    idle = steps.filter(pl.col("category") == "idle_long").sort("step")
    assert idle.filter(pl.col("step") == 17)["ms"][0] > 20.0       # the stall is there, one long gap
    spread = comp.step_spread(slow_anatomy.rows, slow_anatomy.steps)
    var, n = spread[("category", "idle_long")]
    assert n == idle.height and np.sqrt(var) < 0.5                 # ms: the sd of the median, not of the stall
    assert np.sqrt(spread[("category", "gemm")][0]) < 0.5


def _named(out: dict) -> list[tuple[str, str]]:
    return [(c["level"], c["name"]) for c in out["components"] if c["verdict"] == "changed"]


@pytest.mark.slow
def test_identical_runs_name_nothing_pairwise_either_way_round(explain_lane):
    """Every ordered pair of the six A/A runs (30 explanations of ~74 components: ~2,200 tests)."""
    named, p = {}, {}
    for a, b in itertools.permutations(AA, 2):
        code, out = cli_json(explain_lane, "explain", b, "--against", a)
        assert code == 0 and out["mode"] == "pairwise", out
        named[(a, b)] = _named(out)
        p[(a, b)] = {(c["level"], c["name"]): c["p_value"] for c in out["components"]}
    assert sum(map(len, named.values())) == 0, {k: v for k, v in named.items() if v}
    for a, b in itertools.combinations(AA, 2):  # symmetric: the same p either way round
        assert p[(a, b)].keys() == p[(b, a)].keys()
        assert all(p[(a, b)][k] == pytest.approx(p[(b, a)][k], rel=1e-6) for k in p[(a, b)])


@pytest.mark.slow
@pytest.mark.parametrize("run", ["stall_1", "gemm_1", "attn_1", "fp32_1"])
def test_pairwise_names_the_plant_first(explain_lane, run):
    code, out = cli_json(explain_lane, "explain", run, "--against", "base_3")
    first = next(c for c in out["components"] if c["verdict"] == "changed")
    expected = {"stall_1": ("category", "idle_long"),
                "gemm_1": ("kernel", "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"),
                "attn_1": ("kernel", "fmha_cutlassB_bf16_aligned_128x128_k128_seqaligned_sm80"),
                "fp32_1": ("kernel", "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL")}[run]
    assert (first["level"], first["name"].split("<")[0]) == expected


@pytest.mark.slow
def test_extra_gemms_are_a_structural_fact_priced_at_their_own_duration(explain_lane):
    code, out = cli_json(explain_lane, "explain", "gemm_1", "--against", "tag:main")
    k = next(c for c in out["components"] if c["name"] == "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT")
    assert k["evidence"] == "structural" and k["verdict"] == "changed" and k["calls_delta_per_step"] == 16
    # 16 bf16 4096^2 GEMMs on an H200: ~0.16-0.19 ms each, never the kernel's old mean of ~0.5 ms per call
    assert 0.12 < k["ms_per_added_call"] < 0.22 and k["slower_calls_ms_per_step"] is None
    assert k["more_calls_ms_per_step"] == pytest.approx(k["delta_ms_per_step"])
    assert k["baseline_ms_per_step"] / k["baseline_calls_per_step"] > 0.4


@pytest.mark.slow
@pytest.mark.parametrize("run", ["stall_1", "fp32_1", "aa_1"])
def test_one_component_one_verdict_whatever_level_is_shown(explain_lane, run):
    code, whole = cli_json(explain_lane, "explain", run, "--against", "tag:main")
    verdicts = {(c["level"], c["name"]): (c["verdict"], c["q_value"]) for c in whole["components"]}
    for level in ("category", "kernel", "nvtx", "rank"):
        code, one = cli_json(explain_lane, "explain", run, "--against", "tag:main", "--level", level)
        assert code == 0 and {c["level"] for c in one["components"]} == {level}
        assert {(c["level"], c["name"]): (c["verdict"], c["q_value"]) for c in one["components"]} == \
            {k: v for k, v in verdicts.items() if k[0] == level}
        assert one["noise"]["family"] == whole["noise"]["family"] == len(whole["components"])


@pytest.mark.slow
def test_the_aa_run_names_nothing_against_the_lane(explain_lane):
    code, out = cli_json(explain_lane, "explain", "aa_1", "--against", "tag:main")
    assert code == 0 and _named(out) == [] and out["noise"]["source"] == "lane"
    host_gap = next(c for c in out["components"] if c["name"] == "host_gap")
    assert host_gap["level"] == "category" and host_gap["verdict"] != "changed"


def test_each_profiler_has_its_own_calibration_and_a_mix_takes_the_larger_noise():
    from receipts.analysis.explain_noise import CALIBRATIONS, calibration_for

    assert calibration_for(["kineto"]) is CALIBRATIONS["kineto"] and calibration_for(["nsys"]) is CALIBRATIONS["nsys"]
    # the host's pace differs by profiler; the GPU's kernel timestamps do not
    assert CALIBRATIONS["kineto"].kappa_pct["gap"] > CALIBRATIONS["nsys"].kappa_pct["gap"]
    assert CALIBRATIONS["kineto"].kappa_pct["compute"] == CALIBRATIONS["nsys"].kappa_pct["compute"]
    mixed = calibration_for(["kineto", "nsys"])
    assert all(mixed.kappa_pct[k] == max(c.kappa_pct[k] for c in CALIBRATIONS.values()) for k in mixed.kappa_pct)
    assert mixed.df == min(c.df for c in CALIBRATIONS.values()) and "Nsight" in mixed.source
    assert calibration_for(["chrome"]).kappa_pct == CALIBRATIONS["nsys"].kappa_pct  # unknown: the shipped default


def test_pairwise_noise_scales_with_the_geometric_mean_either_way_round():
    """One run a side: idle that grew eightfold (a stall) is judged on the pair's log-scale middle, not widened to
    their mean; A against B is B against A."""
    from receipts.analysis.explain_noise import CALIBRATION, noise

    one, eight = np.array([1.0]), np.array([8.0])
    ab = noise(one, eight, np.zeros(1), np.zeros(1), "gap", floor_ms=0.001)
    ba = noise(eight, one, np.zeros(1), np.zeros(1), "gap", floor_ms=0.001)
    assert ab == ba
    assert ab.sigma == pytest.approx(CALIBRATION.kappa_pct["gap"] / 100.0 * np.sqrt(8.0))
    absent = noise(np.array([0.0]), eight, np.zeros(1), np.zeros(1), "gap", floor_ms=0.001)
    assert absent.sigma == pytest.approx(CALIBRATION.kappa_pct["gap"] / 100.0 * 4.0)  # one side lacks it: the mean
    cpu = noise(one, eight, np.zeros(1), np.zeros(1), "cpu", floor_ms=0.001)  # a CPU range: the mean (_pair_scale)
    assert cpu.sigma == pytest.approx(CALIBRATION.kappa_pct["cpu"] / 100.0 * 4.5)
