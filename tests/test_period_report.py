"""`receipts report --since`: on the bundled demo data (the H100 noise lane of 2026-11-23, the H200 explain and
memory runs of 2026-11-27, demo/run.sh's registry), per lane the period's change points with their commits, its runs
slower than tag:main, and the lanes that stopped receiving runs, each with its dashboard link; markdown and JSON."""

from __future__ import annotations

import json

import pytest

from receipts.analysis.period_report import parse_since
from tests.cli_helpers import cli
from tests.conftest import REPO

DATA = REPO / "tests" / "data"
NOISE_LANE = "h100-device-x1 · toy_fsdp2_v1 · fsdp2/no-compile"
EXPLAIN_LANE = "h200-device-x2 · toy_fsdp2_v1 · fsdp2/no-compile"


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> str:
    db = str(tmp_path_factory.mktemp("report") / "demo.duckdb")
    logs = [*sorted((DATA / "noise").glob("*/run.log")),
            *(DATA / "explain" / n / "run.log" for n in ("base_1", "base_2", "base_3", "base_4", "base_5", "attn_1")),
            DATA / "memory" / "adamw_2gpu" / "run.log"]
    done = cli(db, "--registry", str(DATA / "registry.toml"), "ingest", *map(str, logs))
    assert done.exit_code == 0, done.stderr
    return db


def report(db: str, *args: str) -> dict:
    done = cli(db, "--registry", str(DATA / "registry.toml"), "report", "--until", "2026-11-28", *args, "--json")
    assert done.exit_code == 0, done.stderr
    return json.loads(done.stdout)


def _lanes(out: dict) -> dict:
    return {" · ".join(lane["lane"].values()): lane for lane in out["lanes"]}


@pytest.mark.slow  # 23 real logs ingested
def test_a_week_names_the_change_point_the_regressions_and_their_links(demo):
    out = report(demo, "--since", "7d")
    lanes = _lanes(out)
    assert out["since"] == "2026-11-21T00:00:00Z" and set(lanes) == {NOISE_LANE, EXPLAIN_LANE}
    (point,) = lanes[NOISE_LANE]["change_points"]  # the planted 2.5% slowdown starts at slow_1
    assert point["run_name"] == "slow_1" and point["change_pct"] > 2
    assert "ran the same commit 38bd803b793c" in point["commits"]["note"]
    assert point["link"].startswith("?view=compare&a=") and point["link"].endswith(f"&b={point['id']}")
    slower = {g["run_name"] for g in lanes[NOISE_LANE]["regressions"]}
    assert slower == {"slow_1", "slow_2", "slow_3"}  # subfloor_1/2 are within the noise: not listed
    assert {g["run_name"] for g in lanes[EXPLAIN_LANE]["regressions"]} == {"attn_1", "adamw_2gpu"}
    assert lanes[EXPLAIN_LANE]["link"] == \
        "?view=history&host=h200-device-x2&preset=toy_fsdp2_v1&regime=fsdp2%2Fno-compile"
    assert out["summary"] == {"lanes": 2, "change_points": 1, "regressions": 5, "stopped": 0}


@pytest.mark.slow
def test_a_lane_that_stopped_receiving_runs_is_missing_data(demo):
    out = report(demo, "--since", "3d", "--dashboard-url", "https://dash.example/")
    lanes = _lanes(out)
    noise = lanes[NOISE_LANE]
    assert noise["stopped"] and noise["runs_in_period"] == 0 and noise["last_run"] == "slow_3"
    assert noise["link"].startswith("https://dash.example/?view=history&host=h100-device-x1")
    assert not lanes[EXPLAIN_LANE]["stopped"] and lanes[EXPLAIN_LANE]["runs_in_period"] == 7
    md = cli(demo, "--registry", str(DATA / "registry.toml"), "report", "--since", "3d", "--until", "2026-11-28").stdout
    assert md.startswith("<!-- receipts-report -->\n### receipts report 2026-11-25 .. 2026-11-28")
    assert "- **stopped receiving runs**: none in this period, the last slow_3" in md
    assert "- **slower** [attn_1](?view=compare&a=" in md


def test_the_period_reads_spans_and_dates():
    from datetime import datetime, timezone

    end = datetime(2026, 11, 28, tzinfo=timezone.utc)
    assert parse_since("7d", until=end) == datetime(2026, 11, 21, tzinfo=timezone.utc)
    assert parse_since("36h", until=end) == datetime(2026, 11, 26, 12, tzinfo=timezone.utc)
    assert parse_since("2026-11-20", until=end) == datetime(2026, 11, 20, tzinfo=timezone.utc)
    with pytest.raises(Exception, match="expected a span"):
        parse_since("last tuesday", until=end)
