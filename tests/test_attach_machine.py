"""A receipt's machine is merged from every file behind it: its log, then each attachment (nsys export, Kineto
traces, topology, collect_env) for what the log does not say, each fact with the file it came from. A file that
contradicts the receipt or an earlier attachment (GPU model or count, host, topology size, world size) is refused
naming both sides unless forced (recorded); a profile whose steps are not the log's is refused too. The profiler a
run ran under (nsys, Kineto, none) is runtime drift. All on real files: the 2xH200 run of tests/data/gpu, H100
collect_env output from ../shared/realdata."""

from __future__ import annotations

import json
import shutil

import polars as pl
import pytest

from cli_helpers import cli, cli_json
from conftest import GPU_DATA, realdata
from test_postgres import pg_server, pg_url  # noqa: F401 - fixtures

EXPORT_2GPU = GPU_DATA / "fsdp2_2gpu_nsys.sqlite.gz"
H100_ENV = realdata("sysinfo", "vllm_issue11959_collect_env_8xH100_excerpt.txt")


@pytest.fixture
def headerless(tmp_path):
    """The 2xH200 nsys run's log without its RECEIPT headers (the launcher's and each rank's): its steps,
    phases and footers say nothing of the machine, as a log written without `receipts run` would not."""
    lines = (GPU_DATA / "fsdp2_2gpu_nsys" / "run.log").read_text().splitlines(keepends=True)
    path = tmp_path / "train.log"
    path.write_text("".join(line for line in lines if '"kind":"header"' not in line))
    return path


def _machine(db: str, run: str) -> tuple[dict, dict]:
    code, shown = cli_json(db, "show", run)
    assert code == 0
    return shown["machine"] | {"hostname": shown["identity"]["hostname"]}, shown["provenance"].get("machine", {})


def _sources(db: str, run: str) -> int:
    return len(cli_json(db, "show", run)[1]["sources"])


def test_an_attached_export_gives_a_log_that_knows_no_machine_its_machine(db, headerless):
    assert cli(db, "ingest", str(headerless)).exit_code == 0
    assert _machine(db, "train")[0] == {"machine_class": None, "gpu_model": None, "gpu_count": None,
                                        "world_size": None, "ranks_traced": None, "gpus_on_host": None,
                                        "hostname": None}
    for path in (EXPORT_2GPU, GPU_DATA / "sysinfo" / "collect_env.txt", GPU_DATA / "sysinfo" / "nvidia-smi_topo_m.txt"):
        done = cli(db, "ingest", str(path), "--attach", "train")
        assert done.exit_code == 0, done.stderr
    machine, origins = _machine(db, "train")
    # TARGET_INFO_GPU lists two NVIDIA H200; the export's environment names the ranks (RANK 0 and 1) and host `vm`
    assert machine == {"machine_class": "H200:2", "gpu_model": "NVIDIA H200", "gpu_count": 2, "world_size": 2,
                       "ranks_traced": 2, "gpus_on_host": 2, "hostname": "vm"}
    assert set(origins.values()) == {"nsys export fsdp2_2gpu_nsys.sqlite.gz"}  # the first file to state them
    shown = cli(db, "show", "train").stdout
    assert "machine: H200:2  world size 2  GPUs on host 2  ranks traced 2  host vm" in shown
    assert "from nsys export fsdp2_2gpu_nsys.sqlite.gz" in " ".join(shown.split())  # prose wraps at 80 columns


def test_a_file_contradicting_an_earlier_attachment_is_refused_naming_both_sides(db, headerless, tmp_path):
    assert cli(db, "ingest", str(headerless)).exit_code == 0
    assert cli(db, "ingest", str(EXPORT_2GPU), "--attach", "train").exit_code == 0
    before = _sources(db, "train")
    refused = cli(db, "ingest", str(H100_ENV), "--attach", "train")
    assert refused.exit_code == 2
    assert ("GPU model 'NVIDIA H100 80GB HBM3' in the file vs 'NVIDIA H200' on the receipt (from nsys export "
            "fsdp2_2gpu_nsys.sqlite.gz)") in refused.stderr
    assert "--force" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    # a 1-GPU topology: the machine's own `nvidia-smi topo -m` cut to its GPU0 row and column
    topo = (GPU_DATA / "sysinfo" / "nvidia-smi_topo_m.txt").read_text().splitlines()
    one_gpu = tmp_path / "topo_1gpu.txt"
    one_gpu.write_text("\n".join(line.replace("\tGPU1", "", 1) if "GPU0" in line and "GPU1" in line else line
                                 for line in topo if not line.lstrip().startswith("GPU1")) + "\n")
    refused = cli(db, "ingest", str(one_gpu), "--attach", "train")
    assert refused.exit_code == 2, refused.stdout
    assert "GPU count 1 in the file vs 2 on the receipt (from nsys export fsdp2_2gpu_nsys.sqlite.gz)" in refused.stderr
    # a 1-rank export of another run on the same machine: its world size is not the receipt's
    refused = cli(db, "ingest", str(GPU_DATA / "fsdp2_1gpu_nsys.sqlite.gz"), "--attach", "train")
    assert refused.exit_code == 2 and "world size 1 in the file vs 2 on the receipt" in refused.stderr
    assert _sources(db, "train") == before  # nothing of a refused file is stored
    forced = cli(db, "ingest", str(H100_ENV), "--attach", "train", "--force")
    assert forced.exit_code == 0 and "attached with --force despite: GPU model" in forced.stderr
    assert _machine(db, "train")[0]["gpu_model"] == "NVIDIA H200"  # a forced file's facts are kept, not merged


def test_the_first_file_to_state_the_machine_is_the_side_a_later_one_is_held_to(db, headerless):
    assert cli(db, "ingest", str(headerless)).exit_code == 0
    assert cli(db, "ingest", str(H100_ENV), "--attach", "train").exit_code == 0
    refused = cli(db, "ingest", str(EXPORT_2GPU), "--attach", "train")
    assert refused.exit_code == 2
    assert (f"GPU model 'NVIDIA H200' in the file vs 'NVIDIA H100 80GB HBM3' on the receipt (from collect_env "
            f"{H100_ENV.name})") in refused.stderr


def test_a_profile_whose_steps_are_not_the_logs_is_refused(db):
    """The CUDA-graph loop's export (1 rank, H200, host vm, steps 0..29) against the 1-GPU FSDP2 run's log (the
    same machine, steps 0..19): the machine agrees, the steps do not."""
    assert cli(db, "ingest", str(GPU_DATA / "fsdp2_1gpu_nsys" / "run.log")).exit_code == 0
    other = GPU_DATA / "cudagraph" / "graphs_nsys_graph.sqlite.gz"
    refused = cli(db, "ingest", str(other), "--attach", "fsdp2_1gpu_nsys")
    assert refused.exit_code == 2
    assert "10 of the profile's steps (20..29) lie outside the log's steps 0..19" in refused.stderr
    own = cli(db, "ingest", str(GPU_DATA / "fsdp2_1gpu_nsys.sqlite.gz"), "--attach", "fsdp2_1gpu_nsys")
    assert own.exit_code == 0, own.stderr  # the run's own export: its steps and step times are the log's


def test_step_times_far_from_the_logs_are_a_mismatch():
    """The CUDA-graph loop's steps 0..19 (NVTX wall ~10 ms) against the FSDP2 toy's log (~22 ms a step on the
    same GPU) read 0.17x: another workload; the FSDP2 run's own export reads 1.00x of its log."""
    from receipts.analysis.at_ingest import profile_step_times, steps_mismatch
    from receipts.pipeline import parse_log, parse_profile
    from receipts.schema.categories import load_category_rules

    steps = parse_log(GPU_DATA / "fsdp2_1gpu_nsys" / "run.log").steps
    frame = steps.collect() if hasattr(steps, "collect") else steps
    log = {int(s): float(ms) for s, ms in frame.group_by("step").agg(pl.col("step_ms").max()).iter_rows()}
    rules = load_category_rules()
    graphs = profile_step_times(parse_profile(GPU_DATA / "cudagraph" / "graphs_nsys_graph.sqlite.gz", "nsys-gz",
                                              rules, False))
    inside = {s: ms for s, ms in graphs.items() if s <= 19}
    why = steps_mismatch(inside, log, 0, 19)
    assert why is not None and why.startswith("its step times are 0.17x the log's (median over the 20 steps")
    own = profile_step_times(parse_profile(GPU_DATA / "fsdp2_1gpu_nsys.sqlite.gz", "nsys-gz", rules, False))
    assert steps_mismatch(own, log, 0, 19) is None


def test_the_profiler_a_run_ran_under_is_runtime_drift(tmp_path, db):
    """The same FSDP2 job on the same machine, once under `nsys profile` and once under the PyTorch profiler
    (its traces in the run directory): the comparison says the profiler differs."""
    run_dir = tmp_path / "fsdp2_2gpu_kineto"
    run_dir.mkdir()
    (run_dir / "run.log").write_bytes((GPU_DATA / "fsdp2_2gpu_kineto" / "run.log").read_bytes())
    shutil.copytree(GPU_DATA / "fsdp2_2gpu_kineto" / "traces", run_dir / "traces")
    assert cli(db, "ingest", str(GPU_DATA / "fsdp2_2gpu_nsys" / "run.log")).exit_code == 0
    assert cli(db, "ingest", str(run_dir)).exit_code == 0
    code, out = cli_json(db, "compare", "fsdp2_2gpu_nsys", "fsdp2_2gpu_kineto")
    runtime = {d["field"]: (d["a"], d["b"]) for d in out["drift"]["runtime"]}
    assert runtime["software.profiler"] == ("nsys", "kineto")
    assert runtime["software.profiler_mode"] == ("cpuctxsw=none sample=none trace=cuda,nvtx", "<absent>")
    assert "profiler" in cli(db, "compare", "fsdp2_2gpu_nsys", "fsdp2_2gpu_kineto").stdout


@pytest.mark.postgres
def test_an_attachment_fills_the_machine_on_postgres_too(pg_url, headerless):
    from test_postgres import _cli

    _cli("--db", pg_url, "ingest", str(headerless))
    _cli("--db", pg_url, "ingest", str(EXPORT_2GPU), "--attach", "train")
    shown = json.loads(_cli("--db", pg_url, "show", "train", "--json").stdout)
    assert shown["machine"]["machine_class"] == "H200:2" and shown["identity"]["hostname"] == "vm"
    assert shown["provenance"]["machine"]["world_size"] == "nsys export fsdp2_2gpu_nsys.sqlite.gz"
    refused = _cli("--db", pg_url, "ingest", str(H100_ENV), "--attach", "train", check=False)
    assert refused.returncode == 2 and "(from nsys export fsdp2_2gpu_nsys.sqlite.gz)" in refused.stderr
