"""Diff tests of sql/ queries, as Perfetto's: a store of real logs, a query, and the expected rows in a CSV under
tests/data/sql_expected/ whose values were worked out from the log files by hand, not copied from the code's output.

The store: four real logs of four formats, each dated by its own first stamped line, ingested into one lane
(identity given by flags) with two lineage tags. The same CSVs hold on a PostgreSQL store, where the queries run
through DuckDB's postgres extension with the same macros (the `postgres` case).

How each expected value was obtained (commands run in ../shared/realdata/logs):
  receipt_id      the first 16 hex digits of `sha256sum FILE` (a receipt is its file's content).
  run_date        the file's first time stamp, as written (no offset: taken as UTC):
                  megatron-deepspeed: line 10 `[2022-10-31 10:59:02,323] [INFO] [runner.py...` (DeepSpeed's launcher);
                  torchtitan: its first step line, `... 2025-06-16 22:30:50,322 - root - INFO - step: 200 ...`;
                  sft_run_gtx1660: line 1 `2026-03-16 22:57:30,775 - nanochat.common ...`;
                  the MLPerf log: `run_start`'s time_ms 1714734355906 = 2024-05-03T11:05:55.906Z.
  n_steps,        the steady window by the documented warm-up rule (analysis/window.py: the first logged step is
  median_step_ms  warm-up; all later steps here are within 1.25x of the second half's median, so warm-up ends there):
                  sft_run_gtx1660: `grep -oP '^step (\\d+).*dt: \\K[0-9.]+' | tail -n +2`, 132 values, median
                  (5.06 + 5.07) / 2 = 5.065 ms;
                  megatron-deepspeed: `grep -oP 'elapsed time per iteration \\(ms\\): \\K[0-9.]+' | tail -n +2`,
                  46 values (iterations 20..470), median 488.5 ms;
                  torchtitan: one line every 10 steps, a step's time the time between two step lines / 10:
                  210->220 13.964 s, 220->230 13.961 s, 230->240 13.974 s, 240->250 13.977 s (step 210, the first
                  timed one, is warm-up), so 4 steps, median (1396.4 + 1397.4) / 2 = 1396.9 ms;
                  MLPerf resnet: each epoch is a step, epoch_stop - epoch_start time_ms, 35 epochs, epochs 2..35
                  steady: 34 values, median 22451.0 ms.
  dash_filter_options: 4 receipts in the one lane; tags wave-a on two, wave-b on one; the earliest and latest
                  run dates' days.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from cli_helpers import cli
from conftest import realdata
from test_postgres import pg_server, pg_url  # noqa: F401  (fixtures: a fresh PostgreSQL database per test)

EXPECTED = Path(__file__).resolve().parent / "data" / "sql_expected"
LANE = ("diff-host", "diff-preset", "ddp/no-compile")
LOGS = {  # file in realdata/logs -> its tag
    "megatron-deepspeed__gpt3-0.125B-tokendropping-graduallyIncrease-lr-3.0e-4-baseline.log": "wave-b",
    "v4.0__Supermicro_results_AS-8125GS-TNHR_8_H100-SXM-80GB_resnet_result_0.txt": None,
    "torchtitan_pr1287_dcp_zoc_steps200-250.txt": "wave-a",
    "sft_run_gtx1660.log": "wave-a",
}


def ingest_dated_logs(db: str) -> None:
    for name, tag in LOGS.items():
        args = ["ingest", str(realdata("logs", name)), "--host-lineage", LANE[0], "--preset", LANE[1],
                "--regime", LANE[2], *(["--tag", tag] if tag else [])]
        result = cli(db, *args)
        assert result.exit_code == 0, result.output


def _cell(value) -> str:
    """A query value as the expected CSV writes it: lists ';'-joined, null empty, timestamps ISO with a space."""
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return ";".join(map(str, value))
    if hasattr(value, "isoformat"):
        return value.isoformat(sep=" ", timespec="microseconds")
    return str(value)


def assert_rows_match(rows: list[dict], expected_csv: Path) -> None:
    """Row by row, column by column; numbers within 1e-9 relative (5.0649999999999995 is the hand's 5.065)."""
    with expected_csv.open(newline="") as f:
        expected = list(csv.DictReader(f))
    assert len(rows) == len(expected), (len(rows), len(expected))
    assert list(rows[0]) == list(expected[0]), "the query's columns, in order"
    for i, (got, want) in enumerate(zip(rows, expected)):
        for column, text in want.items():
            value = got[column]
            if isinstance(value, float) and text:
                assert math.isclose(value, float(text), rel_tol=1e-9), (i, column, value, text)
            else:
                assert _cell(value) == text, (i, column, value, text)


def check_store(store) -> None:
    from receipts.analysis.listing import unsummarised

    from receipts.schema.lane import FIELDS, Lane

    lane = {"lane_keys": [Lane(*LANE).key], "tag": None, "last": None, "unsummarised": unsummarised(store)}
    assert_rows_match(store.query_rows("lane_runs", lane), EXPECTED / "lane_runs__dated_logs.csv")
    assert_rows_match(store.query_rows("dash_filter_options", {"fields": list(FIELDS)}), EXPECTED / "dash_filter_options__dated_logs.csv")


def test_lane_runs_and_filter_options_over_real_logs(db):
    ingest_dated_logs(db)
    from receipts.store import open_store

    with open_store(db, read_only=True) as store:
        check_store(store)


def test_the_medians_read_from_steps_are_the_stored_ones(db):
    """A store whose summaries are gone (one stored before them) gives the same rows: run_medians' second path."""
    ingest_dated_logs(db)
    import duckdb

    con = duckdb.connect(db)
    con.execute("DELETE FROM receipt_summaries")
    con.close()
    from receipts.store import open_store

    with open_store(db, read_only=True) as store:
        check_store(store)


@pytest.mark.postgres
def test_the_same_rows_on_postgresql(pg_url):
    assert cli(pg_url, "db", "init").exit_code == 0
    ingest_dated_logs(pg_url)
    from receipts.store import open_store

    with open_store(pg_url, read_only=True) as store:
        check_store(store)
