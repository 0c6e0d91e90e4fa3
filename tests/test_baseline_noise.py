"""A comparison's noise comes from runs of the baseline's configuration (analysis/configuration.py), never from the
runs being judged or other pull requests' runs: the same pair gets the same verdict whatever else is in the lane.
Real 2-GPU H200 runs of tests/data/explain (logs only: the step-time verdict needs no profile)."""

from __future__ import annotations

import pytest

from cli_helpers import cli, cli_json
from conftest import EXPLAIN_DATA

pytestmark = pytest.mark.slow  # two stores of 8 and 14 real logs, ingested once (~6 s), shared by the module

BASE = [f"base_{i}" for i in range(1, 6)]
PRS = ["attn_1", "attn_2", "gemm_1", "gemm_2", "stall_1", "stall_2", "fp32_1", "fp32_2", "aa_1"]


def _store(tmp_path_factory, runs: list[str]) -> str:
    db = str(tmp_path_factory.mktemp("cfg") / "r.duckdb")
    result = cli(db, "ingest", *(str(EXPLAIN_DATA / r / "run.log") for r in runs))
    assert result.exit_code == 0, result.output
    return db


@pytest.fixture(scope="module")
def crowded(tmp_path_factory) -> str:
    """The baseline runs and every pull request's runs in one lane."""
    return _store(tmp_path_factory, BASE + PRS)


@pytest.fixture(scope="module")
def quiet(tmp_path_factory) -> str:
    """The baseline runs and only the runs under test."""
    return _store(tmp_path_factory, BASE + ["attn_1", "gemm_1", "aa_1"])


@pytest.mark.parametrize("b", ["attn_1", "gemm_1", "aa_1"])
def test_the_same_pair_gets_the_same_verdict_with_or_without_other_prs_in_the_lane(crowded, quiet, b):
    code_c, c = cli_json(crowded, "compare", "base_1", b)
    code_q, q = cli_json(quiet, "compare", "base_1", b)
    assert code_c == code_q == 0
    assert c["noise_floor"]["run_ids"] == q["noise_floor"]["run_ids"]
    assert c["noise_floor"]["basis"] == "5 runs tagged main" and c["noise_floor"]["source"] == "lane"
    assert (c["verdict"], c["ratio"]) == (q["verdict"], q["ratio"])
    assert c["noise_floor"]["floor_pct"] < 0.5   # base_1..5: 55.72-56.21 ms; pooled with the PRs it was ~4.6%


def test_planted_changes_are_slower_against_the_baseline_configuration(crowded):
    for b in ("attn_1", "gemm_1", "stall_1"):
        code, out = cli_json(crowded, "compare", "base_1", b)
        assert code == 0 and out["verdict"] == "slower", (b, out["why"])


def test_the_candidate_never_measures_its_own_floor(crowded):
    """A/A inside the baseline's tag: base_2 is judged, so it is not among the runs its noise is measured from."""
    code, out = cli_json(crowded, "compare", "base_1", "base_2")
    ids = set(out["noise_floor"]["run_ids"])
    assert code == 0 and out["noise_floor"]["basis"] == "4 runs tagged main" and len(ids) == 4
    assert out["b"]["id"] not in ids and out["a"]["id"] in ids


def test_too_few_baseline_runs_say_so(crowded):
    code, out = cli_json(crowded, "compare", "attn_1", "base_1")  # baseline pr-attn: attn_1 and attn_2
    assert code == 0 and out["noise_floor"]["source"] == "default"
    assert out["noise_floor"]["basis"] == "2 runs tagged pr-attn"
    assert "too few baseline runs to bound this" in out["why"]
    text = cli(crowded, "compare", "attn_1", "base_1").stdout
    assert "too few baseline runs to bound this" in text


def test_export_takes_one_configuration_and_warns_on_a_mixed_lane(crowded):
    import json

    mixed = cli(crowded, "export", "--format", "pytorch-v3")
    assert "mixes runs tagged" in mixed.stderr and "--tag T" in mixed.stderr
    main = cli(crowded, "export", "--format", "pytorch-v3", "--tag", "main")
    assert main.exit_code == 0 and "mixes" not in main.stderr
    step = next(r for r in json.loads(main.stdout) if r["metric"]["name"] == "step_time_ms")
    assert step["metric"]["extra_info"]["run_names"] == ",".join(BASE)
    bmf = json.loads(cli(crowded, "export", "--format", "bmf", "--tag", "main").stdout)
    (lane,) = bmf.values()
    assert 55.7 < lane["step_time_ms"]["value"] < 56.3   # base_5, not the newest PR run


def test_a_pair_claim_in_the_gate_takes_the_same_floor_as_compare(crowded, quiet, tmp_path):
    """A claim whose baseline is a receipt is judged as `compare` judges the pair: the baseline's configuration."""
    import json

    claims = tmp_path / "claims.yaml"
    claims.write_text("version: 1\nclaims:\n"
                      "  - {name: attention swap, baseline: base_1, candidate: attn_1, metric: step_time, "
                      "speedup: 0.87, tolerance: 0.03}\n")
    judged = []
    for db in (crowded, quiet):
        (claim,) = json.loads(cli(db, "gate", str(claims), "--json").stdout)["claims"]
        judged.append((claim["accepted"], claim["reasons"], claim["measured"]))
    assert judged[0] == judged[1]
    assert judged[0][2]["note"].endswith("from 5 runs tagged main")
