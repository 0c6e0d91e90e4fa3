"""`compare` says when its verdict is weaker than it looks: a receipt compared with itself, a superseded receipt,
steady windows of unequal length. On a real nanochat log (133 steps) and a shorter copy of it (its first 45 steps,
one log line left out so it is no byte prefix: two current runs of one lane)."""

from __future__ import annotations

import pytest

from cli_helpers import cli, cli_json
from conftest import realdata

LOG = realdata("logs", "sft_run_gtx1660.log")
LANE = ("--host-lineage", "gtx1660-desk", "--preset", "nanochat_d2_sft", "--regime", "single/no-compile")


@pytest.fixture
def two_lengths(tmp_path, db):
    lines = LOG.read_text().splitlines(keepends=True)
    last = [i for i, line in enumerate(lines) if line.startswith("step ")][44]
    short = tmp_path / "short.log"
    short.write_text("".join(lines[1:last + 1]))  # without its first line: not a byte prefix of the whole log
    full = tmp_path / "full.log"
    full.write_text("".join(lines))
    for path in (short, full):
        assert cli(db, "ingest", str(path), *LANE).exit_code == 0
    return db


def test_a_receipt_compared_with_itself_says_so(two_lengths):
    db = two_lengths
    code, out = cli_json(db, "compare", "full", "full")
    assert out["warnings"] == [f"A and B are the same receipt {out['a']['id']} (full): the comparison measures nothing"]
    said = cli(db, "compare", "full", "full")
    assert "warning: A and B are the same receipt" in said.stderr  # warnings on stderr: `compare | head -1` reads
    assert "warning" not in said.stdout and said.stdout.startswith("full vs baseline full")  # the headline


def test_steady_windows_of_unequal_length_compare_with_a_warning(two_lengths):
    code, out = cli_json(two_lengths, "compare", "short", "full")
    a, b = out["a"]["steady_state"], out["b"]["steady_state"]
    assert (b["last_step"] - b["first_step"]) > 1.5 * (a["last_step"] - a["first_step"])
    assert out["comparable"] and len(out["warnings"]) == 1
    assert out["warnings"][0].startswith(f"the steady windows differ in length: A steps {a['first_step']}..45, "
                                         f"B steps {b['first_step']}..133")


def test_a_superseded_receipt_compared_says_which_receipt_replaced_it(tmp_path, db):
    lines = LOG.read_text().splitlines(keepends=True)
    cut = [i for i, line in enumerate(lines) if line.startswith("step ")][99]
    early = tmp_path / "run" / "train.log"
    early.parent.mkdir()
    early.write_text("".join(lines[:cut + 1]))          # the log as it stood at step 100
    assert cli(db, "ingest", str(early), *LANE).exit_code == 0
    first_id = cli_json(db, "show", "train")[1]["id"]
    early.write_text("".join(lines))                     # the run went on: the same file, grown
    assert cli(db, "ingest", str(early), *LANE).exit_code == 0
    code, out = cli_json(db, "compare", first_id, "train")
    assert any(w.startswith(f"A train ({first_id[:12]}) is superseded by {out['b']['id']}") for w in out["warnings"])
