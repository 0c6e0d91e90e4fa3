"""A receipt's run date is the run's own when its source states one (issue 16: run dates were the ingest date):
a log's timestamps, an nsys export's session start, a PyTorch profiler trace's epoch clock. The lane view and
lane history order and filter by it (coalesce(started_at, ingested_at))."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from datetime import datetime, timezone

from cli_helpers import cli, cli_json
from conftest import GPU_DATA


def _list(db: str) -> dict[str, dict]:
    code, rows = cli_json(db, "list")
    assert code == 0
    return {r["run_name"]: r for r in rows}


def test_an_nsys_export_alone_is_dated_by_its_session_start(db, tmp_path):
    export = tmp_path / "capture.sqlite"
    with gzip.open(GPU_DATA / "fsdp2_2gpu_nsys.sqlite.gz") as src, export.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    (epoch_ns,) = sqlite3.connect(export).execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
    assert cli(db, "ingest", str(export)).exit_code == 0
    started = datetime.fromisoformat(_list(db)["capture"]["started_at"])
    assert started == datetime.fromtimestamp(epoch_ns / 1e9, tz=timezone.utc)
    assert started.year == 2026  # the capture day, not the ingest day


def test_a_profiler_trace_alone_is_dated_by_its_epoch_clock(db):
    traces = GPU_DATA / "fsdp2_2gpu_kineto" / "traces"
    assert cli(db, "ingest", str(traces)).exit_code == 0
    first_us = []
    for path in sorted(traces.iterdir()):
        doc = json.loads(gzip.open(path).read())
        steps = [e["ts"] for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
        first_us.append((doc["baseTimeNanoseconds"], min(steps)))
    expected = min(base / 1e9 + ts / 1e6 for base, ts in first_us)
    started = datetime.fromisoformat(_list(db)["traces"]["started_at"]).timestamp()
    assert abs(started - expected) < 1e-3


def test_a_trace_without_an_epoch_clock_has_no_run_date(db, tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    for path in sorted((GPU_DATA / "fsdp2_2gpu_kineto" / "traces").iterdir()):
        doc = json.loads(gzip.open(path).read())
        del doc["baseTimeNanoseconds"]  # older Kineto: ts is a monotonic clock, not the calendar
        (traces / path.name.removesuffix(".gz")).write_text(json.dumps(doc))
    assert cli(db, "ingest", str(traces)).exit_code == 0
    assert _list(db)["traces"]["started_at"] is None
