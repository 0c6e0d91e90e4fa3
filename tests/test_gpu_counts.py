"""Three GPU counts kept apart: world_size (ranks in the job), ranks_traced (ranks a profile holds),
gpus_on_host (CUDA devices the host listed). machine_class uses gpu_count = gpus_on_host when known, so a
rank-0 trace of a 16-rank job on 8-GPU hosts is 'A100-SXM4-80GB:8', not ':1'. The model is the model of the
devices that ran kernels (a Windows export also lists display adapters). References: sqlite3 / json here."""

from __future__ import annotations

import gzip
import json
import sqlite3

import pytest

from receipts.pipeline import parse_profile
from receipts.schema.categories import load_category_rules
from tests.cli_helpers import cli_json
from tests.conftest import realdata


@pytest.fixture(scope="module")
def rules():
    return load_category_rules()


def test_windows_export_takes_the_gpu_that_ran_kernels(rules):
    path = realdata("nsys", "con_kernel.sqlite")
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as con:
        listed = [n for (n,) in con.execute("SELECT name FROM TARGET_INFO_GPU")]
        ran = {d for (d,) in con.execute("SELECT DISTINCT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL")}
        ran_name = con.execute("SELECT name FROM TARGET_INFO_GPU WHERE id = ?", [ran.pop()]).fetchone()[0]
    assert "Microsoft Basic Render Driver" in listed and len(listed) == 3
    anatomy = parse_profile(path, "nsys", rules, False)
    assert anatomy.gpu_model == ran_name == "GeForce GTX 1060 with Max-Q Design"
    assert anatomy.gpus_on_host == 1 and anatomy.ranks_traced == 1


def test_a_single_rank_on_a_four_gpu_host(rules):
    anatomy = parse_profile(realdata("nsys", "perlmutter-cloverleaf-cuda.sqlite"), "nsys", rules, False)
    assert (anatomy.gpu_model, anatomy.gpus_on_host, anatomy.ranks_traced, anatomy.gpu_count) == \
        ("NVIDIA A100-SXM4-80GB", 4, 1, 4)


def test_rank0_trace_of_a_16_rank_job(rules, db):
    path = realdata("kineto", "negative_queue_length_values_check__rank0.json.gz")
    meta = json.loads(gzip.decompress(path.read_bytes()))
    assert meta["distributedInfo"]["world_size"] == 16
    anatomy = parse_profile(path, "kineto", rules, False)
    assert (anatomy.world_size, anatomy.ranks_traced, anatomy.gpus_on_host) == (16, 1, len(meta["deviceProperties"]))
    code, out = cli_json(db, "ingest", str(path), "--run-name", "rank0of16")
    assert code == 0, out
    code, shown = cli_json(db, "show", "rank0of16")
    m = shown["machine"]
    assert (m["world_size"], m["ranks_traced"], m["gpus_on_host"]) == (16, 1, 8)
    assert m["machine_class"].endswith(":8")
