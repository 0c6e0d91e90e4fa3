"""One job profiled one nsys report per rank: its exports read as one anatomy, as one report of every rank would,
on real exports of a 2-rank job (tests/data/gpu/multiexport: each rank under its own `nsys profile`, RANK in each
export's captured environment, the sessions started 8.8 ms apart)."""

from __future__ import annotations

import dataclasses
import gzip
import re
import shutil
import sqlite3
from pathlib import Path

import polars as pl
import pytest

from receipts.errors import InputError
from receipts.ingest import nsys, nsys_job
from receipts.pipeline import execution
from receipts.pipeline.execution import MapStats, RankMap
from receipts.schema.categories import load_category_rules
from tests.cli_helpers import cli, cli_json
from tests.test_ranks_parallel import assert_same_anatomy

RULES = load_category_rules()
RUN_DIR = Path(__file__).parent / "data" / "gpu" / "multiexport" / "per_rank_gloo"
EXPORTS = [RUN_DIR / "rank0.sqlite.gz", RUN_DIR / "rank1.sqlite.gz"]


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> list[Path]:
    """The two exports unzipped (nsys.parse reads a SQLite file)."""
    folder = tmp_path_factory.mktemp("job")
    out = []
    for gz in EXPORTS:
        path = folder / gz.name.removesuffix(".gz")
        with gzip.open(gz, "rb") as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
        out.append(path)
    return out


def _session_start(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]


def test_each_rank_of_the_job_is_its_own_export_read_alone(plain):
    job = execution.parse_nsys_job(plain, rules=RULES, keep_raw=True)
    alone = [nsys.parse(p, rules=RULES, keep_raw=True) for p in plain]
    assert job.ranks_traced == 2 and job.world_size == 2 and job.ranks_stated
    assert sorted(job.steps["rank"].unique().to_list()) == [0, 1]
    shift = {r: _session_start(p) - min(map(_session_start, plain)) for r, p in enumerate(plain)}
    assert sorted(shift.values()) == [0, 8_815_149]  # rank 1's session started 8.8 ms before rank 0's
    for rank, a in enumerate(alone):
        assert a.steps["rank"].unique().to_list() == [rank]  # RANK from each export's own environment
        for name in ("rows", "nvtx", "kernel_steps"):
            mine = getattr(job, name).filter(pl.col("rank") == rank)
            assert_frame_rows_equal(mine, getattr(a, name))
        # Timestamps move by the sessions' difference, nothing else changes.
        for name in ("steps", "events", "raw_events"):
            mine = getattr(job, name).filter(pl.col("rank") == rank)
            moved = getattr(a, name).with_columns(pl.col("start_ns") + shift[rank],
                                                  *([pl.col("end_ns") + shift[rank]] if name != "steps" else []))
            assert_frame_rows_equal(mine, moved)
    assert job.unattributed == sum(a.unattributed for a in alone)


def assert_frame_rows_equal(x: pl.DataFrame, y: pl.DataFrame) -> None:
    assert x.schema == y.schema
    assert x.sort(x.columns, nulls_last=True).equals(y.sort(y.columns, nulls_last=True))


def test_the_session_clock_aligns_the_ranks(plain):
    """DDP's all-reduce ends every step on both ranks together: on the job's clock their step ranges end within
    a few ms of each other; on each export's own clock they are 8.8 ms apart (the sessions' starts)."""
    job = execution.parse_nsys_job(plain, rules=RULES)
    ends = job.steps.filter(~pl.col("warmup")).with_columns(
        (pl.col("start_ns") + (pl.col("wall_ms") * 1e6).cast(pl.Int64)).alias("end_ns"))
    paired = ends.filter(pl.col("rank") == 0).join(ends.filter(pl.col("rank") == 1), on="step", suffix="_1")
    aligned = ((paired["end_ns_1"] - paired["end_ns"]).abs() / 1e6).median()
    unaligned = ((paired["end_ns_1"] - 8_815_149 - paired["end_ns"]).abs() / 1e6).median()
    assert aligned < 2.0 < 5.0 < unaligned


def test_worker_processes_give_the_serial_job(plain):
    stats = MapStats()
    parallel = execution.parse_nsys_job(plain, rules=RULES, keep_raw=True, plan=RankMap(workers=2), stats=stats)
    assert stats.where == "2 worker processes"
    assert_same_anatomy(execution.parse_nsys_job(plain, rules=RULES, keep_raw=True), parallel)


def test_gzipped_exports_read_like_plain_ones(plain):
    assert_same_anatomy(execution.parse_nsys_job(EXPORTS, rules=RULES), execution.parse_nsys_job(plain, rules=RULES))


def test_one_rank_from_two_exports_is_refused(plain, tmp_path):
    twin = tmp_path / "rank0_again.sqlite"
    shutil.copy(plain[0], twin)
    with pytest.raises(InputError, match="rank 0 also comes from rank0.sqlite") as err:
        execution.parse_nsys_job([plain[0], twin], rules=RULES)
    assert err.value.path == twin


def test_exports_with_no_step_in_common_are_not_one_job(plain, tmp_path):
    other = tmp_path / "rank1.sqlite"
    shutil.copy(plain[1], other)
    with sqlite3.connect(other) as db:  # the same rank's export, its steps renumbered 100 up: another run
        db.create_function("later", 1, _later)
        db.execute("UPDATE NVTX_EVENTS SET text = later(text)")
        db.execute("UPDATE StringIds SET value = later(value)")
    with pytest.raises(InputError, match=r"steps 100-119 share none with rank0.sqlite's 0-19: not the same job"):
        execution.parse_nsys_job([plain[0], other], rules=RULES)


def _later(text: str | None) -> str | None:
    found = re.fullmatch(r"(.*step )(\d+)", text or "")
    return f"{found[1]}{int(found[2]) + 100}" if found else text


def test_exports_without_stated_ranks_are_offset_by_node_then_by_order(plain):
    parts = [nsys_job.read_export(p, rules=RULES) for p in plain]
    # As if each export held one node's processes with no RANK: each numbers its own from 0.
    local = [dataclasses.replace(p, anatomy=_renumbered(p.anatomy, 0)) for p in parts]
    by_node = nsys_job.combine([dataclasses.replace(p, node_rank=n) for p, n in zip(local, (1, 0))])
    assert by_node.steps.filter(pl.col("rank") == 1)["wall_ms"].equals(parts[0].anatomy.steps["wall_ms"])
    assert not any("name order" in w for w in by_node.warnings)
    by_order = nsys_job.combine([dataclasses.replace(p, node_rank=None) for p in local])
    assert by_order.steps.filter(pl.col("rank") == 1)["wall_ms"].equals(parts[1].anatomy.steps["wall_ms"])
    assert any("ranks numbered by the exports' name order" in w for w in by_order.warnings)
    # One export states rank 1, the other nothing: that one is rank 0, the rank still free.
    mixed = nsys_job.combine([local[0], parts[1]])
    assert mixed.steps.filter(pl.col("rank") == 0)["wall_ms"].equals(parts[0].anatomy.steps["wall_ms"])


def _renumbered(anatomy, rank: int):
    frames = {name: getattr(anatomy, name).with_columns(pl.lit(rank, dtype=pl.Int32).alias("rank"))
              for name in ("rows", "steps", "nvtx", "events", "kernel_steps")}
    return dataclasses.replace(anatomy, ranks_stated=False, **frames)


def test_a_run_directory_with_one_export_per_rank_attaches_one_anatomy(db):
    cli(db, "ingest", str(RUN_DIR))
    code, report = cli_json(db, "anatomy", "per_rank_gloo", "--by", "rank")
    assert code == 0 and report["source"]["path"] == str(RUN_DIR.resolve())
    assert sorted({r["rank"] for r in report["step_rows"]}) == [0, 1]
    assert not report["other_sources"]  # one anatomy, not one per export
    assert "0 ingested, 2 unchanged" in cli(db, "ingest", str(RUN_DIR)).stdout  # the set is hashed as one


def test_a_folder_of_exports_is_one_job_and_a_folder_with_other_files_is_not(db, tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    for gz in EXPORTS:
        shutil.copy(gz, job / gz.name)
    code, done = cli_json(db, "ingest", str(job), "--workers", "2")
    assert code == 0 and [(f["path"], f["status"]) for f in done] == [(str(job), "ingested")]
    machine = cli_json(db, "show", "job")[1]["machine"]
    assert machine["ranks_traced"] == 2 and machine["world_size"] == 2
    (job / "notes.txt").write_text("two ranks, one GPU\n")
    code, mixed = cli_json(db, "ingest", str(job))
    assert code == 2 and [Path(f["path"]).name for f in mixed] == ["notes.txt", "rank0.sqlite.gz", "rank1.sqlite.gz"]


def _unzipped(gz: Path, folder: Path) -> Path:
    out = folder / gz.name.removesuffix(".gz")
    with gzip.open(gz, "rb") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def test_exports_of_two_runs_are_not_one_job(plain, tmp_path):
    """Real exports of other runs beside one of this job's: each way two runs differ is refused, naming both."""
    gpu = Path(__file__).parent / "data" / "gpu"
    # the 1-GPU FSDP2 run of the day before: its session started ~20 h earlier
    other_day = _unzipped(gpu / "fsdp2_1gpu_nsys.sqlite.gz", tmp_path)
    with pytest.raises(InputError, match=r"its session started [\d,]+ min after fsdp2_1gpu_nsys.sqlite's .*"
                                         r"not the same job; ingest each export on its own"):
        execution.parse_nsys_job([other_day, plain[1]], rules=RULES)
    # the same day's exports, one with a world size of 4
    wider = tmp_path / "rank1.sqlite"
    shutil.copy(plain[1], wider)
    with sqlite3.connect(wider) as db:
        env = db.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'").fetchone()[0]
        db.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = ? WHERE name = 'DeviceEnvironment'",
                   [re.sub(r"(^|;)WORLD_SIZE=2", r"\1WORLD_SIZE=4", env)])
    with pytest.raises(InputError, match="its world size is 4 where rank0.sqlite says 2: not the same job"):
        execution.parse_nsys_job([plain[0], wider], rules=RULES)
    # two exports without stated ranks holding 1 and 2 GPU processes (nsys wrapped torchrun, one per node)
    one, two = (_unzipped(gpu / f"{n}.sqlite.gz", tmp_path) for n in ("fsdp2_1gpu_nsys", "fsdp2_2gpu_nsys"))
    parts = [nsys_job.read_export(p, rules=RULES) for p in (one, two)]
    parts = [dataclasses.replace(p, anatomy=dataclasses.replace(p.anatomy, clock_origin_ns=0)) for p in parts]
    assert not any(p.anatomy.ranks_stated for p in parts)
    with pytest.raises(InputError, match="it holds 2 GPU processes without stated ranks where fsdp2_1gpu_nsys.sqlite "
                                         "holds 1: not the same job"):
        nsys_job.combine(parts)
