"""One current receipt per run, whatever the order its views arrive in: a log that is a byte prefix of a stored
receipt's log is stored already superseded by it, with a warning naming it; PostgreSQL writers racing with views
of one run converge on one current receipt; the ingest line names the run as stored."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import cli, cli_json
from conftest import realdata
from test_postgres import pg_server  # noqa: F401  (fixture: databases on the server of RECEIPTS_TEST_PG)


def views(folder: Path, fractions: tuple[float, ...]) -> list[Path]:
    """Views of the real nanochat run log as it grew: cut after each fraction of its step lines (at a line end),
    then the whole log; each `live/run.log` in a folder of its own, as copies taken from a node at different times
    (so all are the run `live`)."""
    text = realdata("logs/sft_run_gtx1660.log").read_bytes()
    lines = text.splitlines(keepends=True)
    steps = [i for i, line in enumerate(lines) if line.startswith(b"step ")]   # 133, lines 108 to 240
    out = []
    for i, fraction in enumerate((*fractions, 1.0)):
        path = folder / f"copy{i}" / "live" / "run.log"
        path.parent.mkdir(parents=True)
        cut = steps[round(len(steps) * fraction) - 1] + 1 if fraction < 1 else len(lines)
        path.write_bytes(b"".join(lines[:cut]))
        out.append(path)
    assert out[-1].read_bytes() == text
    return out


def test_an_earlier_view_ingested_after_the_longer_log_is_stored_superseded(db, tmp_path):
    early, full = views(tmp_path, (0.6,))
    code, (stored,) = cli_json(db, "ingest", str(full))
    assert code == 0 and stored["created"]
    result = cli(db, "ingest", str(early))
    assert result.exit_code == 0
    assert f"byte prefix of the log of receipt {stored['receipt_id']}" in result.output
    code, (late,) = cli_json(db, "ingest", str(early))          # the same file again: already there, still superseded
    assert late["created"] is False and late["superseded_by"] == stored["receipt_id"]
    assert [r["id"] for r in cli_json(db, "list")[1]] == [stored["receipt_id"]]
    assert len(cli_json(db, "list", "--all")[1]) == 2
    shown = cli(db, "show", "live")                             # both are the run `live`: the current one, not ambiguous
    assert shown.exit_code == 0 and "ambiguous" not in shown.output
    assert cli_json(db, "show", "live")[1]["id"] == stored["receipt_id"]


def test_without_the_longer_log_on_this_machine_its_stored_steps_decide(db, tmp_path):
    """The longer log was ingested on another node (here: moved away since): this file's steps are its first ones,
    line for line, so it is an earlier view; a log of another run that starts with the same bytes is not."""
    early, full = views(tmp_path, (0.6,))
    code, (stored,) = cli_json(db, "ingest", str(full))
    full.unlink()
    other = tmp_path / "other" / "live" / "run.log"              # the same first bytes, another run's step times
    other.parent.mkdir(parents=True)
    other.write_bytes(early.read_bytes().replace(b"dt: 5.", b"dt: 6."))
    result = cli(db, "ingest", str(other))
    assert result.exit_code == 0 and "earlier view" not in result.output
    result = cli(db, "ingest", str(early))
    assert result.exit_code == 0
    assert "its steps are that receipt's first ones" in result.output and stored["receipt_id"] in result.output
    current = {r["id"] for r in cli_json(db, "list")[1]}
    assert stored["receipt_id"] in current and len(current) == 2


def test_the_ingest_line_names_the_run_as_stored(db, tmp_path):
    early, full = views(tmp_path, (0.5,))
    assert cli(db, "ingest", str(early), "--run-name", "two_ranks").exit_code == 0
    result = cli(db, "ingest", str(full))                       # the grown log carries the earlier run name over
    assert result.exit_code == 0
    code, listed = cli_json(db, "list")
    assert [r["run_name"] for r in listed] == ["two_ranks"]
    assert f"-> receipt {listed[0]['id']} (two_ranks)" in result.output


@pytest.mark.postgres
@pytest.mark.slow
def test_writers_racing_with_views_of_one_run_leave_one_current_receipt(pg_server, tmp_path, warm_writers):
    """8 processes at once (tests/warm_writers.py), each ingesting one view of a run (7 prefixes and the whole log),
    8 times over: the view each writer gets rotates, so every writer lands every view once."""
    import psycopg

    paths = views(tmp_path / "views", (0.1, 0.2, 0.35, 0.5, 0.65, 0.8, 0.9))
    full_id = cli_json(str(tmp_path / "probe.duckdb"), "ingest", str(paths[-1]))[1][0]["receipt_id"]
    outcomes = []
    for attempt in range(8):
        url = pg_server["fresh"]()
        assert cli(url, "db", "init").exit_code == 0
        order = paths[attempt:] + paths[:attempt]       # which writer gets which view rotates
        warm_writers.race([["--db", url, "ingest", str(path)] for path in order])   # each exits 0
        with psycopg.connect(url) as conn:
            current = [r[0] for r in conn.execute("SELECT id FROM receipts WHERE superseded_by IS NULL")]
            total = conn.execute("SELECT count(*) FROM receipts").fetchone()[0]
        outcomes.append((len(current), total))
        assert current == [full_id] and total == 8, (attempt, current, total)
    assert outcomes == [(1, 8)] * 8
