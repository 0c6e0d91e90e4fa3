"""Machine-fact files attach to a receipt through `receipts ingest --attach` and show up in drift."""

from __future__ import annotations

from cli_helpers import cli, cli_json
from conftest import GPU_DATA, realdata


def test_topology_collect_env_and_nccl_tests_attach_to_a_run(db):
    run = GPU_DATA / "fsdp2_2gpu_nsys" / "run.log"
    assert cli(db, "ingest", str(run)).exit_code == 0
    topo = GPU_DATA / "sysinfo" / "nvidia-smi_topo_m.txt"          # the 2xH200 machine's own output
    nccl = realdata("sysinfo", "a3mega_2x8xH100_all_reduce_perf.md")  # 16 ranks over 2 A3-Mega nodes
    env = realdata("sysinfo", "vllm_issue6408_collect_env_8xH100_excerpt.txt")
    # The collect_env is another machine's (8xH100): refused, naming both models, then forced and recorded.
    refused = cli(db, "ingest", str(env), "--attach", "fsdp2_2gpu_nsys")
    assert refused.exit_code == 2 and "'NVIDIA H100 80GB HBM3' in the file vs 'NVIDIA H200'" in refused.stderr
    for path, extra in ((topo, ()), (nccl, ()), (env, ("--force",))):
        result = cli(db, "ingest", str(path), "--attach", "fsdp2_2gpu_nsys", *extra)
        assert result.exit_code == 0 and "facts attached to" in result.stdout, result.stdout + result.stderr
    again = cli(db, "ingest", str(nccl), "--attach", "fsdp2_2gpu_nsys")
    assert "unchanged" in again.stdout
    code, shown = cli_json(db, "show", "fsdp2_2gpu_nsys")
    assert shown["topology"]["matrix"]["GPU0"]["GPU1"] == "NV18"
    assert shown["topology"]["nccl_tests"]["avg_busbw_gbps"] == 70.742  # the file's "Avg bus bandwidth" line
    assert shown["software"]["torch"] == "2.3.0+cu121"                   # "PyTorch version: 2.3.0+cu121"
    assert len(shown["sources"]) == 4
    assert [s["forced"] for s in shown["sources"]].count(None) == 3
    assert "GPU model 'NVIDIA H100 80GB HBM3'" in next(s["forced"] for s in shown["sources"] if s["forced"])


def test_machine_facts_without_a_run_are_refused_and_change_nothing(db):
    assert cli(db, "ingest", str(GPU_DATA / "fsdp2_2gpu_nsys" / "run.log")).exit_code == 0
    before = cli_json(db, "show", "fsdp2_2gpu_nsys")[1]
    result = cli(db, "ingest", str(GPU_DATA / "sysinfo" / "nvidia-smi_topo_m.txt"))
    assert result.exit_code == 2 and "give --attach RUN" in result.stderr
    assert cli_json(db, "show", "fsdp2_2gpu_nsys")[1] == before
