"""receipts.capture.Recorder: what it writes is what ingest/native.py reads, on CPU and from the H200 run.

No GPU here: CUDA-side facts are checked on the artifacts brought back from the device
(tests/data/gpu/README.md), against torch's own printout and NVIDIA's `nsys stats` CSV.
"""

from __future__ import annotations

import csv
import io
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from receipts.capture import Recorder
from receipts.ingest import native
from receipts.ingest.textlog import read_log

GPU = Path(__file__).resolve().parent / "data" / "gpu"


@pytest.fixture(autouse=True)
def _standalone(monkeypatch):
    for name in ("RECEIPTS_LAUNCHER", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)


def _records(path: Path) -> list[dict]:
    return [json.loads(line[8:]) for line in path.read_text().splitlines() if line.startswith("RECEIPT ")]


def test_recorder_without_cuda_labels_host_timing_and_no_gpu(tmp_path):
    log = tmp_path / "run.log"
    rec = Recorder(log, use_cuda=False)
    with rec.phase("warmup"):
        for n in range(2):
            with rec.step(n) as s:
                s.loss = 2.0
    for n in range(2, 6):
        with rec.step(n, tokens=4096) as s:
            s.loss = float("nan") if n == 3 else 1.5
            if n == 4:
                with rec.phase("checkpoint"):
                    pass
    with rec.phase("eval"):
        pass
    footer = rec.close()
    recs = _records(log)
    header = recs[0]
    assert header["kind"] == "header" and header["gpu_count"] == 0 and header["timing"] == "host"
    assert header["rank"] == 0 and header["world_size"] == 1
    steps = [r for r in recs if r["kind"] == "step"]
    assert [r["step"] for r in steps] == list(range(6))
    assert all(r["timing"] == "host" and r["step_ms"] == r["host_ms"] > 0 for r in steps)
    assert all(r["allocated_bytes"] is None for r in steps)   # no GPU: no memory numbers, never zeros
    assert steps[3]["loss"] is None                           # NaN is not JSON: recorded as null
    assert steps[2]["tokens_per_s"] == pytest.approx(4096 / (steps[2]["step_ms"] / 1000))
    assert footer["peak_allocated_bytes"] is None and footer["gpu_count"] == 0

    parsed = native.parse(read_log(log))
    assert parsed.steps.height == 6 and parsed.steps["rank"].to_list() == [0] * 6
    assert ("warmup", 0, 1) in parsed.phases and ("checkpoint", 4, 4) in parsed.phases
    assert ("eval", None, None) in parsed.phases                # no step ran inside it
    assert parsed.gpu_count == 0 and parsed.ended_early is None


def test_recorder_reads_rank_from_env_and_writes_to_a_stream(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    out = io.StringIO()  # no fileno(): plain write() of whole batches
    rec = Recorder(out, use_cuda=False)
    with rec.step(7):
        pass
    rec.close()
    recs = [json.loads(line[8:]) for line in out.getvalue().splitlines()]
    assert {r["rank"] for r in recs} == {3} and recs[0]["world_size"] == 8
    assert [r["kind"] for r in recs] == ["header", "step", "footer"]


def test_recorder_without_footer_reads_as_ended_early(tmp_path):
    log = tmp_path / "run.log"
    rec = Recorder(log, use_cuda=False)
    with rec.step(0):
        pass
    rec._flush()
    rec._closed = True  # as if the process were killed before close()
    assert "no RECEIPT footer" in native.parse(read_log(log)).ended_early


_WRITER = """
import sys
from receipts.capture import Recorder
rank, n = int(sys.argv[2]), int(sys.argv[3])
rec = Recorder(sys.argv[1], rank=rank, world_size=2, use_cuda=False)
for i in range(n):
    with rec.step(i, tokens=123456789) as s:
        s.loss = rank + i / n
rec.close()
"""


def test_two_ranks_append_one_file_without_interleaving(tmp_path):
    log = tmp_path / "shared.log"
    n = 3000
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(log), str(rank), str(n)]) for rank in (0, 1)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    lines = log.read_text().splitlines()
    assert all(line.startswith("RECEIPT {") for line in lines)
    for line in lines:
        json.loads(line[8:])  # every line whole
    parsed = native.parse(read_log(log))
    assert parsed.steps.height == 2 * n
    for rank in (0, 1):
        assert sorted(parsed.steps.filter(parsed.steps["rank"] == rank)["step"].to_list()) == list(range(n))
    assert sorted(m.rank for m in parsed.memory) == [0, 1]


# ----------------------------------------------------------------- the H200 run
def _torch_peaks(log: Path) -> dict[int, tuple[int, int]]:
    out = {}
    for line in log.read_text().splitlines():
        if line.startswith("TORCH_PEAKS "):
            d = json.loads(line[len("TORCH_PEAKS "):])
            out[d["rank"]] = (d["max_memory_allocated"], d["max_memory_reserved"])
    return out


@pytest.mark.parametrize("run, world", [("fsdp2_2gpu_nsys", 2), ("fsdp2_1gpu_nsys", 1), ("fsdp2_2gpu_kineto", 2)])
def test_h200_receipt_peaks_equal_torchs_own(run, world):
    log = GPU / run / "run.log"
    parsed = native.parse(read_log(log))
    peaks = {m.rank: (m.peak_allocated_bytes, m.peak_reserved_bytes) for m in parsed.memory if m.rank is not None}
    torch_says = _torch_peaks(log)
    assert len(torch_says) == world and peaks == torch_says
    assert parsed.gpu_model == "NVIDIA H200" and parsed.gpu_count == 2 and parsed.world_size == world
    assert parsed.steps.height == 20 * world
    assert parsed.steps["allocated_bytes"].min() > 0 and parsed.steps["reserved_bytes"].min() > 0
    assert ("warmup", 0, 2) in parsed.phases
    assert parsed.claim.preset == "toy_fsdp2_v1" and parsed.claim.regime == "fsdp2/no-compile"
    env = {e.name: e for e in parsed.env}
    assert env["NCCL_NVLS_ENABLE"].value == "0"                  # the machine's own setting, recorded
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"].is_set is False    # watched and explicitly unset
    assert parsed.topology["gpu_links"] == ["NV18"] and parsed.topology["numa_balancing"] == 0
    assert [r["gpu"] for r in parsed.topology["rank_map"]] == ["GPU0", "GPU1"][:world]  # torchrun --nproc_per_node
    assert parsed.software["driver"] == "580.159.04" and parsed.software["torch_cuda"] == "13.0"


def test_h200_header_from_a_tree_without_git_carries_the_ci_revision_and_cuda_suffix():
    """A later 1×H200 run (same workload), launched with RECEIPTS_GIT_REV from a copy of the tree
    without .git, after the torch build-suffix probe was fixed: both land in the receipt."""
    log = GPU / "fsdp2_1gpu_rev" / "run.log"
    parsed = native.parse(read_log(log))
    assert re.fullmatch(r"[0-9a-f]{40}", parsed.provenance["git_rev"])
    assert parsed.provenance["git_status"] == "not a git checkout; revision from $RECEIPTS_GIT_REV"
    software = parsed.software
    assert software["torch"] == "2.11.0+cu130" and software["torch_cuda_suffix"] == "cu130"
    assert software["torch_cuda"] == "13.0" and software["driver_cuda"] == "13.0"
    peaks = {m.rank: (m.peak_allocated_bytes, m.peak_reserved_bytes) for m in parsed.memory if m.rank is not None}
    assert peaks == _torch_peaks(log)


@pytest.mark.parametrize("run", ["fsdp2_2gpu_nsys", "fsdp2_1gpu_nsys"])
def test_h200_step_time_matches_nsys_nvtx_ranges(run):
    """Steady-state mean (steps 3-19, all ranks) of the recorder's CUDA-event step_ms against
    NVIDIA's own `nsys stats -r nvtx_pushpop_trace` durations of the same `:step N` ranges."""
    recs = _records(GPU / run / "run.log")
    steps = [r for r in recs if r["kind"] == "step" and r["step"] >= 3]
    assert all(r["timing"] == "cuda_event" for r in steps)
    with open(GPU / "stats" / f"{run}_nvtx_pushpop_trace.csv", newline="") as f:
        nvtx = [float(row["Duration (ns)"]) / 1e6 for row in csv.DictReader(f)
                if row["Name"].startswith(":step ") and int(row["Name"][6:]) >= 3]
    assert len(nvtx) == len(steps)
    ours, nvidia = statistics.mean(r["step_ms"] for r in steps), statistics.mean(nvtx)
    assert abs(ours - nvidia) / nvidia < 0.02, (ours, nvidia)
