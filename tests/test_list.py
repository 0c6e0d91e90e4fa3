"""`receipts list`: its JSON equals what an independent read of the stored tables gives, on a store with real
receipts and the edge cases (a rumor with null identity fields, a run without memory peaks, an MLPerf result
counted in epochs with its time to train, tags, a superseded receipt, one stored before summaries existed).

The expected rows come from the tables read with DuckDB's client directly and the steady-state numbers from
the step rows (a step's time is its slowest rank's; the median of the steady steps), never from
analysis/listing.py or sql/list_receipts.sql. `list --json` runs as a subprocess, as scripts and CI run it:
the lean path that imports neither polars nor numpy (tests/test_lean_imports.py checks that)."""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from tests.cli_helpers import cli, cli_json
from tests.conftest import GPU_DATA, REPO, write_native_log

RETINANET = REPO / "tests" / "data" / "mlperf" / "v5.1__Dell_1xXE9680x8H200-SXM-141GB_retinanet_result_0.txt"
KEYS = ["id", "run_name", "identity", "machine_class", "source_format", "tags", "n_steady_steps", "median_step_ms",
        "series_unit", "time_to_train_s", "peak_allocated_bytes", "peak_reserved_bytes", "ended_early", "started_at",
        "ingested_at", "superseded_by"]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    tmp = tmp_path_factory.mktemp("list")
    db = str(tmp / "l.duckdb")
    first, second = (write_native_log(tmp / f"grow_{n}.log", [100.0 + i for i in range(n)]) for n in (6, 11))
    for path in (first, second):  # one run (its header's run_id) ingested twice: the second supersedes the first
        path.write_text(path.read_text().replace('"kind": "header",', '"kind": "header", "run_id": "job-7",'))
    ingests = [
        [str(GPU_DATA / "fsdp2_2gpu_nsys" / "run.log"), "--tag", "v19c", "--tag", "main"],   # 2 ranks, real
        [str(RETINANET), "--host-lineage", "dell-xe9680-h200", "--preset", "mlperf_retinanet",
         "--regime", "ddp/unknown-compile"],
        [str(write_native_log(tmp / "rumor.log", [90.0, 91.0, 95.0, 92.0], host_lineage=None, regime=None))],
        [str(write_native_log(tmp / "no_peaks.log", [120.0, 118.0, 119.5], footer=False))],
        [str(write_native_log(tmp / "summary_gone.log", [80.0, 82.5, 81.0, 79.0, 83.0, 80.5]))],
        [str(first)], [str(second)],
    ]
    for args in ingests:
        assert cli(db, "ingest", *args).exit_code == 0, args
    con = duckdb.connect(db)
    try:  # a receipt stored before schema 6: list summarises it from its step rows
        con.execute("DELETE FROM receipt_summaries WHERE receipt_id IN "
                    "(SELECT id FROM receipts WHERE run_name = 'summary_gone')")
    finally:
        con.close()
    return db


def expected(db: str, *, superseded: bool) -> list[dict]:
    con = duckdb.connect(db, read_only=True)
    try:
        cur = con.execute("SELECT * FROM receipts")
        names = [d[0] for d in cur.description]
        receipts = [dict(zip(names, row)) for row in cur.fetchall()]
        steps = con.execute("SELECT receipt_id, step, step_ms FROM receipt_steps "
                            "WHERE NOT warmup AND step_ms IS NOT NULL").fetchall()
    finally:
        con.close()
    slowest: dict[tuple[str, int], float] = {}
    for rid, step, ms in steps:
        slowest[rid, step] = max(ms, slowest.get((rid, step), ms))
    per_receipt: dict[str, list[float]] = {}
    for (rid, _), ms in slowest.items():
        per_receipt.setdefault(rid, []).append(ms)
    out = []
    for r in receipts:
        if r["superseded_by"] and not superseded:
            continue
        provenance = json.loads(r["provenance_json"] or "{}")
        ttt_ms = provenance.get("time_to_train_ms")
        steady = per_receipt.get(r["id"], [])
        out.append({
            "id": r["id"], "run_name": r["run_name"],
            "identity": {"host_lineage": r["host_lineage"], "preset_family": r["preset_family"],
                         "launch_regime": r["launch_regime"], "complete": r["identity_complete"]},
            "machine_class": r["machine_class"], "source_format": r["source_format"],
            "tags": json.loads(r["tags_json"]), "n_steady_steps": len(steady),
            "median_step_ms": statistics.median(steady) if steady else None,
            "series_unit": provenance.get("step_unit") or "step",
            "time_to_train_s": ttt_ms / 1000.0 if isinstance(ttt_ms, (int, float)) else None,
            "peak_allocated_bytes": r["peak_allocated_bytes"], "peak_reserved_bytes": r["peak_reserved_bytes"],
            "ended_early": r["ended_early"], "started_at": r["started_at"], "ingested_at": r["ingested_at"],
            "superseded_by": r["superseded_by"]})
    out.sort(key=lambda r: r["id"])
    out.sort(key=lambda r: r["ingested_at"], reverse=True)  # newest first, ties by id
    return out


def listed(db: str, *args: str) -> list[dict]:
    done = subprocess.run([sys.executable, "-m", "receipts.cli.main", "--db", db, "list", "--json", *args],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_store_holds_every_edge_case(store):
    rows = {r["run_name"]: r for r in expected(store, superseded=True)}
    assert rows["rumor"]["identity"]["complete"] is False and rows["rumor"]["identity"]["launch_regime"] is None
    assert rows["no_peaks"]["peak_allocated_bytes"] is None
    assert rows[RETINANET.stem]["series_unit"] == "epoch" and rows[RETINANET.stem]["time_to_train_s"] > 0
    assert rows["fsdp2_2gpu_nsys"]["tags"] == ["main", "v19c"]
    assert sum(1 for r in rows.values() if r["superseded_by"]) == 1
    con = duckdb.connect(store, read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM receipts WHERE id NOT IN (SELECT receipt_id FROM receipt_summaries)"
                           ).fetchone() == (1,)
    finally:
        con.close()


@pytest.mark.parametrize("args", [(), ("--all",)], ids=["current", "all"])
def test_list_json_is_the_tables_read_independently(store, args):
    got = listed(store, *args)
    assert got == expected(store, superseded=bool(args))
    assert all(list(r) == KEYS for r in got)  # the keys in their order, not only their values


def test_lane_and_limit_select_from_the_same_rows(store):
    everything = expected(store, superseded=False)
    assert listed(store, "--lane", "h200") == [
        r for r in everything if any("h200" in (r["identity"][k] or "")
                                     for k in ("host_lineage", "preset_family", "launch_regime"))]
    assert listed(store, "--limit", "2") == everything[:2]


def test_the_table_shows_the_same_receipts(store):
    done = subprocess.run([sys.executable, "-m", "receipts.cli.main", "--db", store, "list", "--all", "--format", "table"],
                          capture_output=True, text=True, cwd=REPO, timeout=120, env={**os.environ, "COLUMNS": "300"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "7 receipts (1 superseded, marked in the last column)"
    rows = [line.split()[0] for line in lines if re.match(r"\s*[0-9a-f]{12}\s", line)]
    assert rows == [r["id"][:12] for r in expected(store, superseded=True)]
    assert "(rumor)" in done.stdout and "epochs" in done.stdout and "time to train" in done.stdout
    assert cli_json(store, "list")[1] == expected(store, superseded=False)  # in-process, as the dashboard's tests run it


def test_an_empty_store_lists_nothing(tmp_path):
    db = str(tmp_path / "empty.duckdb")
    assert cli(db, "db", "init").exit_code == 0
    assert listed(db) == [] and Path(db).exists()
