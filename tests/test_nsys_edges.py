"""Edges of real Nsight Systems exports: GPU tables in every layout seen, one warning where two could not both be
true, NVTX ranges with damaged times, and the kernels of a capture without step markers.

Each export is a real one (../shared/realdata/nsys or tests/data/gpu) or a copy with one table rewritten the way an
older or damaged export has it; expected values come from the exports' manifests and plain SQL over the files.
"""

from __future__ import annotations

import gzip
import re
import shutil
import sqlite3
from pathlib import Path

import polars as pl
import pytest

from cli_helpers import cli, cli_json
from conftest import GPU_DATA, realdata
from receipts.ingest import nsys
from receipts.schema.categories import load_category_rules


@pytest.fixture(scope="module")
def rules():
    return load_category_rules(cwd=Path(__file__).parent)


def _copy(source: Path, tmp_path: Path) -> Path:
    out = tmp_path / source.name.removesuffix(".gz")
    if source.name.endswith(".gz"):
        with gzip.open(source) as src, out.open("wb") as dst:
            shutil.copyfileobj(src, dst)
    else:
        shutil.copyfile(source, out)
    out.chmod(0o644)
    return out


# The machines, as the exports' manifests state them (../shared/realdata/MANIFEST.md, tests/data/gpu/README):
# (export, GPU model, GPUs on the host).
MACHINES = [
    (("nsys", "perlmutter-cloverleaf-cuda.sqlite"), "NVIDIA A100-SXM4-80GB", 4),
    (("nsys", "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"), "NVIDIA A100-SXM4-40GB", 1),
    (("nsys", "mock.sqlite"), "NVIDIA GeForce RTX 3080", 1),
    ((GPU_DATA / "cudagraph" / "graphs_nsys_graph.sqlite.gz",), "NVIDIA H200", 2),
    ((GPU_DATA / "fsdp2_2gpu_nsys.sqlite.gz",), "NVIDIA H200", 2),
]


def _export(where: tuple, tmp_path: Path) -> Path:
    source = where[0] if isinstance(where[0], Path) else realdata(*where)
    return _copy(source, tmp_path)


def _older_gpu_table(path: Path) -> None:
    """TARGET_INFO_GPU as older exports write it: (vmId, deviceId, name), no id and no SM count."""
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE TARGET_INFO_GPU RENAME TO _gpu_new")
        db.execute("CREATE TABLE TARGET_INFO_GPU (vmId INTEGER NOT NULL, deviceId INTEGER NOT NULL, name TEXT NOT NULL)")
        db.execute("INSERT INTO TARGET_INFO_GPU SELECT vmId, id, name FROM _gpu_new")
        db.execute("DROP TABLE _gpu_new")
    db.close()


@pytest.mark.parametrize("where, model, on_host", MACHINES, ids=[str(m[0][-1]).rsplit("/", 1)[-1] for m in MACHINES])
@pytest.mark.parametrize("layout", ["as exported", "vmId, deviceId, name"])
def test_the_gpu_table_is_read_by_column_name_in_every_layout(rules, tmp_path, where, model, on_host, layout):
    path = _export(where, tmp_path)
    if layout != "as exported":
        _older_gpu_table(path)
    a = nsys.parse(path, rules=rules)
    assert (a.gpu_model, a.gpus_on_host, a.gpu_count) == (model, on_host, on_host)
    assert not any("TARGET_INFO_GPU" in w for w in a.warnings), a.warnings


@pytest.mark.parametrize("where, on_host", [(("nsys", "mock.sqlite"), 1),
                                            ((GPU_DATA / "cudagraph" / "graphs_nsys_graph.sqlite.gz",), 2),
                                            ((GPU_DATA / "fsdp2_2gpu_nsys.sqlite.gz",), 2)])
def test_without_the_gpu_table_the_cuda_device_table_counts_the_gpus_and_the_model_is_unknown(rules, tmp_path,
                                                                                              where, on_host):
    """TARGET_INFO_CUDA_DEVICE (gpuId, cudaId, pid[, uuid, numMultiprocessors]) names no model: the count only, and
    the model unknown (null), never a made-up name."""
    path = _export(where, tmp_path)
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE TARGET_INFO_GPU")
    db.close()
    a = nsys.parse(path, rules=rules)
    assert (a.gpu_model, a.gpus_on_host, a.gpu_count) == (None, on_host, on_host)


@pytest.mark.parametrize("name", ["perlmutter-cloverleaf-cuda.sqlite", "mock.sqlite", "con_kernel.sqlite"])
def test_an_export_without_an_nvtx_table_says_so_once(rules, name):
    """No NVTX table, so no step range either: one warning, not one for the table and one for its ranges."""
    a = nsys.parse(realdata("nsys", name), rules=rules)
    nvtx = [w for w in a.warnings if "NVTX" in w]
    assert len(nvtx) == 1 and "no NVTX table" in nvtx[0], a.warnings
    assert a.step_marker.startswith("none")


def _nvtx_ns(path: Path) -> tuple[int, int]:
    """(ranges, their total ns as nsys nvtx_sum counts them) by plain SQL, each range whose end comes before its
    start or whose start or end is 2^62 ns or more from the capture's start counted as zero length."""
    far = 1 << 62
    with sqlite3.connect(path) as db:
        last = db.execute("SELECT max(t) FROM (SELECT start AS t FROM NVTX_EVENTS UNION ALL SELECT \"end\" FROM "
                          "NVTX_EVENTS) WHERE t > ? AND t < ?", [-far, far]).fetchone()[0]
        rows = db.execute("SELECT start, \"end\" FROM NVTX_EVENTS WHERE eventType IN (59, 60, 70, 71)").fetchall()
    db.close()
    total = 0
    for start, end in rows:
        end = last if end is None else end
        if -far < start < far and -far < end < far and end >= start:
            total += end - start
    return len(rows), total


@pytest.mark.parametrize("damage", ["swapped", "negative length", "start at int64's most", "start at int64's least"])
def test_nvtx_ranges_with_damaged_times_count_zero_length_with_a_warning(rules, tmp_path, damage):
    path = _copy(realdata("nsys", "profile1.sqlite"), tmp_path)
    where = "WHERE rowid % 3 = 0 AND \"end\" IS NOT NULL AND eventType IN (59, 60)"
    with sqlite3.connect(path) as db:
        damaged = db.execute(f"SELECT count(*) FROM NVTX_EVENTS {where} AND \"end\" > start").fetchone()[0]
        db.execute({"swapped": f'UPDATE NVTX_EVENTS SET start = "end", "end" = start {where}',
                    "negative length": f'UPDATE NVTX_EVENTS SET "end" = start - 5 {where}',
                    "start at int64's most": f"UPDATE NVTX_EVENTS SET start = 9223372036854775807 {where}",
                    "start at int64's least": f"UPDATE NVTX_EVENTS SET start = -9223372036854775808 {where}"}[damage])
    db.close()
    assert damaged > 5
    a = nsys.parse(path, rules=rules)
    ranges, total_ns = _nvtx_ns(path)
    assert a.nvtx["count"].sum() == ranges
    assert a.nvtx["total_ms"].min() >= 0 and a.nvtx["total_ms"].sum() == pytest.approx(total_ns / 1e6, abs=1e-6)
    said = [w for w in a.warnings if "NVTX ranges" in w and "zero length" in w]
    assert len(said) == 1 and said[0].startswith(f"{damaged} NVTX ranges"), a.warnings


def test_nvtx_ranges_with_damaged_times_are_stored(db, tmp_path):
    """The same through `receipts ingest`: stored, exit 0, not a NOT NULL constraint of the store."""
    path = _copy(realdata("nsys", "profile1.sqlite"), tmp_path)
    with sqlite3.connect(path) as con:
        con.execute('UPDATE NVTX_EVENTS SET start = "end", "end" = start WHERE rowid % 3 = 0 AND "end" IS NOT NULL')
    con.close()
    result = cli(db, "ingest", str(path))
    assert result.exit_code == 0, result.output
    assert "zero length" in result.output


def test_the_kernels_of_a_capture_without_step_markers_are_listed(db):
    """profile1 has no `step N` range: its 12 kernels ran in its one window, and `anatomy --by kernel` lists them
    (their names and calls by plain SQL over the export)."""
    path = realdata("nsys", "profile1.sqlite")
    with sqlite3.connect(path) as con:
        expected = dict(con.execute("SELECT s.value, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL AS k "
                                    "JOIN StringIds AS s ON s.id = k.demangledName GROUP BY s.value").fetchall())
    con.close()
    assert sum(expected.values()) == 12
    result = cli(db, "ingest", str(path), "--run-name", "profile1")
    assert result.exit_code == 0, result.output
    code, report = cli_json(db, "anatomy", "profile1", "--top", "100")
    assert code == 0
    assert {k["name"]: k["calls"] for k in report["kernels"]} == expected
    shown = cli(db, "anatomy", "profile1", "--by", "kernel", "--top", "100")
    assert shown.exit_code == 0 and "no kernel names stored" not in shown.output
    assert {name.split("(")[0] for name in expected} <= set(re.findall(r"\b(test\d?)\(", shown.output))


@pytest.mark.parametrize("name", ["profile1.sqlite", "con_kernel.sqlite", "mock.sqlite", "perlmutter-cloverleaf-cuda.sqlite",
                                  "saxpy-mpi-cuda_nsys_perlmutter0.sqlite", "mfu_2gpu_before.sqlite",
                                  "mfu_2gpu_after.sqlite"])
def test_without_step_markers_every_kernel_is_summed_by_name_in_the_window(rules, name):
    """Kernel calls and time per name of a capture without `step N` ranges: every kernel of the export, as plain SQL
    over its kernel table counts them (the nsys stats cuda_gpu_kern_sum definition), in the window (step null)."""
    path = realdata("nsys", name)
    with sqlite3.connect(path) as db:
        expected = {n: (calls, ns) for n, calls, ns in db.execute(
            "SELECT s.value, count(*), sum(k.\"end\" - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL AS k "
            "JOIN StringIds AS s ON s.id = k.demangledName GROUP BY s.value")}
    db.close()
    a = nsys.parse(path, rules=rules)
    assert a.step_marker.startswith("none") and a.kernel_steps["step"].null_count() == a.kernel_steps.height > 0
    got = {r["name"]: (r["calls"], r["time_ms"]) for r in a.kernel_steps.group_by(pl.col("name").cast(pl.Utf8))
           .agg(pl.col("calls").sum(), pl.col("time_ms").sum()).iter_rows(named=True)}
    assert got.keys() == expected.keys()
    for kernel, (calls, ns) in expected.items():
        assert got[kernel][0] == calls and got[kernel][1] == pytest.approx(ns / 1e6, rel=1e-12), kernel
