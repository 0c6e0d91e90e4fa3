"""`receipts anatomy --by category`: a profile of many ranks read as one table per phase, each category's ms per
step over the ranks (median, least and most with their rank, spread), the default past one node's ranks."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import polars as pl

from receipts.analysis.anatomy import across_ranks, mean_over_ranks
from tests.cli_helpers import cli, cli_json

TRACES = Path(__file__).parent / "data" / "gpu" / "fsdp2_2gpu_kineto" / "traces"


def _window(rows: list[tuple]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "phase": pl.Utf8, "category": pl.Utf8, "time_ms": pl.Float64,
                                      "n_steps": pl.Int64, "per_step_ms": pl.Float64}, orient="row")


def test_each_category_over_the_ranks_that_had_it():
    window = _window([
        (0, "steady", "gemm", 30.0, 3, 10.0), (1, "steady", "gemm", 36.0, 3, 12.0), (2, "steady", "gemm", 24.0, 3, 8.0),
        (3, "steady", "gemm", 36.0, 3, 12.0),                      # ties the most: the highest rank is named
        (0, "steady", "nccl_all_gather", 3.0, 3, 1.0),             # on two ranks only
        (2, "steady", "nccl_all_gather", 3.0, 3, 1.0),             # ties the least: the lowest rank is named
        (0, "warmup", "gemm", 50.0, 1, 50.0), (1, "warmup", "gemm", 40.0, 1, 40.0),
        (0, "steady", "idle", 0.0, 3, 0.0), (1, "steady", "idle", 0.0, 3, 0.0),   # median 0: no spread
        (None, "steady", "gemm", 99.0, 3, 33.0),                   # a process that launched no GPU work: no rank
    ])
    got = across_ranks(window).to_dicts()
    assert [(r["phase"], r["category"]) for r in got] == [
        ("steady", "gemm"), ("steady", "nccl_all_gather"), ("steady", "idle"), ("warmup", "gemm")]
    gemm, nccl, idle, warm = got
    assert (gemm["ranks"], gemm["median_ms"], gemm["min_ms"], gemm["min_rank"], gemm["max_ms"], gemm["max_rank"]) == (
        4, 11.0, 8.0, 2, 12.0, 3)
    assert abs(gemm["spread_pct"] - (12.0 - 8.0) / 11.0 * 100) < 1e-12
    assert (nccl["ranks"], nccl["min_rank"], nccl["max_rank"], nccl["spread_pct"]) == (2, 0, 2, 0.0)
    assert idle["spread_pct"] is None
    assert (warm["ranks"], warm["median_ms"], warm["min_rank"], warm["max_rank"]) == (2, 45.0, 1, 0)


def test_the_mean_of_the_ranks_per_step_keeps_the_parts_summing_to_the_step():
    rows = pl.DataFrame([
        (0, 1, "compute_only", 6.0, True), (0, 1, "idle", 4.0, True), (1, 1, "compute_only", 8.0, True),
        (1, 1, "idle", 2.0, True), (2, 1, "compute_only", 10.0, True),       # rank 2 had no idle in step 1
        (0, 2, "compute_only", 5.0, False), (1, 2, "compute_only", 7.0, False),  # rank 2 missed step 2
        (0, None, "idle", 9.0, False), (1, None, "idle", 3.0, False),           # an export without step markers
    ], schema={"rank": pl.Int32, "step": pl.Int64, "category": pl.Utf8, "time_ms": pl.Float64, "warmup": pl.Boolean},
        orient="row")
    got = {(r["step"], r["category"]): (r["time_ms"], r["warmup"], r["rank"]) for r in mean_over_ranks(rows).to_dicts()}
    assert got == {(1, "compute_only"): (8.0, True, None), (1, "idle"): (2.0, True, None),
                   (2, "compute_only"): (6.0, False, None), (None, "idle"): (6.0, False, None)}
    assert mean_over_ranks(rows).columns == rows.columns


def _renumbered(folder: Path, ranks: int) -> Path:
    """`ranks` copies of the real 2-rank FSDP2 pair, distributedInfo renumbered (the writer's layout kept)."""
    folder.mkdir()
    texts = [gzip.decompress(p.read_bytes()).decode() for p in sorted(TRACES.glob("rank*.pt.trace.json.gz"))]
    for r in range(ranks):
        text = re.sub(r'("distributedInfo": \{[^}]*?"rank": )\d+(, "world_size": )\d+',
                      lambda m: f"{m.group(1)}{r}{m.group(2)}{ranks}", texts[r % 2], count=1)
        (folder / f"rank{r}.pt.trace.json.gz").write_bytes(gzip.compress(text.encode(), compresslevel=1))
    return folder


def test_past_one_nodes_ranks_the_default_is_one_table_per_phase(tmp_path, db):
    two = cli(db, "ingest", str(TRACES), "--run-name", "pair")
    assert two.exit_code == 0, two.stderr
    assert "per rank, ms per step" in cli(db, "anatomy", "pair", "--format", "table").stdout  # 2 ranks: each rank, as before

    many = _renumbered(tmp_path / "ranks12", 12)
    assert cli(db, "ingest", str(many), "--run-name", "ranks12").exit_code == 0
    shown = cli(db, "anatomy", "ranks12", "--format", "table")
    assert shown.exit_code == 0 and "steady: ms per step over 12 ranks (--by rank: each rank)" in shown.stdout
    assert "per rank, ms per step" not in shown.stdout
    code, report = cli_json(db, "anatomy", "ranks12")
    assert code == 0
    # Against the per-rank window it reduces: even ranks are copies of real rank 0, odd ones of rank 1.
    steady = [r for r in report["window"] if r["phase"] == "steady"]
    for row in (r for r in report["across_ranks"] if r["phase"] == "steady"):
        values = sorted((r["per_step_ms"], r["rank"]) for r in steady if r["category"] == row["category"])
        assert row["ranks"] == len(values) == 12
        assert (row["min_ms"], row["max_ms"]) == (values[0][0], values[-1][0])
        assert row["min_rank"] in (0, 1) and row["max_rank"] in (10, 11)
    assert "per rank, ms per step" in cli(db, "anatomy", "ranks12", "--by", "rank", "--format", "table").stdout
    bad = cli(db, "anatomy", "ranks12", "--by", "ranks")
    assert bad.exit_code == 2 and "--by must be category, rank, step, nvtx, kernel or gap" in bad.stderr


def test_the_dashboard_draws_the_spread_past_one_nodes_ranks(tmp_path, db, monkeypatch):
    from streamlit.testing.v1 import AppTest

    assert cli(db, "ingest", str(_renumbered(tmp_path / "ranks12", 12)), "--run-name", "ranks12").exit_code == 0
    code, report = cli_json(db, "anatomy", "ranks12")
    monkeypatch.setenv("RECEIPTS_DB", db)
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "dashboards" / "app.py"), default_timeout=60)
    at.query_params["view"] = "anatomy"
    at.query_params["id"] = report["receipt_id"]
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(c.value.startswith("12 ranks: each category from its least to its most busy rank") for c in at.caption)
    assert "#### Per step, the mean of the ranks" in [m.value for m in at.markdown]
    specs = [c.proto.spec for c in at.get("vega_lite_chart")]
    spread = next(s for s in specs if "each category over the ranks (steady state)" in s)
    assert "least to most, tick at the median" in spread and "busy time by category (overlapping)" not in "".join(specs)
    from receipts.dashboards.charts import anatomy_by_step
    from receipts.store import open_store

    with open_store(db, read_only=True) as store:
        rows = store.query("anatomy_rows", {"receipt_id": report["receipt_id"], "source_sha256": report["source"]["sha256"]})
    drawn = anatomy_by_step(mean_over_ranks(rows), ranks_label="mean of 12 ranks").to_dict()["datasets"]
    assert {r["rank_label"] for rows in drawn.values() for r in rows} == {"mean of 12 ranks"}  # one column, not 12
    # Under "busy time by category": the kernel and memory categories, not the parts of the step (idle is no work).
    from receipts.dashboards.charts import anatomy_spread

    inline = anatomy_spread(pl.DataFrame(report["across_ranks"])).to_dict()["datasets"]
    drawn = {row["category"] for rows in inline.values() for row in rows}
    assert "nccl_all_gather" in drawn and not drawn & {"idle", "compute_only", "exposed_comm", "comm_hidden"}
