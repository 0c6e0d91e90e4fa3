"""`memory_drift` from every source a receipt has: receipts measured by a snapshot alone, with estimates attached
(the closed form and the tracker's), one row per bucket, measured beside estimated; `show` prints the same rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import cli, cli_json

DATA = Path(__file__).parent / "data" / "memory"
PARAMS = "67170304"


def _plain_log(path: Path, name: str) -> None:
    """A receipt with no memory of its own (no footer `memory`): the snapshot is its only measured source."""
    lines = [{"v": 1, "kind": "header", "rank": 0, "run_name": name, "world_size": 1, "gpu_count": 1,
              "identity": {"host_lineage": "h200-device-x2", "preset": "toy", "regime": "fsdp2/no-compile"}}]
    lines += [{"v": 1, "kind": "step", "step": n, "rank": 0, "step_ms": 100.0 + n % 3} for n in range(30)]
    lines += [{"v": 1, "kind": "footer", "rank": 0}]
    path.write_text("".join("RECEIPT " + json.dumps(r) + "\n" for r in lines))


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("drift")
    db = str(root / "d.duckdb")
    for name, run, optimizer in (("snap_adamw", "adamw_2gpu", "adamw"), ("snap_sgd", "sgd_2gpu", "sgd")):
        _plain_log(root / f"{name}.log", name)
        assert cli_json(db, "ingest", str(root / f"{name}.log"))[0] == 0
        snap = str(DATA / run / "snapshot" / "rank0.pickle.gz")
        assert cli_json(db, "ingest", snap, "--attach", name)[0] == 0
        code, out = cli_json(db, "estimate", "--params", PARAMS, "--shard-degree", "2", "--optimizer", optimizer,
                             "--master-dtype", "fp32", "--micro-batch", "4", "--sequence", "1024", "--hidden",
                             "1024", "--layers", "4", "--vocab", "8192", "--attach", name)
        assert code == 0, out
    return db


def test_snapshot_categories_are_mapped_onto_the_estimates_buckets(store):
    g = cli_json(store, "show", "snap_adamw")[1]["memory_geometry"]
    assert g["source"] == "snapshot" and [e["label"] for e in g["estimates"]] == ["closed form"]
    rows = {r["bucket"]: r for r in g["buckets"]}
    snap = g["categories"]
    # a module's forward is activations; what was allocated before recording is parameters and optimizer state
    assert rows["activations"]["measured_bytes"] == snap["forward"]
    assert rows["activations"]["measured_by"] == "snapshot"
    est = g["estimate"]["buckets"]
    assert rows["resident"]["measured_bytes"] == snap["resident"]
    assert rows["resident"]["estimated_bytes"] == est["parameters"] + est["optimizer_state"]
    assert rows["optimizer_state"]["estimated_bytes"] == 268_681_216
    assert len([r for r in g["buckets"] if r["bucket"] == "resident"]) == 1
    text = cli(store, "show", "snap_adamw").output
    assert "activations (snapshot)" in text and "closed form" in text


def test_adamw_to_sgd_names_the_optimizer_bucket_without_a_capture(store):
    drift = cli_json(store, "compare", "snap_adamw", "snap_sgd")[1]["memory_drift"]
    names = [d["category"] for d in drift]
    assert len(names) == len(set(names))          # one row per bucket: `resident` once
    by = {d["category"]: d for d in drift}
    assert by["optimizer_state"] == {"category": "optimizer_state", "kind": "estimate", "a_bytes": 268_681_216,
                                     "b_bytes": 134_340_608, "delta_bytes": -134_340_608}
    assert by["resident"]["kind"] == "snapshot" and by["resident"]["delta_bytes"] == -134_340_608
    assert "resident_between_steps" in by and by["resident_between_steps"]["kind"] == "total"
    assert drift[0]["category"] == "optimizer_state"
    text = cli(store, "compare", "snap_adamw", "snap_sgd").output
    assert "optimizer_state (estimated)" in text
