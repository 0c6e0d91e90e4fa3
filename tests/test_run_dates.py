"""A receipt's run date is the run's own when its source states one (run dates were the ingest date):
a log's timestamps, an nsys export's session start, a PyTorch profiler trace's epoch clock. The lane view and
lane history order and filter by it (coalesce(started_at, ingested_at))."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from datetime import datetime, timezone

from cli_helpers import cli, cli_json
from conftest import GPU_DATA, realdata, write_native_log


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


# ---- logs: the run's own line timestamps (a logger prefix, DeepSpeed's bracketed stamp, nvidia-smi's banner)

def _ingest_one(db: str, path, *args: str) -> dict:
    assert cli(db, "ingest", str(path), *args).exit_code == 0
    code, rows = cli_json(db, "list")
    assert code == 0
    return next(r for r in rows if r["run_name"] == path.stem)


def test_a_nanochat_log_is_dated_by_its_first_logger_line(db):
    path = realdata("logs/sft_run_gtx1660.log")
    first = path.read_text().splitlines()[0]
    assert first.startswith("2026-03-16 22:57:30,775 - nanochat.common")
    assert _ingest_one(db, path)["started_at"] == "2026-03-16T22:57:30.775000"


def test_a_megatron_deepspeed_log_is_dated_by_its_launcher_line(db):
    # its iteration lines carry no timestamp (Megatron-LM's do); DeepSpeed's launcher opens the log with one
    path = realdata("logs/megatron-deepspeed__gpt3-0.125B-tokendropping-graduallyIncrease-lr-3.0e-4-baseline.log")
    stamped = [ln for ln in path.read_text().splitlines() if ln.startswith("[20")]
    assert stamped[0].startswith("[2022-10-31 10:59:02,323] [INFO] [runner.py")
    assert _ingest_one(db, path)["started_at"] == "2022-10-31T10:59:02.323000"


def test_a_speedrun_log_is_dated_by_nvidia_smi_not_by_a_date_in_its_code_dump(db):
    # The record log opens with the training script's source (with date-like numbers such as 20240520) and
    # prints nvidia-smi's banner when training starts: that banner is the run's date.
    path = realdata("logs/track_1_short_2024-10-09_SOAP__5bdc3988-496c-4232-b4ef-53764cb81c92.txt")
    lines = path.read_text().splitlines()
    banner = next(i for i, ln in enumerate(lines) if ln.strip() == "Wed Oct  9 18:10:50 2024")
    assert any("20240520" in ln for ln in lines[:banner])
    assert _ingest_one(db, path)["started_at"] == "2024-10-09T18:10:50"


def test_a_log_without_timestamps_keeps_no_run_date_and_mid_line_dates_do_not_count(db, tmp_path):
    assert _ingest_one(db, realdata("logs/nanochat_pr147_a100_mfu.txt"))["started_at"] is None
    src = realdata("logs/sft_run_gtx1660.log").read_text().splitlines()
    body = [ln for ln in src if not ln[:4].isdigit()]  # drop every logger line: only step lines and noise remain
    quoted = tmp_path / "quoted.log"
    quoted.write_text("\n".join(['print("resumed from the checkpoint of 2021-01-01 00:00:00")', *body]) + "\n")
    assert _ingest_one(db, quoted)["started_at"] is None


def test_lane_history_orders_logs_by_their_own_dates_not_by_ingest_order(db):
    # Yarn (2025-09-11) ingested before SOAP (2024-10-09): the history still reads SOAP first.
    lane = ("--host-lineage", "speedrun-8xh100", "--preset", "gpt2-124m", "--regime", "ddp/full-compile")
    yarn = realdata("logs/track_1_short_2025-09-10_Yarn__ef66c943-e262-400f-822f-068d397a1dc9.txt")
    soap = realdata("logs/track_1_short_2024-10-09_SOAP__5bdc3988-496c-4232-b4ef-53764cb81c92.txt")
    _ingest_one(db, yarn, *lane)
    _ingest_one(db, soap, *lane)
    code, out = cli_json(db, "history", "speedrun-8xh100 gpt2-124m ddp/full-compile")
    assert code == 0
    assert [r["run_name"] for r in out["runs"]] == [soap.stem, yarn.stem]
    assert [r["run_date"][:10] for r in out["runs"]] == ["2024-10-09", "2025-09-11"]
    assert {r["run_date_source"] for r in out["runs"]} == {"header"}


# ---- one run-date rule for every query (sql/_macros.sql: run_date) ------------------------------------------
def _run_date_everywhere(store, lane: tuple[str, str, str], tag: str) -> dict[str, object]:
    """The run date each query that reads one gives for the store's only receipt."""
    from receipts.analysis.listing import unsummarised
    from receipts.schema.lane import FIELDS, Lane

    todo = unsummarised(store)
    filters = {"lane_filter": None, "tag": None, "since": None, "until": None,
               "search": None, "unsummarised": todo}
    options = store.query("dash_filter_options", {"fields": list(FIELDS)}).filter(kind="date")["value"].to_list()
    return {
        "dash_lanes": store.query("dash_lanes", filters)["run_at"][0],
        "lane_runs": store.query("lane_runs", {"lane_keys": [Lane(*lane).key], "tag": None, "last": None,
                                               "unsummarised": todo})["run_date"][0],
        "lane_history": store.query("lane_history", {"lane_key": Lane(*lane).key, "unsummarised": todo})["run_at"][0],
        "tagged_receipts": store.query("tagged_receipts", {"tag": tag})["run_date"][0],
        "dash_filter_options": options[0],
    }


def test_every_query_reads_a_header_time_with_an_offset_as_the_same_utc_instant(db, tmp_path):
    # A RECEIPT header written by a launcher that stamps local time with its offset (isoformat() of an aware
    # datetime): 10:00 at +02:00 is 08:00 UTC. Two spellings of the rule read 10:00 and 08:00 here.
    log = write_native_log(tmp_path / "offset.log", [100.0, 101.0, 99.0, 100.5])
    lines = log.read_text().splitlines()
    header = json.loads(lines[1].removeprefix("RECEIPT "))
    lines[1] = "RECEIPT " + json.dumps({**header, "started_at": "2026-03-16T01:30:00+02:00"})
    log.write_text("\n".join(lines) + "\n")
    assert cli(db, "ingest", str(log), "--tag", "t").exit_code == 0
    from receipts.store import open_store

    with open_store(db, read_only=True) as store:
        got = _run_date_everywhere(store, ("h200-usw1c-bench-01", "nam52_h200_dense_ref_v1",
                                           "fsdp2/regional-compile"), "t")
    expected = datetime(2026, 3, 15, 23, 30)
    assert {k: v for k, v in got.items() if k != "dash_filter_options"} == {
        k: expected for k in got if k != "dash_filter_options"}
    assert got["dash_filter_options"] == "2026-03-15"


def test_a_time_without_an_offset_is_taken_as_written_whatever_the_readers_time_zone(db):
    # nanochat's logger stamps local time without an offset: the run date is that time as written, never
    # shifted by the time zone of the process reading the store.
    path = realdata("logs/sft_run_gtx1660.log")
    assert cli(db, "ingest", str(path), "--host-lineage", "h", "--preset", "p", "--regime", "ddp/none",
               "--tag", "t").exit_code == 0
    from receipts.store import open_store

    with open_store(db, read_only=True) as store:
        store.con.execute("SET TimeZone = 'Asia/Tokyo'")
        lane = tuple(store.sql("SELECT host_lineage, preset_family, launch_regime FROM receipts").row(0))
        got = _run_date_everywhere(store, lane, "t")
    expected = datetime(2026, 3, 16, 22, 57, 30, 775000)   # its first logger line: 2026-03-16 22:57:30,775
    assert {k: v for k, v in got.items() if k != "dash_filter_options"} == {
        k: expected for k in got if k != "dash_filter_options"}
    assert got["dash_filter_options"] == "2026-03-16"
