"""Many ranks in parallel: the ranks of a multi-rank Kineto profile read in worker
processes or on a Dask LocalCluster give the same anatomy as the serial path, on real 2-rank traces."""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import shutil
import sys
from pathlib import Path

import polars as pl
import pytest

from receipts.errors import InputError, UsageError
from receipts.ingest import kineto
from receipts.pipeline import execution
from receipts.pipeline.execution import MapStats, RankMap
from receipts.schema.categories import load_category_rules
from tests.cli_helpers import cli, cli_json
from tests.conftest import realdata

RULES = load_category_rules()
DATA = Path(__file__).parent / "data" / "gpu"


def _sets() -> dict[str, list[Path]]:
    hta = [realdata("kineto", f"trace_filter__sampled_rank-{r}.json.gz") for r in (0, 1)]
    # No distributedInfo.rank (ranks from file position), different GPUs and time bases, a CPU-only rank.
    mixed = [realdata("kineto", n) for n in ("resnet50_num_workers_0__worker0.1623143566756.pt.trace.json.gz",
                                             "mi300__ddp_resnet18_no_pool__train_resnet18.json.gz",
                                             "distributed_info_unavailable__distributed_info_not_found.json.gz")]
    return {"fsdp2_2gpu": kineto.trace_files(DATA / "fsdp2_2gpu_kineto" / "traces"),
            "straggler_plant": kineto.trace_files(DATA / "straggler" / "straggler_plant_kineto" / "traces"),
            "hta_2rank": hta, "mixed": mixed}


def assert_same_anatomy(a, b) -> None:
    """Every field equal; frames equal as sets of rows (row order inside a rank is not part of the anatomy)."""
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, pl.DataFrame) or isinstance(y, pl.DataFrame):
            assert isinstance(x, pl.DataFrame) and isinstance(y, pl.DataFrame), f.name
            assert x.schema == y.schema, f.name
            assert x.sort(x.columns, nulls_last=True).equals(y.sort(y.columns, nulls_last=True)), f.name
        else:
            assert x == y, f.name


@pytest.mark.parametrize("name", ["fsdp2_2gpu", "straggler_plant", "hta_2rank", "mixed"])
def test_worker_processes_give_the_serial_anatomy(name):
    files = _sets()[name]
    serial = kineto.parse_files(files, rules=RULES, keep_raw=True)
    stats = MapStats()
    parallel = execution.parse_kineto(files, rules=RULES, keep_raw=True, plan=RankMap(workers=2), stats=stats)
    assert stats.where == "2 worker processes"
    assert stats.peak_rss_kib and all(v > 0 for v in stats.peak_rss_kib.values())
    assert_same_anatomy(serial, parallel)
    assert parallel.ranks_traced == len(files) and parallel.steps.height > 0


def test_the_reduce_keeps_what_needs_every_rank():
    """Warnings, ranks from file positions, the GPU model vote and time bases come out of the reduce."""
    anatomy = execution.parse_kineto(_sets()["mixed"], rules=RULES, plan=RankMap(workers=2))
    assert sorted(anatomy.steps["rank"].unique().to_list()) == [0, 1, 2]   # the files' positions
    assert any("rank 2 taken from the file's position" in w for w in anatomy.warnings)
    assert any("ranks do not share a time base" in w for w in anatomy.warnings)
    assert any("CPU-only profile" in w for w in anatomy.warnings)


def test_same_rank_twice_is_refused_in_workers(tmp_path):
    src = realdata("kineto", "trace_filter__sampled_rank-0.json.gz")
    for n in ("a.json.gz", "b.json.gz"):
        (tmp_path / n).symlink_to(src)
    with pytest.raises(InputError, match="rank 0 also comes from a.json.gz"):
        execution.parse_kineto(kineto.trace_files(tmp_path), rules=RULES, plan=RankMap(workers=2))


def test_a_bad_trace_in_a_worker_is_one_input_error_naming_it(tmp_path):
    good = DATA / "fsdp2_2gpu_kineto" / "traces"
    files = kineto.trace_files(good)
    shutil.copy(files[0], tmp_path / files[0].name)
    cut = tmp_path / files[1].name
    cut.write_bytes(gzip.decompress(files[1].read_bytes())[:5000])   # plain JSON cut short, under a .gz name
    with pytest.raises(InputError) as err:
        execution.parse_kineto(kineto.trace_files(tmp_path), rules=RULES, plan=RankMap(workers=2))
    assert Path(err.value.path).name == cut.name


def test_dask_local_cluster_gives_the_serial_anatomy():
    pytest.importorskip("distributed")
    files = _sets()["straggler_plant"]
    stats = MapStats()
    on_dask = execution.parse_kineto(files, rules=RULES, keep_raw=True, plan=RankMap(workers=2, dask="local"),
                                    stats=stats)
    assert stats.where.startswith("Dask (local, 2 workers)")
    assert_same_anatomy(kineto.parse_files(files, rules=RULES, keep_raw=True), on_dask)


@pytest.mark.parametrize("how", ["DASK_SCHEDULER_ADDRESS", "scheduler file"])
def test_an_existing_dask_cluster_reads_the_ranks(how, monkeypatch, tmp_path):
    """`DASK_SCHEDULER_ADDRESS` or `--dask FILE.json`: the ranks are read by the running cluster's workers."""
    distributed = pytest.importorskip("distributed")
    traces = DATA / "straggler" / "straggler_plant_kineto" / "traces"
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        args: list[str] = []
        if how == "DASK_SCHEDULER_ADDRESS":
            monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", cluster.scheduler_address)
        else:
            scheduler = tmp_path / "scheduler.json"
            scheduler.write_text(json.dumps({"type": "Scheduler", "address": cluster.scheduler_address}))
            args = ["--dask", str(scheduler)]
        code, rows = cli_json(str(tmp_path / "d.duckdb"), "ingest", str(traces), *args)
        assert code == 0 and rows[0]["status"] == "ingested"
        with distributed.Client(cluster) as client:
            prefixes = client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.task_prefixes))
        assert "read_task" in prefixes   # the cluster ran the map (execution._read_task), not this process


def test_dask_missing_is_a_usage_error(monkeypatch, db):
    monkeypatch.setitem(sys.modules, "distributed", None)   # import distributed -> ImportError
    with pytest.raises(UsageError, match=r"pip install 'gpu-receipts\[dask\]'"):
        execution.parse_kineto(_sets()["fsdp2_2gpu"], rules=RULES, plan=RankMap(dask="local"))
    result = cli(db, "ingest", str(DATA / "fsdp2_2gpu_kineto" / "traces"), "--dask", "local")
    assert result.exit_code == 2 and "gpu-receipts[dask]" in result.output


def test_missing_scheduler_file_is_a_usage_error(tmp_path):
    pytest.importorskip("distributed")
    with pytest.raises(UsageError, match="no such scheduler file"):
        execution.parse_kineto(_sets()["fsdp2_2gpu"], rules=RULES, plan=RankMap(dask=str(tmp_path / "s.json")))


def test_workers_below_one_is_refused():
    with pytest.raises(UsageError, match="workers 0"):
        RankMap(workers=0)


def test_small_sets_stay_in_process_by_default():
    stats = MapStats()
    execution.read_ranks(_sets()["fsdp2_2gpu"], rules=RULES, stats=stats)
    assert stats.where == "serial"   # two 300 kB traces: starting workers would cost more than it saves


def test_cli_workers_store_the_same_receipt_and_anatomy(tmp_path):
    """`receipts ingest --workers 2` and `--workers 1` store the same receipt, anatomy and straggler report.

    Floats to 1e-12 relative: the steady kernel totals (analysis/anatomy.steady_kernel_totals) sum per-step
    ms in polars' group order, which moves their last digit between two serial ingests of the same traces."""
    traces = str(DATA / "straggler" / "straggler_plant_kineto" / "traces")
    outputs = []
    for workers in ("1", "2"):
        db = str(tmp_path / f"w{workers}.duckdb")
        code, rows = cli_json(db, "ingest", traces, "--workers", workers)
        assert code == 0 and rows[0]["status"] == "ingested"
        rid = rows[0]["receipt_id"]
        views = [cli(db, "show", rid, "--json").stdout, cli(db, "stragglers", rid, "--json").stdout]
        views += [cli(db, "anatomy", rid, "--by", by, "--json").stdout for by in ("rank", "step", "kernel")]
        outputs.append((rows[0]["warnings"], [_sorted(json.loads(v)) for v in views]))
    assert outputs[0][0] == outputs[1][0]
    _assert_close(outputs[0][1], outputs[1][1])


def _assert_close(a, b, where="") -> None:
    if isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-12), where
    elif isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _assert_close(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_close(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def _sorted(value):
    """JSON with its lists of rows in a fixed order (the store returns rows of one rank in any order)."""
    if isinstance(value, dict):
        return {k: _sorted(v) for k, v in value.items() if k != "ingested_at"}
    if isinstance(value, list):
        items = [_sorted(v) for v in value]   # ordered by everything but their floats (the last digit may move)
        return sorted(items, key=lambda v: json.dumps(_no_floats(v), sort_keys=True))
    return value


def _no_floats(value):
    if isinstance(value, dict):
        return {k: _no_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_floats(v) for v in value]
    return round(value, 6) if isinstance(value, float) else value


def test_workers_stage_raw_events_as_parquet_and_send_back_a_scan(tmp_path):
    files = _sets()["straggler_plant"]
    serial = kineto.parse_files(files, rules=RULES, keep_raw=True)
    staged = execution.parse_kineto(files, rules=RULES, keep_raw=True,
                                   plan=RankMap(workers=2, raw_staging=tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0.parquet", "1.parquet"]
    assert isinstance(staged.raw_events, pl.LazyFrame)
    assert_same_anatomy(serial, dataclasses.replace(staged, raw_events=staged.raw_events.collect()))
    in_process = execution.parse_kineto(files, rules=RULES, keep_raw=True, plan=RankMap(workers=1, raw_staging=tmp_path))
    assert isinstance(in_process.raw_events, pl.DataFrame)  # read here: nothing to stage


@pytest.mark.parametrize("cores, size_mib, expected", [
    (2, 15, 1),    # below AUTO_MIN_BYTES: in-process
    (2, 17, 2),    # one worker per core
    (64, 17, 16),  # at most AUTO_MAX_WORKERS, at most one per file
])
def test_the_default_pool_follows_the_measured_break_even(tmp_path, monkeypatch, cores, size_mib, expected):
    files = []
    for i in range(20):
        path = tmp_path / f"rank{i}"
        with open(path, "wb") as f:
            f.truncate(size_mib * 2**20 // 20 + 1)  # sparse: the size is what the policy reads
        files.append(path)
    monkeypatch.setattr(execution.os, "cpu_count", lambda: cores)
    assert execution._workers(files, None) == expected


@pytest.mark.parametrize("workers", [1, 2])
def test_the_map_says_its_progress_file_by_file(workers):
    # The bar of a 64-rank ingest sat at 0 until the last rank was read: each file's bytes count as its task is in.
    files = _sets()["fsdp2_2gpu"]
    seen: list[int] = []
    anatomy = execution.parse_kineto(files, rules=RULES, plan=RankMap(workers=workers, progress=seen.append))
    sizes = [f.stat().st_size for f in files]
    assert seen == [sum(sizes[:i + 1]) for i in range(len(files))] and anatomy.ranks_traced == len(files)
    assert_same_anatomy(anatomy, kineto.parse_files(files, rules=RULES))
