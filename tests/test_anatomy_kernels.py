"""Kernel totals by name (anatomy_kernels, schema 7): the rows behind the top-N kernels table of
`receipts anatomy --by kernel` and the dashboard's anatomy view."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import polars as pl
import pytest

from cli_helpers import cli, cli_json
from conftest import GPU_DATA
from receipts.ingest import nsys
from receipts.schema.categories import load_category_rules

STATS = GPU_DATA / "stats"


@pytest.fixture(scope="module")
def export_1gpu(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("nsys") / "fsdp2_1gpu_nsys.sqlite"
    with gzip.open(GPU_DATA / "fsdp2_1gpu_nsys.sqlite.gz") as src, path.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    return path


def test_per_name_totals_agree_with_nsys_stats(export_1gpu):
    """Against `nsys stats --report cuda_gpu_kern_sum` on the same export: per kernel name, what lies inside the
    step ranges is at most what nsys counts over the whole capture, and the difference is exactly the kernels
    no step claimed (launched before the first step marker)."""
    anatomy = nsys.parse(export_1gpu, rules=load_category_rules())
    mine = anatomy.kernel_steps.with_columns(pl.col("name").cast(pl.Utf8)).group_by("name").agg(pl.col("calls").sum(), pl.col("time_ms").sum())
    stats = pl.read_csv(STATS / "fsdp2_1gpu_nsys_cuda_gpu_kern_sum.csv")
    both = stats.join(mine, left_on="Name", right_on="name", how="left").with_columns(
        pl.col("calls").fill_null(0), pl.col("time_ms").fill_null(0.0))
    assert both.height == stats.height and mine.height <= stats.height  # no name nsys does not know
    assert (both["calls"] <= both["Instances"]).all()
    assert (both["time_ms"] <= both["Total Time (ns)"] / 1e6 + 1e-9).all()
    # the GEMMs and attention that make the step are inside the steps: at least 90% of each of the top five
    top = both.sort("Total Time (ns)", descending=True).head(5)
    assert (top["time_ms"] / (top["Total Time (ns)"] / 1e6) >= 0.9).all(), top
    kernels_outside = int(stats["Instances"].sum() - mine["calls"].sum())
    assert 0 < kernels_outside <= anatomy.unattributed


@pytest.mark.parametrize("run, source", [("fsdp2_2gpu_nsys", GPU_DATA / "fsdp2_2gpu_nsys.sqlite.gz"),
                                         ("fsdp2_2gpu_kineto", GPU_DATA / "fsdp2_2gpu_kineto" / "traces")])
def test_stored_totals_cover_the_steady_steps_and_print(db, tmp_path, run, source):
    log = GPU_DATA / run / "run.log"
    assert cli(db, "ingest", str(log)).exit_code == 0
    if source.suffix == ".gz":
        export = tmp_path / source.name.removesuffix(".gz")
        with gzip.open(source) as src, export.open("wb") as dst:
            shutil.copyfileobj(src, dst)
        source = export
    assert cli(db, "ingest", str(source), "--attach", run).exit_code == 0
    code, report = cli_json(db, "anatomy", run, "--top", "1000")
    assert code == 0
    kernels = pl.DataFrame(report["kernels"])
    steps = pl.DataFrame(report["steps"]).filter(~pl.col("warmup") & pl.col("step").is_not_null())
    # calls over the steady steps == the kernels the anatomy counted in those steps (computed apart)
    assert kernels["calls"].sum() == steps["kernels"].sum() > 0
    assert set(kernels["category"]) <= set(pl.DataFrame(report["step_rows"])["category"])
    shares = kernels.group_by("category").agg(pl.col("share_pct").sum())["share_pct"]
    assert ((shares - 100).abs() < 1e-6).all()  # --top 1000 keeps every kernel: each category sums to 100%
    top2 = cli_json(db, "anatomy", run, "--top", "2")[1]["kernels"]
    assert max(pl.DataFrame(top2).group_by("category").len()["len"]) <= 2
    shown = cli(db, "anatomy", run, "--by", "kernel", "--top", "3", "--format", "table")
    assert shown.exit_code == 0 and "top 3 kernels per category" in shown.stdout
    longest = kernels.sort("total_ms", descending=True).row(0, named=True)
    assert longest["category"] in shown.stdout and f"{longest['calls']:,}" in shown.stdout


def test_totals_are_whole_nanoseconds_whatever_the_last_bit_of_a_step():
    """Each per-step time is whole nanoseconds / 1e6, but polars' division can differ in the last bit with the
    frame's length (the serial and the per-rank paths cut frames differently), so two ingests of one export
    stored totals one ulp apart. The totals are summed as whole nanoseconds: the last bit no longer reaches them."""
    import math

    from receipts.analysis.anatomy import steady_kernel_totals

    steps = pl.DataFrame({"rank": [0, 0], "step": [1, 2], "warmup": [False, False]})

    def total(first_ms: float) -> float:
        kernel_steps = pl.DataFrame({"rank": [0, 0], "step": [1, 2], "category": ["gemm"] * 2, "name": ["k"] * 2,
                                     "calls": [1, 1], "time_ms": [first_ms, 0.2]})
        return steady_kernel_totals(kernel_steps, steps)["total_ms"][0]

    assert total(0.1) == total(math.nextafter(0.1, 1.0)) == total(math.nextafter(0.1, 0.0)) == 0.3
