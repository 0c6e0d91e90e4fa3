"""`receipts estimate --model`: PyTorch's FSDPMemTracker over the model itself, under FakeTensorMode with a fake
process group (torch's CPU build is enough: no device memory is used). Slow: each imports torch's tracker."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import cli, cli_json

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

MODEL = str(Path(__file__).parent / "gpu" / "memory_model.py")


def test_the_trackers_categories_are_the_estimate_and_sharding_divides_them(tmp_path):
    db = str(tmp_path / "s.duckdb")
    code, one = cli_json(db, "estimate", "--model", f"{MODEL}:tiny")
    assert code == 0, one
    code, eight = cli_json(db, "estimate", "--model", f"{MODEL}:tiny", "--world-size", "8")
    assert code == 0, eight
    params = one["tracker"]["model_params"]
    assert params == eight["tracker"]["model_params"] == 132_992
    assert (one["method"], one["tracker"]["world_size"], eight["tracker"]["mesh_shape"]) == ("FSDPMemTracker", 1, [8])
    # fp32 sharded parameters: the whole model on one rank, an eighth on each of eight; AdamW's two moments
    assert one["categories"]["replicated_params"] == params * 4
    assert eight["categories"]["replicated_params"] == params * 4 // 8
    assert one["categories"]["other_optimizer"] >= 2 * params * 4
    # the tracker's peak is its snapshot at the peak: the categories add up to it
    fields = {k: v for k, v in eight["categories"].items() if k not in ("runtime_reserve", "overhead")}
    assert sum(fields.values()) == eight["peak_allocated_bytes"]
    assert eight["categories"]["collective_buffers"] > 0 and eight["categories"]["unsharded_params"] > 0


def test_a_factory_that_raises_is_one_line(tmp_path):
    result = cli(str(tmp_path / "s.duckdb"), "estimate", "--model", f"{MODEL}:raises")
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert lines[-1] == f"Error: --model {MODEL}:raises: raised RuntimeError: the config server is unreachable"
    for spec, message in ((f"{MODEL}:nothing", "has no function nothing"), ("no_such_module:build",
                          "importing no_such_module raised ModuleNotFoundError"), ("build", "expected module:function")):
        result = cli(str(tmp_path / "s.duckdb"), "estimate", "--model", spec)
        assert result.exit_code == 2 and message in result.output, result.output


def test_a_model_based_estimate_attaches_beside_the_closed_form(tmp_path):
    db = str(tmp_path / "s.duckdb")
    data = Path(__file__).parent / "data" / "memory" / "fit" / "adamw" / "run.log"
    assert cli_json(db, "ingest", str(data), "--run-name", "fit_adamw")[0] == 0
    code, out = cli_json(db, "estimate", "--model", f"{MODEL}:tiny", "--attach", "fit_adamw")
    assert code == 0 and out["attached"]["created"], out
    assert cli_json(db, "estimate", "--params", "132992", "--attach", "fit_adamw")[1]["attached"]["created"]
    g = cli_json(db, "show", "fit_adamw")[1]["memory_geometry"]
    assert [e["label"] for e in g["estimates"]] == ["FSDPMemTracker", "closed form"]
    tracker = g["estimates"][0]
    assert tracker["allocated_bytes"] == out["peak_allocated_bytes"]
    rows = {r["bucket"]: r for r in g["buckets"]}
    assert rows["parameters"]["estimated"]["FSDPMemTracker"] == out["buckets"]["parameters"]
    assert rows["parameters"]["estimated"]["closed form"] == 132992 * 4
