"""`receipts export --format bmf|pytorch-v3`: real runs out to Bencher and PyTorch's benchmark database.

Each output is validated against its format's published shape: Bencher's BMF JSON Schema
(https://bencher.dev/docs/reference/bencher-metric-format, schema `https://bencher.dev/bmf.json`) and the
columns of PyTorch's `oss_ci_benchmark_v3` table (pytorch/test-infra,
clickhouse_db_schema/oss_ci_benchmark_v3/schema.sql) written as a JSON Schema: ClickHouse's String as a
string, UInt32 a non-negative integer, Float32 a number, Map(String, String) an object of strings, Array an
array. The numbers are checked against a hand count of the logs' RECEIPT step lines.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import jsonschema
import pytest

from tests.cli_helpers import cli
from tests.conftest import GPU_DATA, REPO

NOISE = REPO / "tests" / "data" / "noise"

# Bencher's published schema (draft-07), as the reference page gives it.
BMF_SCHEMA = {
    "$id": "https://bencher.dev/bmf.json",
    "$schema": "http://json-schema.org/draft-07/schema",
    "type": "object",
    "patternProperties": {".+": {"type": "object", "patternProperties": {".+": {
        "type": "object",
        "properties": {"value": {"type": "number"}, "lower_value": {"type": "number"},
                       "upper_value": {"type": "number"}},
        "required": ["value"]}}}},
}

_STR = {"type": "string"}
_U32 = {"type": "integer", "minimum": 0, "maximum": 2**32 - 1}
_MAP = {"type": "object", "additionalProperties": {"type": "string"}}


def _tuple(**fields) -> dict:
    return {"type": "object", "properties": fields, "required": list(fields), "additionalProperties": False}


# The record a benchmark job uploads: oss_ci_benchmark_v3's columns that describe the result (the uploader
# adds timestamp, repo, head_branch, head_sha, workflow_id, run_attempt, job_id).
V3_SCHEMA = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["benchmark", "model", "metric"],
        "additionalProperties": False,
        "properties": {
            "benchmark": _tuple(name=_STR, mode=_STR, dtype=_STR, extra_info=_MAP),
            "model": _tuple(name=_STR, type=_STR, backend=_STR, origins={"type": "array", "items": _STR},
                            extra_info=_MAP),
            "metric": _tuple(name=_STR, benchmark_values={"type": "array", "items": {"type": "number"}},
                             target_value={"type": "number"}, extra_info=_MAP),
            "runners": {"type": "array", "items": _tuple(
                name=_STR, type=_STR, cpu_info=_STR, cpu_count=_U32, mem_info=_STR, avail_mem_in_gb=_U32,
                gpu_info=_STR, gpu_count=_U32, gpu_mem_info=_STR, avail_gpu_mem_in_gb=_U32, extra_info=_MAP)},
            "inputs": {"type": "object", "additionalProperties": _tuple(dtype=_STR, extra_info=_MAP)},
            "dependencies": {"type": "object", "additionalProperties": _tuple(
                repo=_STR, branch=_STR, sha=_STR, version=_STR, extra_info=_MAP)},
        },
    },
}
LANE = "h100-device-x1 toy_fsdp2_v1 fsdp2/no-compile"


def _steps(run: str) -> list[dict]:
    return [json.loads(line[8:]) for line in (NOISE / run / "run.log").read_text().splitlines()
            if line.startswith('RECEIPT {"v":1,"kind":"step"')]


def _hand_median(run: str, key: str) -> float:
    """The steady median by hand: steps >= 3 of the RECEIPT step lines (step 0 compiles, 1-2 warm up)."""
    return statistics.median(s[key] for s in _steps(run) if s["step"] >= 3)


def export(db: str, *args: str):
    result = cli(db, "export", *args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_bmf_is_one_benchmark_per_lane_from_its_newest_run(noise_db):
    bmf = export(noise_db, "--format", "bmf")
    jsonschema.validate(bmf, BMF_SCHEMA)
    assert list(bmf) == [LANE]
    measures = bmf[LANE]
    assert set(measures) == {"step_time_ms", "tokens_per_s", "peak_allocated_bytes"}  # no export attached
    step = measures["step_time_ms"]
    assert step["value"] == pytest.approx(_hand_median("slow_3", "step_ms"), rel=1e-6)  # the lane's newest run
    assert step["lower_value"] < step["value"] < step["upper_value"]
    assert measures["tokens_per_s"]["value"] == pytest.approx(_hand_median("slow_3", "tokens_per_s"), rel=1e-6)
    assert set(measures["peak_allocated_bytes"]) == {"value"}


def test_pytorch_v3_records_carry_every_run_of_the_lane_and_tag(noise_db):
    """One record per lane, tag set and measure: the lane's 10 main runs and its PR runs are never one pool."""
    records = export(noise_db, "--format", "pytorch-v3")
    jsonschema.validate(records, V3_SCHEMA)
    steps = {r["benchmark"]["extra_info"]["tags"]: r for r in records if r["metric"]["name"] == "step_time_ms"}
    assert set(steps) == {"main", "pr-subfloor", "pr-slow"}
    by_metric = {r["metric"]["name"] for r in records}
    assert by_metric == {"step_time_ms", "tokens_per_s", "peak_allocated_bytes"}
    step = steps["main"]
    names = step["metric"]["extra_info"]["run_names"].split(",")
    assert names == [f"aa_{i:02d}" for i in range(1, 11)]  # the 10 main runs, in run order
    assert step["metric"]["benchmark_values"] == pytest.approx([_hand_median(n, "step_ms") for n in names], rel=1e-6)
    assert steps["pr-slow"]["metric"]["extra_info"]["run_names"] == "slow_1,slow_2,slow_3"
    assert step["model"]["name"] == "toy_fsdp2_v1" and step["benchmark"]["mode"] == "training"
    assert step["runners"][0]["gpu_info"].startswith("NVIDIA H100") and step["runners"][0]["gpu_count"] == 1
    lows = [float(v) for v in step["metric"]["extra_info"]["lower_values"].split(",")]
    assert all(lo < v for lo, v in zip(lows, step["metric"]["benchmark_values"]))


def test_export_selects_runs_as_check_does_and_says_which(noise_db):
    """--tag and --last pick a lane's runs like check's baseline (`--against tag:main --last 3`); stderr names them."""
    done = cli(noise_db, "export", "--format", "bmf", "--tag", "main", "--lane", LANE)
    assert done.exit_code == 0, done.stderr
    bmf = json.loads(done.stdout)
    assert bmf[LANE]["step_time_ms"]["value"] == pytest.approx(_hand_median("aa_10", "step_ms"), rel=1e-6)
    said = " ".join(done.stderr.split())
    assert f"exported {LANE}: its newest run aa_10" in said and "tags main)" in said
    done = cli(noise_db, "export", "--format", "pytorch-v3", "--tag", "main", "--last", "3")
    (step,) = [r for r in json.loads(done.stdout) if r["metric"]["name"] == "step_time_ms"]
    assert step["metric"]["extra_info"]["run_names"] == "aa_08,aa_09,aa_10"
    assert f"exported {LANE}: 3 run(s) tagged main, aa_08 .. aa_10" in " ".join(done.stderr.split())
    typo = cli(noise_db, "export", "--format", "bmf", "--tag", "mian")
    assert json.loads(typo.stdout) == {} and "did you mean 'main'?" in typo.stderr


def test_since_and_lane_select_runs(noise_db):
    records = export(noise_db, "--format", "pytorch-v3", "--since", "2026-11-23T18:47:30Z")
    step = next(r for r in records if r["metric"]["name"] == "step_time_ms")
    assert step["metric"]["extra_info"]["run_names"] == "slow_1,slow_2,slow_3"
    assert export(noise_db, "--format", "bmf", "--lane", "no-such-lane") == {}
    bad = cli(noise_db, "export", "--format", "bmf", "--since", "last tuesday")
    assert bad.exit_code == 2 and "--since 'last tuesday'" in bad.stderr
    bad = cli(noise_db, "export", "--format", "csv")
    assert bad.exit_code == 2 and "bmf or pytorch-v3" in bad.stderr


def test_exposed_communication_comes_from_the_attached_export(tmp_path):
    db = str(tmp_path / "x.duckdb")
    assert cli(db, "ingest", str(GPU_DATA / "fsdp2_2gpu_nsys" / "run.log")).exit_code == 0
    assert cli(db, "ingest", str(GPU_DATA / "fsdp2_2gpu_nsys.sqlite.gz"), "--attach", "fsdp2_2gpu_nsys").exit_code == 0
    bmf = export(db, "--format", "bmf")
    jsonschema.validate(bmf, BMF_SCHEMA)
    (measures,) = bmf.values()
    # by hand from the anatomy's per-step rows: exposed comm over the steady steps of each rank, per step,
    # then the mean of the ranks
    report = json.loads(cli(db, "anatomy", "fsdp2_2gpu_nsys", "--json").stdout)
    per_rank: dict[int, list[float]] = {}
    steady_steps: dict[int, set[int]] = {}
    for r in report["step_rows"]:
        if not r["warmup"]:
            steady_steps.setdefault(r["rank"], set()).add(r["step"])
            if r["category"] == "exposed_comm":
                per_rank.setdefault(r["rank"], []).append(r["time_ms"])
    expected = statistics.mean(sum(v) / len(steady_steps[rank]) for rank, v in per_rank.items())
    assert measures["exposed_comm_ms"]["value"] == pytest.approx(expected, rel=1e-9)
    v3 = export(db, "--format", "pytorch-v3")
    jsonschema.validate(v3, V3_SCHEMA)
    assert {r["metric"]["name"] for r in v3} == {"step_time_ms", "tokens_per_s", "peak_allocated_bytes",
                                                 "exposed_comm_ms"}
    assert Path(db).exists()
