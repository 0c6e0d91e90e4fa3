"""Sysinfo parsers and preflight rules, on real outputs: shared/realdata/sysinfo and the H200 box.

Expected numbers come from reading the files by eye (and nccl-tests' own summary line), not from
the parsers' output.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from receipts.analysis.preflight import PathFact, PreflightFacts, run_preflight
from receipts.errors import InputError
from receipts.ingest import collect_env, nccl_tests, topology

from conftest import realdata

GPU = Path(__file__).resolve().parent / "data" / "gpu"

# A representative 8-GPU + 2-NIC table in nvidia-smi's layout (tabs, ' X ' self cells, double tab
# before the empty GPU NUMA ID), with two deliberately broken GPU pairs: SYS and PHB.
EIGHT_GPU_TOPO = "\t" + "\t".join([f"GPU{i}" for i in range(8)] + ["NIC0", "NIC1", "CPU Affinity", "NUMA Affinity",
                                                                    "GPU NUMA ID"]) + "\n"
for i in range(8):
    cells = [" X " if j == i else "NV18" for j in range(8)]
    if i in (0, 5):
        cells[5 if i == 0 else 0] = "SYS"
    if i in (1, 2):
        cells[2 if i == 1 else 1] = "PHB"
    nics = ["PIX" if i < 4 else "SYS", "SYS" if i < 4 else "PIX"]
    affinity = ["0-55,112-167", "0"] if i < 4 else ["56-111,168-223", "1"]
    EIGHT_GPU_TOPO += "\t".join([f"GPU{i}", *cells, *nics, affinity[0], affinity[1], "", "N/A"]) + "\n"
EIGHT_GPU_TOPO += "NIC0\t" + "\t".join(["PIX"] * 4 + ["SYS"] * 4 + [" X ", "SYS"]) + "\n"
EIGHT_GPU_TOPO += "NIC1\t" + "\t".join(["SYS"] * 4 + ["PIX"] * 4 + ["SYS", " X "]) + "\n"
EIGHT_GPU_TOPO += "\nLegend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe as well as the SMP interconnect\n" \
                  "  NV#  = Connection traversing a bonded set of # NVLinks\n\nNIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_1\n"


def test_topology_from_the_h200_box():
    topo = topology.parse(GPU / "sysinfo" / "nvidia-smi_topo_m.txt")  # header carries ANSI underline codes
    assert topo.devices == ("GPU0", "GPU1")
    assert topo.gpu_pairs() == [("GPU0", "GPU1", "NV18")]
    assert topo.cells[("GPU0", "GPU0")] == "X"
    assert topo.affinity["GPU1"] == {"CPU Affinity": "0-31", "NUMA Affinity": "0", "GPU NUMA ID": "N/A"}
    assert set(topo.legend) == {"X", "SYS", "NODE", "PHB", "PXB", "PIX", "NV#"}
    assert topo.nics == ()


def test_topology_nics_fallback_cells_and_rank_map():
    topo = topology.parse_text(EIGHT_GPU_TOPO)
    assert topo.gpus == tuple(f"GPU{i}" for i in range(8)) and topo.nics == ("NIC0", "NIC1")
    assert topo.nic_names == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    broken = sorted((a, b, c) for a, b, c in topo.gpu_pairs() if c != "NV18")
    assert broken == [("GPU0", "GPU5", "SYS"), ("GPU1", "GPU2", "PHB")]
    assert topo.nearest_nic("GPU6") == "NIC1"
    rows = topology.rank_map(topo, local_ranks=2, visible_devices="4,5")
    assert [(r["local_rank"], r["gpu"], r["nic_name"], r["numa_affinity"]) for r in rows] == \
        [(0, "GPU4", "mlx5_1", "1"), (1, "GPU5", "mlx5_1", "1")]
    facts = PreflightFacts(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=8, gpu_links=tuple(topo.gpu_pairs()),
                           topology_available=True)
    (finding,) = run_preflight(facts).findings
    assert finding.rule == "topology-fallback" and finding.severity == "error"
    assert finding.evidence["pairs"] == [["GPU0", "GPU5", "SYS"], ["GPU1", "GPU2", "PHB"]]


def test_topology_rejects_other_text():
    smi_table = realdata("sysinfo", "modded-nanogpt__track_1_short_2024-10-09_SOAP__nvidia-smi.txt")
    with pytest.raises(InputError, match="nvidia-smi topo -m"):
        topology.parse(smi_table)


@pytest.mark.parametrize("name, torch, suffix, cuda, driver, n_gpus, model", [
    ("vllm_issue11959_collect_env_8xH100_excerpt.txt", "2.5.1+cu124", "cu124", "12.4", "550.127.05", 8,
     "NVIDIA H100 80GB HBM3"),
    ("vllm_issue6408_collect_env_8xH100_excerpt.txt", "2.3.0+cu121", "cu121", "12.1", "550.54.15", 8,
     "NVIDIA H100 80GB HBM3"),
])
def test_collect_env_realdata(name, torch, suffix, cuda, driver, n_gpus, model):
    env = collect_env.parse(realdata("sysinfo", name))
    assert env.software["torch"] == torch and env.software["torch_cuda_suffix"] == suffix
    assert env.software["cuda"] == cuda and env.software["driver"] == driver
    assert env.gpu_count == n_gpus and env.gpu_model == model
    assert "nccl" not in env.software  # these excerpts stop before the library list: absent, not guessed


def test_collect_env_from_the_h200_box():
    env = collect_env.parse(GPU / "sysinfo" / "collect_env.txt")
    assert env.software["torch"] == "2.11.0+cu130" and env.software["torch_cuda_suffix"] == "cu130"
    assert env.software["driver"] == "580.159.04" and env.software["cuda_runtime"] == "13.0.88"
    assert env.software["cudnn"] == "9.14.0"     # from 'Probably one of the following:' + library sonames
    assert env.software["nccl"] == "2.28.9"      # [pip3] nvidia-nccl-cu13==2.28.9
    assert env.gpus == ("NVIDIA H200", "NVIDIA H200")


def test_nccl_tests_all_reduce_perf():
    result = nccl_tests.parse(realdata("sysinfo", "a3mega_2x8xH100_all_reduce_perf.md"))
    assert len(result.rows) == 31                      # 8 B .. 8 GiB, factor 2
    assert result.avg_busbw_gbps == pytest.approx(70.742)  # the tool's own summary line
    assert result.peak_busbw_gbps == pytest.approx(338.82)
    assert result.n_gpus_total == 16 and result.devices[0] == "NVIDIA H100 80GB HBM3"
    assert result.params["warmup iters"] == "5" and result.params["maxBytes"] == "8589934592"
    first, last = result.rows[0], result.rows[-1]
    assert (first.size_bytes, first.count, first.dtype, first.redop, first.root) == (8, 2, "float", "sum", -1)
    assert (last.oop_time_us, last.oop_algbw_gbps, last.ip_busbw_gbps) == (47535.0, 180.71, 337.35)
    assert result.out_of_bounds == 0


def test_nccl_tests_rejects_text_without_rows(tmp_path):
    p = tmp_path / "x.txt"
    p.write_text("# nThread 1 nGpus 1\n# Avg bus bandwidth    : 1.0\n")
    with pytest.raises(InputError, match="no nccl-tests result rows"):
        nccl_tests.parse(p)


def _header(run: str) -> dict:
    for line in (GPU / run / "run.log").read_text().splitlines():
        if line.startswith("RECEIPT ") and '"writer":"receipts run"' in line and '"kind":"header"' in line:
            return json.loads(line[8:])
    raise AssertionError("no launcher header")


def test_preflight_on_the_h200_box_facts_is_clean():
    """The launcher header from the device run holds everything preflight needs."""
    h = _header("fsdp2_2gpu_nsys")
    topo = topology.parse_text(h["topology"]["nvidia_smi_topo_m"])
    facts = PreflightFacts(gpu_model=h["gpu_model"], gpu_count=h["gpu_count"], gpu_links=tuple(topo.gpu_pairs()),
                           topology_available=True, numa_balancing=h["topology"]["numa_balancing"], env=h["env"],
                           regime=h["identity"]["regime"], torch_version=h["software"]["torch"], expect_cuda=None)
    report = run_preflight(facts)
    assert report.ok and report.findings == ()
    # torch's wheel metadata has no local suffix on that box; collect_env shows +cu130
    assert run_preflight(PreflightFacts(torch_version="2.11.0+cu130", expect_cuda="cu132")).errors[0].rule \
        == "torch-cuda-suffix"


@pytest.mark.parametrize("facts, rule, severity", [
    (PreflightFacts(numa_balancing=1), "numa-balancing", "warning"),
    (PreflightFacts(env={"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, regime="fsdp2/regional-compile"),
     "max-connections-fsdp2", "error"),
    (PreflightFacts(env={"CUDA_DEVICE_MAX_CONNECTIONS": "1"}), "max-connections-fsdp2", "warning"),
    (PreflightFacts(env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                         "PYTORCH_ALLOC_CONF": "expandable_segments:False"}), "alloc-conf-conflict", "error"),
    (PreflightFacts(env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}), "alloc-conf-alias", "warning"),
    (PreflightFacts(env={"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "600"}, compile_window_s=1800),
     "heartbeat-shorter-than-compile", "error"),
    (PreflightFacts(compile_window_s=900), "heartbeat-shorter-than-compile", "error"),  # unset = 480 s default
    (PreflightFacts(env={"NCCL_MNNVL_ENABLE": "1"}), "mnnvl-forced", "error"),
    (PreflightFacts(torch_version="2.9.1+cu128", expect_cuda="cu132"), "torch-cuda-suffix", "error"),
    (PreflightFacts(paths=(PathFact("HF_HOME", "/root/.cache/hf", True),)), "paths-on-root-volume", "warning"),
    (PreflightFacts(env={"CUDA_VISIBLE_DEVICES": "3"}), "visible-devices-masked", "warning"),
])
def test_each_rule_fires(facts, rule, severity):
    report = run_preflight(facts)
    assert [(f.rule, f.severity) for f in report.findings] == [(rule, severity)]
    assert report.findings[0].reason and report.findings[0].fix
    assert report.ok == (severity != "error")


@pytest.mark.parametrize("facts", [
    PreflightFacts(env={"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, regime="megatron/no-compile/tp2"),
    PreflightFacts(env={"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "7200"}, compile_window_s=1800),
    PreflightFacts(env={"NCCL_MNNVL_ENABLE": "0", "PYTORCH_ALLOC_CONF": "expandable_segments:True"}),
    PreflightFacts(torch_version="2.11.0+cu132", expect_cuda="cu132", numa_balancing=0),
    PreflightFacts(paths=(PathFact("data_path", "/mnt/data", False),)),
])
def test_rules_stay_quiet_when_fine(facts):
    assert run_preflight(facts).findings == ()


def test_preflight_without_nvidia_smi_says_what_it_could_not_check(tmp_path, monkeypatch):
    """No nvidia-smi on PATH (a CPU box, a container without the driver's tools): a warning, and the topology
    rule listed as not checked, instead of '0 errors, 9 rules checked' as if the node were fine."""
    from cli_helpers import cli_json

    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no nvidia-smi, no git
    # a cache path another test's torch import left in the environment is a finding of its own
    for name in ("HF_HOME", "TORCH_HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    code, report = cli_json(str(tmp_path / "r.duckdb"), "preflight")
    assert code == 0 and report["ok"]
    assert [f["rule"] for f in report["findings"]] == ["gpus-unprobed"]
    assert report["findings"][0]["reason"].startswith("nvidia-smi not found: ")
    assert "topology_fallback" in report["unchecked"] and "topology_fallback" not in report["checked"]
