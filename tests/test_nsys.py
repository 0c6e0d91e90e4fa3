"""Nsight Systems SQLite parser, on real exports from /work/shared/realdata/nsys (read in place).

Expected numbers come from outside the parser: NVIDIA's own `nsys stats` CSV of the same run,
or plain SQL over the export written here (the definitions nvtx_sum / cuda_gpu_trace use).
"""

from __future__ import annotations

import csv
import os
import shutil
import sqlite3
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest

from receipts.errors import InputError
from receipts.ingest import nsys, nsys_export, nsys_ranks
from receipts.schema.categories import load_category_rules

REAL = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "nsys"
pytestmark = pytest.mark.skipif(not REAL.is_dir(), reason="shared real nsys exports not present")


@pytest.fixture(scope="module")
def rules():
    return load_category_rules(cwd=Path(__file__).parent)


def _parse(name_or_path, rules, **kw):
    path = name_or_path if isinstance(name_or_path, Path) else REAL / name_or_path
    return nsys.parse(path, rules=rules, **kw)


def _copy(name: str, tmp_path: Path) -> Path:
    out = tmp_path / name
    shutil.copyfile(REAL / name, out)
    out.chmod(0o644)
    return out


# --- golden: NVIDIA's own numbers ----------------------------------------------------------------

def test_cloverleaf_kernel_totals_equal_nsys_gpu_trace(rules):
    expected: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # name -> [count, total ns]
    with open(REAL / "cloverleaf_gpu_trace.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row["Event Type"] == "Enter":
                key = row["Name"] if row["type"] == "kernel" else row["type"]
                expected[key][0] += 1
                expected[key][1] += int(row["_matching_timestamp"]) - int(row["Timestamp (ns)"])
    a = _parse("perlmutter-cloverleaf-cuda.sqlite", rules, keep_raw=True)
    raw = a.raw_events.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("ns"))
    got = {r["short_name"]: [r["n"], r["ns"]] for r in raw.filter(pl.col("short_name").is_not_null())
           .group_by("short_name").agg(pl.len().alias("n"), pl.col("ns").sum()).iter_rows(named=True)}
    got |= {f"CUDA_MEMCPY_KIND_{k}": v for k, v in
            {r["category"].split("_")[1].upper().replace("2", "TO"): [r["n"], r["ns"]]
             for r in raw.filter(pl.col("category").str.starts_with("memcpy"))
             .group_by("category").agg(pl.len().alias("n"), pl.col("ns").sum()).iter_rows(named=True)}.items()}
    assert got == dict(expected)
    # One stream, serial kernels: the category union equals the plain sum there.
    other_ms = a.rows.filter(pl.col("category") == "other")["time_ms"].item()
    assert other_ms == pytest.approx(sum(v[1] for k, v in expected.items() if "MEMCPY" not in k) / 1e6)
    assert a.schema_version == "3.13.2" and a.gpu_model == "NVIDIA A100-SXM4-80GB"
    assert a.steps["rank"].to_list() == [0] and "SLURM_PROCID" in a.attribution
    assert a.claim.hostname == "nid008553"


# --- multi-GPU, NCCL, NVTX -------------------------------------------------------------------------

def test_mfu_two_gpus_nccl_and_nvtx_totals(rules):
    a = _parse("mfu_2gpu_after.sqlite", rules)
    assert a.schema_version == "3.25.0" and a.gpu_count == 2 and a.world_size == 2
    assert sorted(a.steps["rank"].to_list()) == [0, 1]
    nccl = a.rows.filter(pl.col("category") == "nccl_send_recv")
    assert nccl.height == 2 and (nccl["time_ms"] > 0).all()
    exposed = a.rows.filter(pl.col("category") == "exposed_comm").sort("rank")["time_ms"].to_list()
    assert all(0 <= e <= n + 1e-9 for e, n in zip(exposed, nccl.sort("rank")["time_ms"].to_list()))
    # nvtx_sum definition over all threads and both processes; numbers from plain SQL on the file.
    nvtx = a.nvtx.group_by("range_name").agg(pl.col("count").sum(), pl.col("total_ms").sum())
    row = nvtx.filter(pl.col("range_name") == "ncclRecv").row(0, named=True)
    assert (row["count"], row["total_ms"]) == (120, pytest.approx(71146 / 1e6))
    row = nvtx.filter(pl.col("range_name") == "ncclGroupEnd").row(0, named=True)
    assert (row["count"], row["total_ms"]) == (60, pytest.approx(2180821 / 1e6))
    with sqlite3.connect(REAL / "mfu_2gpu_after.sqlite") as db:
        n_ranges, total_ns = db.execute("SELECT count(*), sum(end - start) FROM NVTX_EVENTS "
                                        "WHERE eventType IN (59, 60)").fetchone()
    assert a.nvtx["count"].sum() == n_ranges
    assert a.nvtx["total_ms"].sum() == pytest.approx(total_ns / 1e6)


def test_no_step_ranges_is_said_not_silent(rules):
    a = _parse("mfu_2gpu_before.sqlite", rules)
    assert a.steps["step"].null_count() == a.steps.height == 2
    assert a.step_marker.startswith("none")
    assert any("no NVTX ranges matching" in w and "NVTX_EVENTS" in w for w in a.warnings)
    assert a.unattributed == 0 and a.raw_events is None


def test_env_evidence_is_redacted(rules):
    a = _parse("mfu_2gpu_after.sqlite", rules)
    env = {e.name: e for e in a.env}
    for secret in ("HF_API_KEY", "WANDB_API_KEY", "MODAL_TASK_SECRET"):
        assert env[secret].value == "<redacted>" and env[secret].redacted
    assert env["TRAIN_NUM_GPUS"].value == "2"
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"].is_set is False  # watched knob, unset: a fact
    assert "dummy" not in {e.value for e in a.env}


def test_environment_value_with_semicolons():
    env = nsys_ranks.parse_environment("A=1;LD_PRELOAD=x;y;NCCL_IB_AUTH_TOKEN=s3cr3t-value")
    assert env == {"A": "1", "LD_PRELOAD": "x;y", "NCCL_IB_AUTH_TOKEN": "s3cr3t-value"}
    assert {e.name: e.value for e in nsys_ranks.env_evidence(env)}["NCCL_IB_AUTH_TOKEN"] == "<redacted>"


# --- steps: attribution through runtime correlation, any thread of the process --------------------

def _add_step_ranges(path: Path) -> tuple[dict[tuple[int, int], int], dict[tuple[int, int], int]]:
    """Two `step N` ranges per process, opened on a thread that launched NOTHING (push/pop on one
    process, start/end on the other). Returns the expected activity count per (pid, step), by SQL."""
    expected, activities = {}, {}
    with sqlite3.connect(path) as db:
        procs = db.execute("SELECT DISTINCT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY 1").fetchall()
        acts = " UNION ALL ".join(f"SELECT globalPid, correlationId FROM {t}" for t in
                                  ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"))
        for i, (gpid,) in enumerate(procs):
            launches = [s for (s,) in db.execute(
                f"SELECT r.start FROM ({acts}) a JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = a.correlationId "
                "AND r.globalTid - (r.globalTid % 16777216) = a.globalPid WHERE a.globalPid = ? ORDER BY 1", [gpid])]
            kernel_launches = [s for (s,) in db.execute(
                "SELECT r.start FROM CUPTI_ACTIVITY_KIND_KERNEL a JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON "
                "r.correlationId = a.correlationId AND r.globalTid - (r.globalTid % 16777216) = a.globalPid "
                "WHERE a.globalPid = ?", [gpid])]
            bounds = [launches[0], launches[len(launches) // 2], launches[-1] + 1]
            for step, (lo, hi) in enumerate(zip(bounds, bounds[1:]), start=1):
                db.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES (?, ?, ?, ?, ?)",
                           [lo, hi, 59 if i == 0 else 60, f"step {step}", gpid + 4242])
                # `kernels` counts kernels only, not the memcpy / memset launches that also fall in the step
                expected[(gpid, step)] = sum(lo <= s < hi for s in kernel_launches)
                activities[(gpid, step)] = sum(lo <= s < hi for s in launches)
    return expected, activities


def test_steps_attributed_from_any_thread(rules, tmp_path):
    path = _copy("mfu_2gpu_after.sqlite", tmp_path)
    expected, activities = _add_step_ranges(path)
    a = _parse(path, rules, keep_raw=True)
    steps = a.steps.sort("rank", "step")
    assert steps["step"].to_list() == [1, 2, 1, 2]
    assert steps["kernels"].to_list() == [expected[k] for k in sorted(expected)]
    assert steps["warmup"].to_list() == [True, False, True, False]
    total = a.raw_events.height
    assert a.unattributed == total - sum(activities.values()) > 0  # activities with no runtime call
    assert (steps["gpu_ms"] <= steps["wall_ms"] + 50).all() and (steps["wall_ms"] > 0).all()
    assert "ANY thread" in a.attribution and "step" in a.step_marker
    assert set(a.rows["warmup"].to_list()) == {True, False}
    assert a.nvtx.filter(pl.col("range_name") == "step 1")["count"].sum() == 2


def test_custom_step_pattern_and_bad_pattern(rules, tmp_path):
    path = _copy("saxpy-mpi-cuda_nsys_perlmutter0.sqlite", tmp_path)
    a = _parse(path, rules, step_pattern=r"^MPI_(Send)$")  # group not a number: no steps
    assert a.step_marker.startswith("none")
    with pytest.raises(InputError, match="capture group"):
        _parse(path, rules, step_pattern=r"^step$")


# --- concurrency, MPI, tiny and old exports ---------------------------------------------------

@pytest.mark.parametrize("name", ["con_kernel.sqlite", "profile1.sqlite"])
def test_concurrent_kernels_union_below_sum(rules, name):
    a = _parse(name, rules, keep_raw=True)
    kernels = a.raw_events.filter(pl.col("short_name").is_not_null())
    busy_sum_ms = (kernels["end_ns"] - kernels["start_ns"]).sum() / 1e6
    union_ms = a.rows.filter(pl.col("category") == "other")["time_ms"].item()
    assert kernels["stream"].n_unique() > 1
    assert union_ms < busy_sum_ms
    assert a.schema_version == "2.9.1"  # EXPORT_META_DATA, the nsys 2022.1 table name


def test_saxpy_mpi_rank_and_domains(rules):
    a = _parse("saxpy-mpi-cuda_nsys_perlmutter0.sqlite", rules)
    assert "MPI Rank" in a.attribution and a.steps["rank"].to_list() == [0]
    assert a.world_size is None  # one rank's file of an MPI job: the world is not guessed
    names = dict(zip(a.nvtx["range_name"], a.nvtx["count"]))
    assert names["MPI:MPI_Send"] == 10 and names["saxpy"] == 5


def test_mock_tiny_new_export(rules):
    a = _parse("mock.sqlite", rules)
    assert a.schema_version == "3.24.14" and a.gpu_model == "NVIDIA GeForce RTX 3080" and a.gpu_count == 1
    assert any("CUPTI_ACTIVITY_KIND_MEMSET absent" in w for w in a.warnings)
    assert any("no NVTX table" in w for w in a.warnings)
    assert a.steps["kernels"].item() == 2  # its 2 kernel rows; the memcpy is not a kernel


def test_nvtx_table_v2_is_found(rules, tmp_path):
    path = _copy("saxpy-mpi-cuda_nsys_perlmutter0.sqlite", tmp_path)
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE NVTX_EVENTS RENAME TO NVTX_EVENTS_V2")
    a = _parse(path, rules)
    assert a.nvtx["count"].sum() == 22 and "NVTX_EVENTS_V2" in " ".join(a.warnings)


# --- classification on real kernel names -----------------------------------------------------

@pytest.mark.parametrize("name, category", [
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)", "nccl_send_recv"),  # mfu exports
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "nccl_all_reduce"),  # kineto realdata
    ("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN", "gemm"),  # cuBLAS on H100 (mfu exports)
    ("ampere_sgemm_128x64_nn", "gemm"),
    ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<(int)128, (int)128, (int)64, (int)4, (bool)0, "
     "(bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)128>>>", "attention"),  # cutlass inside: still attention
    ("triton_poi_fused__unsafe_view_mul_silu_2", "other"),
    ("triton_red_fused_add_mean_mul_pow_rsqrt_0", "other"),
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<float>>", "other"),
])
def test_classification_of_real_kernel_names(rules, name, category):
    assert rules.classify(name) == category


def test_mfu_categories_from_demangled_names(rules):
    a = _parse("mfu_2gpu_after.sqlite", rules)
    cats = set(a.rows["category"].to_list())
    assert {"gemm", "attention", "nccl_send_recv", "memcpy_d2d", "memcpy_h2d", "memset", "other"} <= cats


# --- broken input -----------------------------------------------------------------------------

def test_truncated_sqlite(rules, tmp_path):
    path = _copy("mfu_2gpu_after.sqlite", tmp_path)
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)
    with pytest.raises(InputError, match="cut short"):
        _parse(path, rules)


def test_sqlite_but_not_nsys(rules, tmp_path):
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE songs (title TEXT)")
    with pytest.raises(InputError, match="not an Nsight Systems export"):
        _parse(path, rules)


def test_not_sqlite(rules, tmp_path):
    path = tmp_path / "x.sqlite"
    path.write_text("step 1 loss 3.0\n")
    with pytest.raises(InputError, match="not a SQLite file"):
        _parse(path, rules)


def test_missing_kernel_table_and_column(rules, tmp_path):
    path = _copy("mock.sqlite", tmp_path)
    with sqlite3.connect(path) as db:
        # mock.sqlite carries a third-party index on the column (nsys-ai): drop indexes first.
        for (index,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'index' "
                                   "AND tbl_name = 'CUPTI_ACTIVITY_KIND_KERNEL' AND sql IS NOT NULL").fetchall():
            db.execute(f'DROP INDEX "{index}"')
        db.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN correlationId")
    with pytest.raises(InputError, match="correlationId") as err:
        _parse(path, rules)
    assert err.value.table == "CUPTI_ACTIVITY_KIND_KERNEL"
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    with pytest.raises(InputError, match="required table CUPTI_ACTIVITY_KIND_KERNEL") as err:
        _parse(path, rules)
    assert err.value.table == "CUPTI_ACTIVITY_KIND_KERNEL"


def test_an_activity_ending_before_it_starts_counts_zero_and_a_time_far_out_is_named(rules, tmp_path):
    """profile1 (one window, no steps) with a third of its kernels ending at 1 ns, before they start: the same
    anatomy as those kernels made zero length in the file, with a warning (such an interval once subtracted from
    the busy union: negative times); with one copy ending at int64's largest value: one error naming the table,
    where sums of such overflowed."""
    exports = {}
    for name, end in (("early", "1"), ("zero", "start")):
        (tmp_path / name).mkdir()
        exports[name] = _copy("profile1.sqlite", tmp_path / name)
        with sqlite3.connect(exports[name]) as db:
            moved = db.execute(f'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = {end} WHERE rowid % 3 = 0').rowcount
    early, zero = (_parse(exports[name], rules) for name in ("early", "zero"))
    assert any(w.startswith(f"{moved} GPU activities end before they start") for w in early.warnings)
    assert not any("end before they start" in w for w in zero.warnings)
    assert early.rows.equals(zero.rows) and early.steps.equals(zero.steps)
    assert (early.rows["time_ms"] >= 0).all()
    (tmp_path / "far").mkdir()
    far = _copy("profile1.sqlite", tmp_path / "far")
    with sqlite3.connect(far) as db:
        db.execute('UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET "end" = 9223372036854775807 WHERE rowid = 2')
    with pytest.raises(InputError, match="ns or more from the capture's start") as err:
        _parse(far, rules)
    assert err.value.table == "CUPTI_ACTIVITY_KIND_MEMCPY"


def test_export_report_without_nsys_names_the_command(tmp_path, monkeypatch):
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"\x00" * 16)
    monkeypatch.setattr(nsys_export.shutil, "which", lambda _: None)
    with pytest.raises(InputError, match=r"nsys export --type sqlite"):
        nsys_export.export_report(rep)


def _fake_nsys(tmp_path: Path, monkeypatch, export: Path) -> None:
    """An `nsys` on PATH whose `export ... --output OUT REPORT` writes a copy of a real export to OUT."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nsys"
    script.write_text(f"#!/bin/sh\nwhile [ $# -gt 2 ]; do [ \"$1\" = --output ] && out=$2; shift; done\n"
                      f"cp '{export}' \"$out\"\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_a_report_in_a_read_only_folder_is_exported_to_scratch_and_the_copy_removed(tmp_path, monkeypatch):
    from receipts.ingest.nsys_job import read_export

    _fake_nsys(tmp_path, monkeypatch, REAL / "mfu_2gpu_after.sqlite")
    rep = tmp_path / "reports" / "run.nsys-rep"
    rep.parent.mkdir()
    rep.write_bytes(b"\x00" * 16)
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(temp))
    monkeypatch.setattr(nsys_export, "_writable", lambda folder: False)  # as a read-only folder (root writes anywhere)
    part = read_export(rep, rules=load_category_rules())
    assert part.path == rep and part.anatomy.rows.height > 0
    assert not (rep.parent / "run.sqlite").exists() and list(temp.iterdir()) == []  # nothing left behind
    monkeypatch.undo()  # a writable folder: the export is kept beside the report, for the next ingest
    (tmp_path / "again").mkdir()
    _fake_nsys(tmp_path / "again", monkeypatch, REAL / "mfu_2gpu_after.sqlite")
    read_export(rep, rules=load_category_rules())
    assert (rep.parent / "run.sqlite").is_file()


# --- genuine FSDP2 exports from the GPU machine, against NVIDIA's own `nsys stats` CSVs -------------

GPU_DATA = Path(__file__).resolve().parent / "data" / "gpu"


def _stats(run: str, report: str) -> list[dict]:
    with open(GPU_DATA / "stats" / f"{run}_{report}.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("run", ["fsdp2_1gpu_nsys", "fsdp2_2gpu_nsys"])
def test_fsdp2_kernel_and_nvtx_totals_equal_nsys_stats(rules, run, tmp_path):
    import gzip
    src = GPU_DATA / f"{run}.sqlite.gz"
    if not src.is_file() or not (GPU_DATA / "stats" / f"{run}_nvtx_sum.csv").is_file():
        pytest.skip(f"{src.name} or its stats not present")
    path = tmp_path / f"{run}.sqlite"
    path.write_bytes(gzip.decompress(src.read_bytes()))
    a = _parse(path, rules, keep_raw=True)
    kernels = a.raw_events.filter(pl.col("short_name").is_not_null())
    got = {r["name"]: (r["n"], r["ns"]) for r in kernels.group_by("name").agg(
        pl.len().alias("n"), (pl.col("end_ns") - pl.col("start_ns")).sum().alias("ns")).iter_rows(named=True)}
    want = {r["Name"]: (int(r["Instances"]), int(r["Total Time (ns)"])) for r in _stats(run, "cuda_gpu_kern_sum")}
    assert got == want
    # nvtx_sum (nsys 2025.3) names default-domain ranges ':text'; the receipt keeps the text alone.
    nvtx = a.nvtx.group_by("range_name").agg(pl.col("count").sum(), pl.col("total_ms").sum())
    got = {r["range_name"]: (r["count"], round(r["total_ms"] * 1e6)) for r in nvtx.iter_rows(named=True)}
    want = {r["Range"].removeprefix(":"): (int(r["Instances"]), int(r["Total Time (ns)"]))
            for r in _stats(run, "nvtx_sum")}
    assert got == want
    steps = a.steps.filter(pl.col("step").is_not_null())
    assert steps.height == 20 * steps["rank"].n_unique() and a.step_marker.startswith("NVTX ranges")
    assert steps.filter(pl.col("warmup"))["step"].unique().to_list() == [0]
    assert (steps["kernels"] > 0).all()


def test_duplicate_runtime_rows_count_each_activity_once(rules):
    """Older exports write two runtime rows per correlation id (cudaLaunchKernel and cudaLaunchKernel_v7000):
    each activity is still attributed once (counted per runtime row, this export's 6 activities read as 12)."""
    path = REAL / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as db:
        calls, ids = db.execute("SELECT count(*), count(DISTINCT correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
        kernels = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    assert calls > ids  # the duplicated ids are there
    a = _parse("saxpy-mpi-cuda_nsys_perlmutter0.sqlite", rules, keep_raw=True)
    assert a.steps["kernels"].sum() == kernels
    assert a.raw_events.filter(~pl.col("category").str.starts_with("mem")).height == kernels
