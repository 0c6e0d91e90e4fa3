"""`ingest --keep-raw`: an export's raw events as Parquet named by its sha256, the path recorded, views
never needing it; beside a DuckDB store by default, in `--raw-dir` when named (required on PostgreSQL:
tests/test_postgres.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import polars as pl
import pytest

from cli_helpers import cli
from conftest import GPU_DATA

RUN_LOG = GPU_DATA / "fsdp2_1gpu_nsys" / "run.log"
EXPORT = GPU_DATA / "fsdp2_1gpu_nsys.sqlite.gz"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _raw_paths(db: str) -> list[str]:
    from receipts.store import open_store

    with open_store(db, read_only=True) as store:
        return store.sql("SELECT raw_events_path AS p FROM anatomy_sources")["p"].to_list()


def _check_parquet(path: Path) -> None:
    raw = pl.read_parquet(path)
    assert {"rank", "step", "category", "name", "start_ns", "end_ns"} <= set(raw.columns)
    assert raw.height > 1000 and (raw["end_ns"] >= raw["start_ns"]).all()


@pytest.mark.parametrize("named_dir", [False, True])
def test_keep_raw_on_duckdb_writes_parquet_by_sha256(tmp_path, named_dir):
    db = str(tmp_path / "r.duckdb")
    assert cli(db, "ingest", str(RUN_LOG)).exit_code == 0
    extra = ["--raw-dir", str(tmp_path / "shared_raw")] if named_dir else []
    result = cli(db, "ingest", str(EXPORT), "--attach", "fsdp2_1gpu_nsys", "--keep-raw", *extra)
    assert result.exit_code == 0, result.stdout + result.stderr
    folder = tmp_path / ("shared_raw" if named_dir else "r.duckdb.raw")
    expected = folder / f"{_sha256(EXPORT)}.parquet"
    assert _raw_paths(db) == [str(expected)]
    _check_parquet(expected)


@pytest.mark.parametrize("profile", ["kineto", "nsys_job"])
def test_raw_events_staged_by_worker_processes_are_the_serial_ones(tmp_path, profile):
    """With worker processes, each rank's raw events are written as Parquet by the worker that read them (only
    the per-step rows travel back) and streamed into the one file: the same rows as read in-process."""
    import shutil

    if profile == "kineto":
        folder = GPU_DATA / "straggler" / "straggler_plant_kineto" / "traces"
    else:
        folder = tmp_path / "job"
        folder.mkdir()
        for rank in (0, 1):
            shutil.copy(GPU_DATA / "multiexport" / "per_rank_gloo" / f"rank{rank}.sqlite.gz", folder)
    frames = []
    for workers in ("1", "2"):
        db = str(tmp_path / f"w{workers}.duckdb")
        result = cli(db, "ingest", str(folder), "--keep-raw", "--workers", workers)
        assert result.exit_code == 0, result.stdout + result.stderr
        [path] = _raw_paths(db)
        raw = pl.read_parquet(path)
        frames.append(raw.sort(raw.columns, nulls_last=True))
        assert [p.name for p in Path(path).parent.iterdir()] == [Path(path).name]  # no staging folder left behind
    assert frames[0].height > 1000 and sorted(frames[0]["rank"].unique().to_list()) == [0, 1]
    assert frames[0].equals(frames[1])
