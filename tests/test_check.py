"""`receipts check RUN... --against tag:main`, end to end through the CLI.

Two layers. The real runs in tests/data/noise (ten A/A runs of one configuration on one H100, two with a
planted slowdown under the noise floor, three with a planted 2.5% slowdown; README.md there) are the
point: every A/A run passes against the others, every 2.5% slowdown is `slower`, the sub-floor ones are
never `faster`. Native logs written here cover what real data does not have on demand: an outlier
baseline run, a lane without a baseline, a rumor, hostile run names in the comment.
"""

from __future__ import annotations

import json
import re
import statistics
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import cli
from conftest import drop_test_database, write_native_log

REPO = Path(__file__).resolve().parents[1]
NOISE = REPO / "tests" / "data" / "noise"
MARKER = "<!-- receipts-check -->"


def check(db: str, *args: str, env: dict | None = None):
    """(exit code, parsed --json) of `receipts check ... --json`."""
    from typer.testing import CliRunner

    from receipts.cli.main import app

    result = CliRunner().invoke(app, ["--db", db, "check", *args, "--json"], env=env, catch_exceptions=False)
    assert result.exit_code in (0, 1, 3), result.stdout + result.stderr
    return result.exit_code, json.loads(result.stdout)


def ingest(db: str, *paths: Path, flags: tuple[str, ...] = ()) -> None:
    result = cli(db, "ingest", *map(str, paths), *flags)
    assert result.exit_code == 0, result.stdout + result.stderr


def by_run(out: dict) -> dict[str, dict]:
    return {r["run"]: r for r in out["results"]}


# ------------------------------------------------------------------------- real runs on one H100
def _log_median(run: str) -> float:
    """Hand count: median step_ms over steps >= 3 of the RECEIPT step lines (step 0 compiles, 1-2 warm up)."""
    ms = [json.loads(line[8:])["step_ms"] for line in (NOISE / run / "run.log").read_text().splitlines()
          if line.startswith('RECEIPT {"v":1,"kind":"step"') and json.loads(line[8:])["step"] >= 3]
    return float(np.median(ms))


def test_real_planted_slowdowns_are_slower_against_main(noise_db):
    # All ten main runs as the baseline: against the five most recent (which ran ~0.4% slow) the planted
    # 2.54% reads +2.07..2.25%, under what 5 runs and a 0.75% floor resolve at <= 5% false alarms
    # (analysis/verdict.py; tests/test_verdicts.py), so those are `inconclusive`, never `faster`.
    code, out = check(noise_db, "tag:pr-slow", "--against", "tag:main", "--last", "10")
    runs = by_run(out)
    assert code == 1 and out["passed"] is False
    assert sorted(runs) == ["slow_1", "slow_2", "slow_3"]
    aa = sorted(p.name for p in NOISE.glob("aa_*"))
    for name, r in runs.items():
        assert r["verdict"] == "slower", (name, r["why"])
        assert r["ratio"]["ci_low"] > 1.0 and 1.015 < r["ratio"]["value"] < 1.04  # planted: 2.54% of a step
        base = r["baseline"]
        assert base["run_names"] == aa  # the ten main runs, in run order
        assert base["median_step_ms"] == pytest.approx(statistics.median(_log_median(a) for a in aa), rel=1e-3)
        assert r["median_step_ms"] == pytest.approx(_log_median(name), rel=1e-3)
        assert base["noise_floor"]["source"] == "lane" and base["noise_floor"]["n_runs"] == 10
        assert 0.1 < base["noise_floor_pct"] < 1.5 and base["excluded"] == []


def test_real_sub_floor_slowdowns_are_never_faster_and_pass(noise_db):
    code, out = check(noise_db, "tag:pr-subfloor", "--against", "tag:main", "--last", "10")
    assert code == 0 and out["passed"] is True
    for r in out["results"]:
        assert r["verdict"] in ("no change", "inconclusive"), r["why"]
        assert len(r["baseline"]["runs"]) == 10


@pytest.mark.parametrize("last", [3, 5, 9])
def test_real_every_aa_run_passes_against_the_other_main_runs(noise_db, last):
    """A/A: each unchanged run, checked against main, is never slower (nor faster); it is its own baseline never."""
    names = [f"aa_{i:02d}" for i in range(1, 11)]
    for name in names:
        code, out = check(noise_db, name, "--against", "tag:main", "--last", str(last))
        r = out["results"][0]
        assert code == 0 and r["verdict"] in ("no change", "inconclusive"), (name, r["why"])
        assert name not in r["baseline"]["run_names"] and len(r["baseline"]["run_names"]) == last


def test_real_markdown_comment_and_step_summary(noise_db, tmp_path):
    comment, summary = tmp_path / "comment.md", tmp_path / "summary.md"
    summary.write_text("earlier step output\n")
    code, _ = check(noise_db, "slow_1", "aa_10", "--against", "tag:main", "--last", "9", "--each",
                    "--markdown", str(comment), env={"GITHUB_STEP_SUMMARY": str(summary)})
    body = comment.read_text()
    assert code == 1 and body.splitlines()[0] == MARKER
    assert "1 of 2 run(s) slower than tag:main" in body.splitlines()[1]
    # the lane, its baseline and its noise floor stated once, for both runs
    assert body.count("**lane** h100-device-x1 · toy_fsdp2_v1 · fsdp2/no-compile · **baseline** 9 run(s) tagged "
                      "`main`, median ") == 1
    # aa_10 is a candidate too, so the baseline does not include it
    assert body.count("9 run(s) tagged 'main': aa_01, aa_02, aa_03, aa_04, aa_05, aa_06, aa_07, aa_08, aa_09, "
                      "median ") == 1
    assert "| slow_1 | :x: slower | +" in body and "| aa_10 | " in body
    assert body.count("drift: none") == 2 and "<details><summary>Per-run details</summary>" in body
    assert summary.read_text() == "earlier step output\n" + body + "\n"  # appended, never overwritten


def test_real_pr_of_three_repeats_is_pooled_in_a_short_comment(noise_db, tmp_path):
    """The PR comment a reviewer reads in ten seconds: 3 repeats of a 2.5% slowdown, one summary table, the
    pooled verdict deciding, at most 30 lines; `--json` carries it as `pooled`."""
    comment = tmp_path / "pr.md"
    code, out = check(noise_db, "tag:pr-slow", "--against", "tag:main", "--last", "10", "--markdown", str(comment))
    body = comment.read_text()
    assert code == 1 and out["judged"] == "pooled"
    assert out["pooled"]["verdict"] == "slower" and sorted(out["pooled"]["runs"]) == sorted(r["id"] for r in out["results"])
    lane = out["pooled"]["lanes"][0]
    assert lane["run_names"] == [r["run"] for r in out["results"]] and 1.015 < lane["ratio"]["value"] < 1.04
    # the pool is the median of the three run medians against the same baseline
    assert lane["median_step_ms"] == pytest.approx(statistics.median(r["median_step_ms"] for r in out["results"]))
    assert lane["baseline"]["median_step_ms"] == out["results"][0]["baseline"]["median_step_ms"]
    # three runs resolve a smaller change than one: the pooled interval is narrower than any run's own
    width = lane["ratio"]["ci_high"] - lane["ratio"]["ci_low"]
    assert all(width < r["ratio"]["ci_high"] - r["ratio"]["ci_low"] for r in out["results"])
    lines = body.splitlines()
    assert len(lines) <= 30, body
    assert lines[1].startswith("### receipts check: slower than tag:main beyond the noise (3 run(s) pooled, +")
    assert body.count("**lane**") == 1 and body.count("**noise floor**") == 1
    assert "| **3 run(s) pooled** (decides) | :x: **slower** |" in body
    assert all(f"| slow_{i} | :x: slower |" in body for i in (1, 2, 3))
    assert body.index("<details>") > body.index("| slow_3 |") and "</details>" in body


def test_real_one_noisy_repeat_does_not_decide_the_pr_alone(noise_db):
    """A PR whose three repeats are one slow run and two unchanged ones: judged alone, the slow one fails the
    check (--each); pooled, the PR's runs are not slower beyond the noise."""
    code, out = check(noise_db, "slow_1", "aa_09", "aa_10", "--against", "tag:main", "--last", "8")
    assert [r["verdict"] for r in out["results"]][0] == "slower"
    assert code == 0 and out["passed"] and out["pooled"]["verdict"] in ("no change", "inconclusive")
    code, out = check(noise_db, "slow_1", "aa_09", "aa_10", "--against", "tag:main", "--last", "8", "--each")
    assert code == 1 and out["judged"] == "each" and not out["passed"]


# ------------------------------------------------------------------------- native logs: each rule
LANE = dict(host_lineage="h200-usw1c-bench-01", preset="nam52_h200_dense_ref_v1", regime="fsdp2/regional-compile")


_CLOCK = iter(range(10**6))


def run_log(folder: Path, name: str, median_ms: float, seed: int, **kw) -> Path:
    """A native log whose header carries a start time one minute after the previous log's, so run order
    (which `--last` counts back from) is the order the test writes them in."""
    steps = list(np.random.default_rng(seed).normal(median_ms, median_ms * 0.004, 80))
    path = write_native_log(folder / f"{name}.log", steps, **kw)
    lines = path.read_text().splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("RECEIPT ") and '"kind": "header"' in ln)
    header = json.loads(lines[i][8:])
    minute = next(_CLOCK)
    header["started_at"] = f"2026-11-{1 + minute // 1440:02d}T{minute // 60 % 24:02d}:{minute % 60:02d}:00+00:00"
    lines[i] = "RECEIPT " + json.dumps(header)
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def lane(tmp_path, db):
    """Five main runs at 100 ms (run-to-run noise ~0.3%) and one throttled main run at 130 ms."""
    offsets = [0.0, 0.3, -0.2, 0.1, -0.3]
    for i, off in enumerate(offsets):
        ingest(db, run_log(tmp_path, f"main_{i}", 100.0 + off, i), flags=("--tag", "main"))
    ingest(db, run_log(tmp_path, "main_throttled", 130.0, 99), flags=("--tag", "main"))
    return db


def test_one_outlier_baseline_run_is_excluded_and_named(tmp_path, lane):
    ingest(lane, run_log(tmp_path, "same", 100.05, 7), run_log(tmp_path, "slow", 106.0, 8), flags=("--tag", "pr-1"))
    code, out = check(lane, "tag:pr-1", "--against", "tag:main", "--last", "6")
    runs = by_run(out)
    assert code == 1
    for r in runs.values():
        base = r["baseline"]
        assert [e["run_name"] for e in base["excluded"]] == ["main_throttled"]
        assert "outlier: median 130.0" in base["excluded"][0]["why"] and "robust z-scores" in base["excluded"][0]["why"]
        assert len(base["runs"]) == 5 and base["median_step_ms"] == pytest.approx(100.0, rel=0.005)
    assert runs["slow"]["verdict"] == "slower" and runs["same"]["verdict"] in ("no change", "inconclusive")


def test_the_baseline_is_the_most_recent_n_of_the_tag_in_the_candidates_lane(tmp_path, lane):
    ingest(lane, run_log(tmp_path, "elsewhere", 50.0, 11, regime="ddp/full-compile"), flags=("--tag", "main"))
    ingest(lane, run_log(tmp_path, "untagged", 120.0, 12))
    ingest(lane, run_log(tmp_path, "cand", 100.0, 13))
    code, out = check(lane, "cand", "--against", "tag:main", "--last", "3")
    r = out["results"][0]
    # the three most recent main runs of the lane; the throttled one of them is an outlier
    assert r["baseline"]["run_names"] == ["main_3", "main_4"]
    assert [e["run_name"] for e in r["baseline"]["excluded"]] == ["main_throttled"]
    assert "elsewhere" not in r["baseline"]["run_names"] and "untagged" not in r["baseline"]["run_names"]
    assert r["lane"] == {"host_lineage": LANE["host_lineage"], "preset_family": LANE["preset"],
                         "launch_regime": LANE["regime"]}


@pytest.mark.slow
def test_the_headline_says_which_way_an_inconclusive_result_is_unsettled(tmp_path, db):
    """+0.8% whose interval excludes no change is beyond the noise but under the 1% minimum effect; a change whose
    interval holds no change is within the noise. The headline, the comment's table and --json say which."""
    lane = db  # a quiet lane: ten main runs within +-0.15%
    ingest(lane, *(run_log(tmp_path, f"main_{i}", 100.0 + off, i)
                   for i, off in enumerate((0.0, 0.1, -0.1, 0.05, -0.05, 0.15, -0.15, 0.0, 0.1, -0.1))),
           flags=("--tag", "main"))
    ingest(lane, *(run_log(tmp_path, f"small_{i}", 100.0 + off, 20 + i) for i, off in enumerate((0.8, 0.75, 0.85))),
           flags=("--tag", "pr-small"))
    comment = tmp_path / "pr.md"
    code, out = check(lane, "tag:pr-small", "--against", "tag:main", "--last", "10", "--markdown", str(comment))
    pool = out["pooled"]["lanes"][0]
    assert code == 0 and pool["verdict"] == "inconclusive" and 1.0 < pool["ratio"]["ci_low"] < pool["ratio"]["value"] < 1.01
    said = "inconclusive against tag:main: beyond the noise, under the 1% minimum effect (3 run(s) pooled, +0."
    assert pool["reading"] == "beyond the noise, under the 1% minimum effect" and out["headline"].startswith(said)
    assert "within the noise" not in comment.read_text() and f"### receipts check: {said}" in comment.read_text()
    assert "| **3 run(s) pooled** (decides) | :grey_question: **inconclusive** (beyond the noise, under the 1% minimum effect)" \
        in comment.read_text()
    # a lane of two runs (the default 1.5% floor): +0.5% is within the noise; the each-mode tally says so
    other = {"regime": "ddp/full-compile"}
    ingest(lane, run_log(tmp_path, "m1", 100.0, 31, **other), run_log(tmp_path, "m2", 100.1, 32, **other),
           flags=("--tag", "main"))
    ingest(lane, run_log(tmp_path, "half", 100.5, 33, **other))
    code, out = check(lane, "half", "--against", "tag:main", "--each")
    assert out["results"][0]["reading"] == "within the noise" and out["results"][0]["ratio"]["ci_low"] < 1.0
    assert out["headline"] == "no run slower than tag:main (1 checked: 1 inconclusive (within the noise))"


def test_a_lane_without_the_tag_exits_3_naming_the_lane_and_the_fix(tmp_path, db):
    ingest(db, run_log(tmp_path, "lonely", 100.0, 1), flags=("--tag", "pr-2"))
    code, out = check(db, "lonely", "--against", "tag:main")
    r = out["results"][0]
    assert code == 3 and out["passed"] is True and r["outcome"] == "no_baseline" and r["verdict"] is None
    assert "no baseline in lane h200-usw1c-bench-01 · nam52_h200_dense_ref_v1 · fsdp2/regional-compile" in r["why"]
    assert "receipts ingest run.log --tag main" in r["why"]
    text = cli(db, "check", "lonely", "--against", "tag:main")
    assert text.exit_code == 3 and "NO BASELINE lonely" in text.stdout


def test_a_rumor_has_no_lane_and_exits_3(tmp_path, lane):
    ingest(lane, run_log(tmp_path, "rumor", 100.0, 3, preset=None))
    code, out = check(lane, "rumor", "--against", "tag:main")
    r = out["results"][0]
    assert code == 3 and r["outcome"] == "rumor" and r["lane"] is None
    assert "lacks preset_family" in r["why"] and "receipts retag rumor --preset ... --why" in r["why"]


def test_a_slower_run_wins_over_a_missing_baseline_in_the_exit_code(tmp_path, lane):
    ingest(lane, run_log(tmp_path, "slow", 108.0, 21), run_log(tmp_path, "rumor", 100.0, 22, preset=None))
    code, out = check(lane, "slow", "rumor", "--against", "tag:main")
    assert code == 1 and [r["outcome"] for r in out["results"]] == ["judged", "rumor"]


def test_a_candidate_that_carries_the_tag_is_not_its_own_baseline(tmp_path, lane):
    code, out = check(lane, "main_4", "--against", "tag:main", "--last", "5")
    r = out["results"][0]
    assert r["baseline"]["run_names"] == ["main_0", "main_1", "main_2", "main_3"]  # main_throttled: outlier


def test_errors_exit_2_in_one_line(tmp_path, lane):
    for args, words in ((["main_0", "--against", "main"], "expected tag:NAME"),
                        (["nope", "--against", "tag:main"], "no receipt matches 'nope'"),
                        (["tag:never", "--against", "tag:main"], "no current receipt carries the tag 'never'")):
        result = cli(lane, "check", *args)
        assert result.exit_code == 2 and words in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert cli(lane, "check", "main_0", "--against", "tag:main", "--last", "0").exit_code == 2


def test_junit_github_and_a_hostile_run_name_in_the_comment(tmp_path, lane):
    ingest(lane, run_log(tmp_path, "x", 109.0, 31), flags=("--run-name", "a|b <script>alert(1)</script>"))
    ingest(lane, run_log(tmp_path, "lonely", 100.0, 32, regime="ddp/full-compile"))
    comment, junit = tmp_path / "c.md", tmp_path / "check.xml"
    result = cli(lane, "check", "a|b <script>alert(1)</script>", "lonely", "--against", "tag:main",
                 "--markdown", str(comment), "--junit", str(junit), "--github")
    assert result.exit_code == 1
    body = comment.read_text()
    assert "<script>" not in body and "a\\|b &lt;script&gt;" in body and body.startswith(MARKER + "\n")
    suite = ET.parse(junit).getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "1")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert cases["1 run(s) pooled"].find("failure").get("type") == "slower"
    assert cases["a|b <script>alert(1)</script>"].find("system-out").text.startswith("slower: ")
    assert cases["lonely"].find("error").get("type") == "no_baseline"
    notes = [ln for ln in result.stdout.splitlines() if ln.startswith("::")]
    assert len(notes) == 3 and notes[0].startswith("::error title=receipts check%3A 1 run(s) pooled slower::")
    assert notes[1].startswith("::warning title=receipts check%3A a|b")
    assert notes[2].startswith("::error title=receipts check%3A lonely no baseline::")
    assert re.search(r"%0A|\n", notes[1].split("::", 2)[2]) is None
    each = cli(lane, "check", "a|b <script>alert(1)</script>", "lonely", "--against", "tag:main", "--each",
               "--junit", str(junit), "--github")
    suite = ET.parse(junit).getroot()
    assert each.exit_code == 1 and (suite.get("tests"), suite.get("failures")) == ("2", "1")
    assert [ln for ln in each.stdout.splitlines() if ln.startswith("::")][0].startswith("::error title=receipts check%3A a|b")


# ------------------------------------------------------------------------- the team store (PostgreSQL)
@pytest.fixture
def pg_db():
    """A fresh database on the server named by RECEIPTS_TEST_PG (.ci/postgres_setup.sh prints it)."""
    import os
    import uuid

    psycopg = pytest.importorskip("psycopg")
    from psycopg.conninfo import conninfo_to_dict

    url = os.environ.get("RECEIPTS_TEST_PG", "postgresql://receipts:receipts@127.0.0.1:5432/receipts_test")
    try:
        admin = psycopg.connect(url, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        if os.environ.get("RECEIPTS_REQUIRE_POSTGRES"):
            pytest.fail(f"no PostgreSQL at {url}: {exc}")
        pytest.skip(f"no PostgreSQL at {url}")
    name = f"receipts_check_{uuid.uuid4().hex[:8]}"
    admin.execute(f'CREATE DATABASE "{name}"')
    p = conninfo_to_dict(url)
    auth = p.get("user", "") + (f":{p['password']}" if p.get("password") else "")
    yield f"postgresql://{auth}@{p.get('host', '127.0.0.1')}:{p.get('port', 5432)}/{name}"
    drop_test_database(admin, name)
    admin.close()


@pytest.mark.postgres
def test_check_on_the_team_store_and_on_a_local_copy_of_it_agree(pg_db, tmp_path):
    """The recipe's two baselines: check against the PostgreSQL store itself, and against the DuckDB copy
    the gate job makes of it (`receipts --db TEAM push --to store.duckdb`), give the same answers."""
    if not NOISE.exists():
        pytest.skip("tests/data/noise not present")
    assert cli(pg_db, "db", "init").exit_code == 0                # the owner creates the schema; ingest never does
    ingest(pg_db, *sorted(NOISE.glob("aa_*/run.log")), *sorted(NOISE.glob("slow_*/run.log")))
    copy = str(tmp_path / "store.duckdb")
    assert cli(pg_db, "push", "--to", copy).exit_code == 0
    answers = []
    for db in (pg_db, copy):
        code, out = check(db, "tag:pr-slow", "aa_10", "--against", "tag:main", "--last", "9")
        answers.append((code, [(r["run"], r["verdict"], round(r["ratio"]["value"], 6), r["baseline"]["run_names"])
                               for r in out["results"]]))
    assert answers[0] == answers[1]
    code, results = answers[0]
    assert code == 1 and [v for _, v, _, _ in results[:3]] == ["slower"] * 3
    assert results[3][1] in ("no change", "inconclusive")


def test_a_mistyped_tag_gets_a_did_you_mean(noise_db):
    """On the real runs (tags main, pr-slow, pr-subfloor): a baseline tag no receipt carries names the close one,
    as a candidate tag does (exit 2 there: nothing to check)."""
    code, out = check(noise_db, "tag:pr-slow", "--against", "tag:mian")
    assert code == 3 and {r["outcome"] for r in out["results"]} == {"no_baseline"}
    assert all("no current receipt carries the tag 'mian'; did you mean 'main'?" in r["why"] for r in out["results"])
    text = " ".join(cli(noise_db, "check", "slow_1", "--against", "tag:mian").stdout.split())
    assert "did you mean 'main'?" in text and "noise floor" not in text and "0 run(s) tagged" not in text, text
    result = cli(noise_db, "check", "tag:pr-slwo", "--against", "tag:main")
    assert result.exit_code == 2 and "did you mean 'pr-slow'" in result.stderr


def test_checking_the_baseline_tag_against_itself_says_so(noise_db):
    """`check tag:main --against tag:main`: every main run is a candidate, none is left for the baseline; the
    message says that, not that no receipt carries the tag."""
    code, out = check(noise_db, "tag:main", "--against", "tag:main")
    assert code == 3 and len(out["results"]) == 10
    for r in out["results"]:
        assert r["outcome"] == "no_baseline" and "carries the tag" not in r["why"]
        assert "10 run(s) tagged 'main' are all among the runs being checked" in r["why"]
