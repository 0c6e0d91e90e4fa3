"""The dashboard's rough edges, read as a user reads them: a metric the log printed as zero throughout draws no flat
chart, run and component names are not cut at 20 characters, unknown cells say `—` not `None`, and the memory
view sets a receipt against its own lane by default. Real runs: nanochat's SFT log (mfu 0.00 every step), the
memory runs (tests/data/memory) beside an H100 run of another lane."""

from __future__ import annotations

import pytest

from cli_helpers import cli
from conftest import REPO, realdata
from dashboard_store import _app, _no_exception


def test_a_metric_printed_as_zero_throughout_draws_no_chart():
    from receipts.dashboards import charts
    from receipts.pipeline import parse_log

    steps = parse_log(realdata("logs", "sft_run_gtx1660.log")).steps
    assert steps["mfu_pct"].drop_nulls().len() and (steps["mfu_pct"].drop_nulls() == 0).all()
    spec = charts.training_metrics(steps).to_dict()
    titles = [c["encoding"]["y"]["title"] for c in spec["vconcat"]]
    assert titles == ["loss", "tokens/s"]


def test_long_run_and_component_names_are_shown_whole():
    import polars as pl

    from receipts.dashboards import charts
    from receipts.dashboards.views import explain

    diff = pl.DataFrame({"category": ["gemm"], "a_ms_per_step": [1.0], "b_ms_per_step": [2.0], "diff_ms_per_step": [1.0]})
    spec = charts.anatomy_side_by_side(diff, "straggler_base_nsys", "straggler_plant_nsys").to_dict()
    assert spec["hconcat"][0]["encoding"]["color"]["legend"]["labelLimit"] >= 400  # 'B straggler_plant_nsys' whole
    rows = pl.DataFrame({"level": ["kernel"], "component": ["ncclDevKernel_ReduceScatter_Sum_f32_RING_LL"],
                         **{k: [1.0] for k in ("baseline_ms", "candidate_ms", "delta_ms", "low_ms", "high_ms",
                                               "noise_ms")}, "verdict": ["changed"], "evidence": ["structural"],
                         "presence": [""], "calls_delta": [16.0]})
    layer = explain.chart(rows).to_dict()["layer"][0]
    assert layer["encoding"]["y"]["axis"]["labelLimit"] >= 400


@pytest.fixture(scope="module")
def two_lanes(tmp_path_factory) -> str:
    db = str(tmp_path_factory.mktemp("edges") / "m.duckdb")
    lane = ["--host-lineage", "h100-device-x1", "--preset", "toy_fsdp2_v1", "--regime", "fsdp2/no-compile"]
    assert cli(db, "ingest", str(REPO / "tests" / "data" / "noise" / "aa_01" / "run.log"), *lane).exit_code == 0
    for run in ("adamw_2gpu", "sgd_2gpu"):
        assert cli(db, "ingest", str(REPO / "tests" / "data" / "memory" / run)).exit_code == 0
    return db


@pytest.mark.slow  # the Streamlit app run twice over three real runs
def test_the_memory_view_sets_a_receipt_against_its_own_lane_and_blanks_unknowns(two_lanes, monkeypatch):
    from receipts.store import open_store

    with open_store(two_lanes, read_only=True) as store:
        ids = {name: store.resolve(name) for name in ("aa_01", "adamw_2gpu", "sgd_2gpu")}
    at = _app(two_lanes, monkeypatch, view="memory", id=ids["adamw_2gpu"])
    _no_exception(at)
    assert at.selectbox(key="pick_b").value == ids["sgd_2gpu"]  # the same lane, not the H100 run first in the list
    frames = [f.value for f in at.dataframe]
    buckets = next(f for f in frames if "estimated GiB" in f.columns)
    assert set(buckets["estimated GiB"]) == {"—"}  # no estimate attached: said, never `None`
    assert not any(v is None for f in frames for col in f.columns for v in f[col].tolist())
