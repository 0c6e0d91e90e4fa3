"""From a slow step to its kernels (analysis/drilldown.py, `anatomy --step`), on a real 2-GPU run with two planted
slow steps (tests/data/slow_step: 48 extra GEMMs in step 12 only, a 25 ms host stall in step 17 only), checked
against `nsys stats` on the same export and against plain SQL over the export."""

from __future__ import annotations

import csv
import gzip
import json
import re
import shutil
from pathlib import Path

import polars as pl
import pytest

from cli_helpers import cli, cli_json
from conftest import realdata
from receipts.schema.categories import DECOMPOSITION
from receipts.schema.model import STEP_KERNELS_REST

DATA = Path(__file__).resolve().parent / "data" / "slow_step"
RUN = DATA / "slowstep_1"
SLOW_STEP, SLOW_K, STALL_STEP, STALL_MS = 12, 48, 17, 25.0  # tests/data/slow_step/machine.txt
PARTS = DECOMPOSITION


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("drill") / "slow.duckdb")
    result = cli(path, "ingest", str(RUN))
    assert result.exit_code == 0, result.output
    return path


def _drill(db: str, step, rank=None):
    from receipts.analysis.anatomy import anatomy_report
    from receipts.analysis.drilldown import step_drilldown
    from receipts.store import open_store

    with open_store(db, read_only=True) as store:
        rid = store.resolve("slowstep_1")
        return step_drilldown(store, rid, anatomy_report(store, rid).source.sha256, step, rank)


def test_the_planted_gemm_step_names_one_kernel_with_48_more_calls(db):
    for rank in (0, 1):
        d = _drill(db, SLOW_STEP, rank)
        top = d.kernels[0]
        assert top["category"] == "gemm" and top["calls"] - top["typical_calls"] == SLOW_K, top
        assert top["delta_ms"] > 5.0  # 48 bf16 4096^3 GEMMs on an H100: ~8 ms
        # nothing else ran more often (the rest row is not one kernel: which names fall in it varies by step)
        others = [k for k in d.kernels[1:] if k["name"] != STEP_KERNELS_REST]
        assert others and all(abs(k["calls"] - k["typical_calls"]) < 0.5 for k in others)
        busy = {c["category"]: c for c in d.categories if not c["part"]}
        assert busy["gemm"]["delta_ms"] == pytest.approx(top["delta_ms"], abs=1.0)
        assert max(d.categories, key=lambda c: c["delta_ms"] if c["part"] else -1)["category"] == "compute_only"


def test_the_planted_stall_step_is_idle_with_no_kernel_changed(db):
    d = _drill(db, STALL_STEP)
    parts = [c for c in d.categories if c["part"]]
    assert parts[0]["category"] == "idle_long" and STALL_MS - 1 < parts[0]["delta_ms"] < STALL_MS + 10, parts[0]
    named = [k for k in d.kernels if k["name"] != STEP_KERNELS_REST]
    assert all(abs(k["calls"] - k["typical_calls"]) < 0.5 for k in named)
    assert max(k["delta_ms"] for k in d.kernels) < 1.0


def test_the_slowest_steady_steps_are_the_planted_ones_and_open_by_default(db):
    from receipts.analysis.anatomy import anatomy_report
    from receipts.analysis.drilldown import slowest_steps
    from receipts.store import open_store

    with open_store(db, read_only=True) as store:
        rid = store.resolve("slowstep_1")
        order = slowest_steps(store, rid, anatomy_report(store, rid).source.sha256, n=100)
    steady = [r["step"] for r in order if not r["warmup"]]
    assert set(steady[:2]) == {SLOW_STEP, STALL_STEP}
    assert all(r["warmup"] for r in order[len(steady):])  # warm-up steps last: slow by design
    assert _drill(db, "slowest").step == steady[0]


def test_typical_is_the_median_of_the_other_steady_steps(db):
    """The reference leaves the step itself out and is a median: each part's typical value for a steady step is
    the median of that part over the rank's 19 other steady steps, whatever the two planted steps did."""
    import statistics

    values: dict[str, dict[int, float]] = {}
    for s in range(4, 24):
        for c in _drill(db, s, 0).categories:
            values.setdefault(c["category"], {})[s] = c["ms"]
    for s in range(4, 24):
        d = _drill(db, s, 0)
        for c in d.categories:
            others = [v for step, v in values[c["category"]].items() if step != s]
            others += [0.0] * (19 - len(others))  # a step without the category spent 0 ms in it
            assert c["typical_ms"] == pytest.approx(statistics.median(others), abs=1e-9), (s, c["category"])
    assert _drill(db, STALL_STEP, 0).typical_span_ms == pytest.approx(
        statistics.median(sum(v[s] for k, v in values.items() if k in PARTS) for s in range(4, 24) if s != STALL_STEP))


def test_per_step_kernels_sum_to_nsys_stats_for_kernels_run_only_inside_steps(db):
    """`nsys stats --report cuda_gpu_kern_sum` on the same export (run on the device, the CSV beside it): every
    kernel whose instances all ran inside steps (the backward's, the planted GEMM; not the forward's, which the
    closing eval runs too) has the same calls and total time summed over the stored steps."""
    with (RUN / "nsys_stats_cuda_gpu_kern_sum.csv").open() as f:
        stats = {r["Name"]: (int(r["Instances"]), int(r["Total Time (ns)"])) for r in csv.DictReader(f)}
    from receipts.store import open_store

    with open_store(db, read_only=True) as store:
        stored = store.sql("SELECT name, sum(calls)::BIGINT AS calls, sum(time_ms) AS ms FROM anatomy_step_kernels "
                           "GROUP BY name")
    matched = 0
    for name, calls, ms in stored.iter_rows():
        if name in stats and stats[name][0] == calls:
            assert ms == pytest.approx(stats[name][1] / 1e6, abs=1e-6), name
            matched += 1
    assert matched >= 10
    assert any(n.startswith("ncclDevKernel_ReduceScatter") and stats[n][0] == c for n, c, _ in stored.iter_rows()
               if n in stats)


def test_a_steps_rows_keep_its_longest_kernels_and_sum_the_rest(db):
    """Per rank-step at most STEP_KERNELS_KEPT names and one '(other kernels)' row; the calls add up to the step's
    kernel count (anatomy_steps.kernels), checked against plain SQL over the export for one step."""
    from receipts.schema.model import STEP_KERNELS_KEPT, STEP_KERNELS_REST
    from receipts.store import open_store

    with open_store(db, read_only=True) as store:
        rows = store.sql("SELECT * FROM anatomy_step_kernels")
        steps = store.sql("SELECT rank, step, kernels FROM anatomy_steps")
    per = rows.group_by("rank", "step").agg(pl.len().alias("n"), pl.col("calls").sum().alias("calls"),
                                             (pl.col("name") == STEP_KERNELS_REST).sum().alias("rest"))
    assert per["n"].max() <= STEP_KERNELS_KEPT + 1 and per["rest"].max() == 1
    both = per.join(steps, on=["rank", "step"])
    assert both.height == steps.height and (both["calls"] == both["kernels"]).all()


def test_cli_opens_a_step_at_80_columns_and_as_data(db):
    shown = cli(db, "anatomy", "slowstep_1", "--step", str(SLOW_STEP), "--format", "table")
    assert shown.exit_code == 0, shown.output
    assert shown.output.startswith(f"step {SLOW_STEP} of slowstep_1, rank ")
    assert "against the rank's typical steady step" in " ".join(shown.output.split())  # prose wraps at 80
    assert re.search(r"\n \+\d+\.\d{3} +\d+\.\d{3} +\d+\.\d{3} +61 / 13 ", shown.output), shown.output
    tsv = cli(db, "anatomy", "slowstep_1", "--step", str(SLOW_STEP), "--rank", "0", "--format", "tsv")
    header, first = tsv.output.splitlines()[:2]
    assert header.split("\t") == ["delta_ms", "ms", "typical_ms", "calls", "typical_calls", "category", "name"]
    assert first.split("\t")[3:6] == ["61", "13.0", "gemm"]
    top3 = cli(db, "anatomy", "slowstep_1", "--step", str(SLOW_STEP), "--top", "3", "--format", "csv")
    assert len(top3.output.splitlines()) == 1 + 3  # --top: the kernels shown, in every format but --json
    code, report = cli_json(db, "anatomy", "slowstep_1", "--step", "slowest")
    assert code == 0 and report["step"] in (SLOW_STEP, STALL_STEP) and report["kernels_stored"] is True
    assert {"categories", "kernels", "typical_wall_ms", "ranks"} <= set(report)


@pytest.mark.parametrize("args, says", [
    (("--step", "99"), "--step 99 is not a step of the export attached to"),
    (("--step", "12", "--rank", "5"), "--rank 5 did not run step 12 in this export (its ranks: 0, 1)"),
    (("--step", "twelve"), "--step takes a step number or `slowest` (got 'twelve')"),
    (("--rank", "1"), "--rank opens one rank of a step: give --step too"),
])
def test_cli_refuses_a_step_or_rank_that_is_not_there_in_one_line(db, args, says):
    done = cli(db, "anatomy", "slowstep_1", *args)
    assert done.exit_code == 2 and says in done.output and "Traceback" not in done.output
    assert done.output.count("\n") == 1


def test_an_export_without_step_markers_has_no_step_to_open(tmp_path):
    db = str(tmp_path / "p.duckdb")
    assert cli(db, "ingest", str(realdata("nsys", "profile1.sqlite")), "--run-name", "profile1").exit_code == 0
    done = cli(db, "anatomy", "profile1", "--step", "slowest")
    assert done.exit_code == 2 and "has no step markers: the capture is one window" in done.output


def test_an_export_attached_before_schema_12_says_to_attach_it_again(db, tmp_path):
    """The per-step kernels are not in older stores and cannot be rebuilt from them: the drill-down still opens
    the step's parts, and says what would bring its kernels."""
    copy = str(tmp_path / "old.duckdb")
    shutil.copyfile(db, copy)
    import duckdb

    con = duckdb.connect(copy)
    con.execute("DELETE FROM anatomy_step_kernels")
    con.close()
    shown = cli(copy, "anatomy", "slowstep_1", "--step", str(STALL_STEP), "--format", "table")
    assert shown.exit_code == 0 and "idle" in shown.output
    assert "no per-step kernels stored for this export (attached before schema 12)" in shown.output
    code, report = cli_json(copy, "anatomy", "slowstep_1", "--step", str(STALL_STEP))
    assert report["kernels_stored"] is False and report["kernels"] == []


def test_the_data_is_what_the_device_made():
    """The run's own log states the plants (its command line), so the constants above are the file's word."""
    header = json.loads(next(line for line in (RUN / "run.log").read_text().splitlines()
                             if line.startswith("RECEIPT "))[len("RECEIPT "):])
    command = header["command"]
    assert f"--slow-step {SLOW_STEP} --slow-step-matmuls {SLOW_K}" in command
    assert f"--stall-step {STALL_STEP} --stall-step-ms {STALL_MS:g}" in command
    with gzip.open(RUN / "profile.sqlite.gz") as src:
        head = src.read(16)
    assert head == b"SQLite format 3\x00"
