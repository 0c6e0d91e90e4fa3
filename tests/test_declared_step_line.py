"""A step line the user declares in receipts.toml (`[logs] step_line`), for logs no built-in format reads;
refused in one line, naming the file, when the regular expression is invalid or has no `step` group."""

from __future__ import annotations

import json

import pytest

from receipts.pipeline import parse_log
from tests.cli_helpers import cli, cli_json

PATTERN = (r"it (?P<step>\d+) \| (?P<step_ms>[\d.]+) ms/it \| loss (?P<loss>[\d.]+) \| "
           r"(?P<tokens_per_s>[\d,]+) tok/s \| mem (?P<memory>[\d.]+ ?GiB)")


def _toml(tmp_path, pattern: str, name: str = "receipts.toml"):
    path = tmp_path / name
    path.write_text(f"[logs]\nstep_line = {json.dumps(pattern)}\n")
    return path


def _log(tmp_path, n: int = 12):
    lines = ["booting the trainer", "2026-11-20 10:00:00,000 - INFO - config: lr=3e-4"]
    lines += [f"2026-11-20 10:00:{i:02d},000 - INFO - it {i} | {500 + (i % 4) * 2.5:.1f} ms/it | loss {3 - i / 100:.2f} | "
              f"{120_000 + i * 10:,} tok/s | mem {20 + i / 10:.1f} GiB" for i in range(1, n + 1)]
    path = tmp_path / "custom.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_declared_step_line_reads_a_log_no_format_knows(tmp_path, db):
    log = _log(tmp_path)
    with pytest.raises(Exception, match=r"unknown log format.*\[logs\] step_line in receipts.toml"):
        parse_log(log)
    registry = _toml(tmp_path, PATTERN, "team.toml")
    out = cli(db, "--registry", str(registry), "ingest", str(log))
    assert out.exit_code == 0, out.stderr
    steps = parse_log(log, step_line=PATTERN).steps
    assert steps["step"].to_list() == list(range(1, 13))
    assert steps["step_ms"].to_list() == [500 + (i % 4) * 2.5 for i in range(1, 13)]
    assert steps["loss"].to_list() == pytest.approx([3 - i / 100 for i in range(1, 13)])
    assert steps["tokens_per_s"].to_list() == [120_000 + i * 10 for i in range(1, 13)]
    assert steps["allocated_bytes"].to_list() == [round((20 + i / 10) * 2**30) for i in range(1, 13)]
    assert steps["line"].to_list() == list(range(3, 15))
    code, listed = cli_json(db, "list")
    assert code == 0 and listed[0]["source_format"] == "declared"
    assert listed[0]["started_at"].startswith("2026-11-20T10:00:00")  # the logger's own clock dates the run


def test_the_receipts_toml_in_the_working_folder_declares_it(tmp_path, db, monkeypatch):
    log = _log(tmp_path)
    _toml(tmp_path, r"it (?P<step>\d+) \| (?P<step_ms>[\d.]+) ms/it")
    monkeypatch.chdir(tmp_path)
    out = cli(db, "ingest", str(log))
    assert out.exit_code == 0, out.stderr


@pytest.mark.parametrize("pattern, words", [
    (r"it (?P<step>\d+ \| (?P<step_ms>[\d.]+)", "is not a valid regular expression"),
    (r"it (\d+) \| (?P<step_ms>[\d.]+) ms/it", "has no (?P<step>...) group"),
    (r"it (?P<step>\d+) \| (?P<time>[\d.]+) ms/it", "has the group(s) time"),
    ("", "must be a regular expression"),
])
def test_a_bad_declaration_is_refused_in_one_line_naming_the_file(tmp_path, db, pattern, words):
    registry = _toml(tmp_path, pattern, "team.toml")
    out = cli(db, "--registry", str(registry), "ingest", str(_log(tmp_path)))
    assert out.exit_code == 2 and words in out.stderr and str(registry) in out.stderr, out.stderr
    assert out.stderr.strip().count("\n") == 0, out.stderr
    assert "Traceback" not in out.stderr


def test_a_pattern_that_backtracks_for_ever_in_python_reads_in_linear_time(tmp_path, db):
    """Nested quantifiers ((a+)+ before an anchor that fails) take 2^n steps in Python's engine on n letters;
    RE2 and polars read the line once. Before, the sniff over the log's head never returned."""
    log = tmp_path / "adversarial.log"
    log.write_text("7 aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab\n" + "x" * 100_000 + "\n"
                   + "".join(f"{i} aaaa\n" for i in range(1, 9)))
    registry = _toml(tmp_path, r"^(?P<step>\d+) (a+)+$", "team.toml")
    out = cli(db, "--registry", str(registry), "ingest", str(log))
    assert out.exit_code == 0, out.stderr
    assert parse_log(log, step_line=r"^(?P<step>\d+) (a+)+$").steps["step"].to_list() == list(range(1, 9))


@pytest.mark.parametrize("pattern, feature", [(r"(?P<step>\d+) (\w)\2", "\\2"), (r"(?P<step>\d+)(?= ms)", "(?=")])
def test_a_pattern_only_a_backtracking_engine_reads_is_refused_naming_it(tmp_path, db, pattern, feature):
    registry = _toml(tmp_path, pattern, "team.toml")
    out = cli(db, "--registry", str(registry), "ingest", str(_log(tmp_path)))
    assert out.exit_code == 2, out.stderr
    assert "cannot be used" in out.stderr and feature in out.stderr and str(registry) in out.stderr, out.stderr
    assert out.stderr.strip().count("\n") == 0 and "Traceback" not in out.stderr, out.stderr
