"""From a change point to the commits: `history` names the last good and first bad runs' git_rev and the range
between them, and `check`'s comment the newest baseline run's and the candidate's. Real H100 logs
(tests/data/noise: six unchanged runs, then the planted 2.5% slowdown) with each header's git_rev rewritten to a
commit of its own, as a lane whose runs were built from successive commits records them."""

from __future__ import annotations

import hashlib

import pytest

from receipts.analysis.commits import between
from tests.cli_helpers import cli, cli_json
from tests.conftest import REPO

NOISE = REPO / "tests" / "data" / "noise"
RECORDED = "38bd803b793c79e4acd06a6ae318d6dc7e4633c9"  # the commit every run of the noise set ran
LANE = ["--host-lineage", "h100-device-x1", "--preset", "toy_fsdp2_v1", "--regime", "fsdp2/no-compile"]
RUNS = ["aa_01", "aa_02", "aa_03", "aa_04", "aa_05", "aa_06", "slow_1", "slow_2", "slow_3"]


def rev(name: str) -> str:
    return hashlib.sha1(name.encode()).hexdigest()


@pytest.fixture(scope="module")
def lane(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("commits")
    db = str(root / "c.duckdb")
    for name in RUNS:
        text = (NOISE / name / "run.log").read_text()
        assert text.count(RECORDED) >= 1
        (root / name).mkdir()
        (root / name / "run.log").write_text(text.replace(RECORDED, rev(name)))
        tag = "main" if name.startswith("aa") else "pr-slow"
        assert cli(db, "ingest", str(root / name / "run.log"), "--tag", tag, *LANE).exit_code == 0
    return db


@pytest.mark.slow  # nine real logs ingested
def test_a_change_point_names_its_commit_range(lane):
    code, out = cli_json(lane, "history", "aa_01")
    (point,) = out["change_points"]
    assert point["run_name"] == "slow_1"
    c = point["commits"]
    assert (c["last_good"], c["last_good_rev"], c["first_bad"], c["first_bad_rev"]) == \
        ("aa_06", rev("aa_06"), "slow_1", rev("slow_1"))
    assert c["range"] == f"{rev('aa_06')}..{rev('slow_1')}"
    shown = " ".join(cli(lane, "history", "aa_01", "--format", "table").stdout.split())
    assert "change point at slow_1 (+" in shown and f"%): commits {rev('aa_06')[:12]}..{rev('slow_1')[:12]} (last good " \
           "aa_06, first bad slow_1)" in shown, shown


@pytest.mark.slow
def test_check_names_the_commits_between_the_baseline_and_the_run(lane, tmp_path):
    comment = tmp_path / "comment.md"
    code, out = cli_json(lane, "check", "slow_1", "--against", "tag:main", "--markdown", str(comment))
    (c,) = out["results"]
    assert c["verdict"] == "slower" and c["commits"]["range"] == f"{rev('aa_06')}..{rev('slow_1')}"
    assert f"commits {rev('aa_06')[:12]}..{rev('slow_1')[:12]} (last good aa_06, first bad slow_1)" in \
        comment.read_text()


def test_a_range_says_what_it_cannot_know():
    assert between("a", RECORDED, "b", RECORDED).range is None
    assert "ran the same commit 38bd803b793c: the change is not in the committed code" in \
        between("a", RECORDED, "b", RECORDED).note
    assert between("a", None, "b", RECORDED).note == \
        "no commit range: a recorded no git_rev (receipts run records the working folder's)"
