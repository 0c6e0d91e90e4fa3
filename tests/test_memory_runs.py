"""The memory geometry of real runs (tests/data/memory, made on 2 x H200 by tests/gpu/memory_runs.sh): what
receipts.capture and the snapshot reader measure, against torch's own numbers printed by the same runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from receipts.ingest import memory_snapshot
from receipts.ingest.textlog import read_log
from receipts.ingest import native

DATA = Path(__file__).parent / "data" / "memory"
RUNS = ("adamw_2gpu", "sgd_2gpu", "adamw_2gpu_ckpt", "adamw_1gpu")


def printed(run: str, prefix: str) -> dict[int, dict]:
    """The run's `PREFIX {json}` lines by rank (torch's numbers, printed by tests/gpu/train_fsdp2.py)."""
    out = {}
    for line in (DATA / run / "run.log").read_text().splitlines():
        if line.startswith(prefix + " "):
            record = json.loads(line[len(prefix) + 1:])
            out[record["rank"]] = record
    return out


def captured(run: str) -> dict[int, object]:
    parsed = native.parse(read_log(DATA / run / "run.log"))
    return {g.rank: g for g in parsed.memory_geometry}


@pytest.mark.parametrize("run", RUNS)
def test_captured_buckets_equal_torchs_nbytes_of_the_same_shards(run):
    torch_says = printed(run, "TORCH_MEMORY")
    geometry = captured(run)
    assert sorted(geometry) == sorted(torch_says) == list(range(torch_says[0]["world_size"]))
    for rank, t in torch_says.items():
        g = geometry[rank]
        assert g.kind == "capture" and g.detail["peak_window"] == "steady"
        assert g.category("parameters") == t["parameters_bytes"]
        assert g.category("gradients") == t["gradients_bytes"]
        assert g.category("optimizer_state") == t["optimizer_state_bytes"]
        assert g.device_total_bytes == t["total_memory"]
        assert (g.alloc_retries, g.ooms) == (0, 0)


@pytest.mark.parametrize("run", RUNS)
def test_recorders_steady_peaks_equal_torchs(run):
    """Both are the peaks since the last reset, read at the end of the run."""
    for rank, t in printed(run, "TORCH_PEAKS").items():
        g = captured(run)[rank]
        assert (g.peak_allocated_bytes, g.peak_reserved_bytes) == (t["max_memory_allocated"], t["max_memory_reserved"])


@pytest.mark.parametrize("run", RUNS)
def test_snapshot_replayed_peak_equals_max_memory_allocated(run):
    """The peak replayed from the trace, block sizes as the allocator counts them, is torch's
    max_memory_allocated over the same steps, to the byte; likewise reserved."""
    peaks = printed(run, "SNAPSHOT_PEAKS")
    for rank, p in peaks.items():
        (g,) = memory_snapshot.parse(DATA / run / "snapshot" / f"rank{rank}.pickle.gz")
        assert g.warnings == ()
        assert g.peak_allocated_bytes == p["max_memory_allocated"]
        assert g.peak_reserved_bytes == p["max_memory_reserved"]
        assert 0 <= g.fragmentation_at_peak_bytes <= g.peak_reserved_bytes - g.peak_allocated_bytes
        assert sum(b for _, b in g.categories) == g.peak_allocated_bytes
        # what was allocated before recording began (parameters, optimizer state) is resident at the peak
        assert g.category("resident") == g.detail["allocated_at_start_bytes"]


def test_sgd_halves_the_optimizer_bucket():
    adamw, sgd = captured("adamw_2gpu"), captured("sgd_2gpu")
    for rank in (0, 1):
        assert 2 * sgd[rank].category("optimizer_state") == adamw[rank].category("optimizer_state")
        assert sgd[rank].category("parameters") == adamw[rank].category("parameters")
    # and what stays between steps drops by the same bytes
    assert adamw[0].resident_bytes - sgd[0].resident_bytes == sgd[0].category("optimizer_state")


def test_activation_checkpointing_lowers_activations_and_the_peak():
    plain, ckpt = captured("adamw_2gpu"), captured("adamw_2gpu_ckpt")
    for rank in (0, 1):
        assert ckpt[rank].category("activations") < plain[rank].category("activations") / 5
        assert ckpt[rank].peak_allocated_bytes < plain[rank].peak_allocated_bytes
    snap = {name: memory_snapshot.parse(DATA / name / "snapshot" / "rank0.pickle.gz")[0]
            for name in ("adamw_2gpu", "adamw_2gpu_ckpt")}
    assert snap["adamw_2gpu_ckpt"].category("forward") < snap["adamw_2gpu"].category("forward") / 2


def test_two_gpus_halve_the_shards():
    one, two = captured("adamw_1gpu")[0], captured("adamw_2gpu")
    for bucket in ("parameters", "gradients", "optimizer_state"):
        assert two[0].category(bucket) == two[1].category(bucket) == one.category(bucket) // 2


@pytest.mark.parametrize("run", RUNS)
def test_estimate_equals_the_measured_shards_of_every_run(run):
    """FSDP2 full sharding over the run's ranks: parameters, gradients and optimizer state per rank, estimated
    from the parameter count alone, are the measured bytes exactly; the activation estimate is reported beside
    the measured value with its error."""
    from receipts.analysis.estimate import Activations, EstimateConfig, Family, estimate

    t = printed(run, "TORCH_MEMORY")[0]
    shape = t["shape"]
    e = estimate(EstimateConfig(
        (Family("model", t["param_count"], optimizer=t["optimizer"]),), shard_degree=t["world_size"],
        activations=Activations(micro_batch=shape["batch"], sequence=shape["seq"], hidden=shape["d_model"],
                                layers=shape["layers"], vocab=shape["vocab"],
                                recompute="full" if t["activation_checkpointing"] else "none"))).buckets()
    for rank, g in captured(run).items():
        for bucket in ("parameters", "gradients", "optimizer_state"):
            assert e[bucket] == g.category(bucket), (rank, bucket)
        error = (e["activations"] - g.category("activations")) / g.category("activations")
        assert -0.5 < error < 0.5, error  # a formula for a Megatron GPT layer, beside a toy block
