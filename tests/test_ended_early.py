"""Ended early: truncations of a real `receipts run` log (2xH200 FSDP2 under nsys, tests/data/gpu/) and of
real third-party logs are marked, with the reason and the line; the whole logs are not."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import GPU_DATA, realdata
from receipts.ingest import native
from receipts.ingest.log_formats import parser as log_parser
from receipts.ingest.sniff import detect_log_format
from receipts.ingest.textlog import read_log, same_shape

RUN_LOG = GPU_DATA / "fsdp2_2gpu_nsys" / "run.log"
# Read by hand from that file: line 1 the launcher's header, 6-7 the ranks' capture headers, 53 rank 1's
# footer, 55 rank 0's footer, 56-60 nsys's report-generation output, 61 the launcher's footer.
RANK1_FOOTER, RANK0_FOOTER, LAUNCHER_FOOTER = 53, 55, 61


def _lines() -> list[str]:
    lines = RUN_LOG.read_bytes().decode("utf-8").split("\n")  # not read_text: nsys's progress bar has bare \r
    assert lines[-1] == "" and len(lines) - 1 == LAUNCHER_FOOTER
    return lines[:-1]


def _cut(tmp_path: Path, text: str) -> native.ParsedRun:
    path = tmp_path / "run.log"
    path.write_bytes(text.encode("utf-8"))
    return native.parse(read_log(path))


def test_the_whole_log_did_not_end_early():
    assert native.parse(read_log(RUN_LOG)).ended_early is None


@pytest.mark.parametrize("keep", [RANK0_FOOTER, 58, LAUNCHER_FOOTER - 1])
def test_cut_after_the_ranks_footers_but_before_the_launchers(tmp_path, keep):
    """Every rank closed, so the old rule ("is there a footer?") passed; the launcher's footer, which it
    writes last whatever the command does, is missing."""
    run = _cut(tmp_path, "\n".join(_lines()[:keep]) + "\n")
    assert run.steps.height == 40  # nothing of the evidence was lost
    assert run.ended_early == f"no footer from `receipts run` (written last, whatever the command does): " \
                              f"the log stops at line {keep}"


def test_cut_between_the_two_ranks_footers_names_the_silent_rank(tmp_path):
    run = _cut(tmp_path, "\n".join(_lines()[:RANK1_FOOTER]) + "\n")
    assert "no footer from `receipts run`" in run.ended_early
    assert "rank 0 wrote no RECEIPT footer" in run.ended_early and "rank 1" not in run.ended_early


def test_cut_mid_line_in_the_tools_output_after_the_footers(tmp_path):
    lines = _lines()
    victim = lines[57]  # line 58: nsys's progress bar, not a RECEIPT record
    run = _cut(tmp_path, "\n".join(lines[:57]) + "\n" + victim[: len(victim) // 2])
    assert run.ended_early.startswith("line 58 is cut short (no newline at end of file)")
    assert "the log stops at line 58" in run.ended_early


def test_cut_mid_way_through_the_launchers_footer(tmp_path):
    lines = _lines()
    run = _cut(tmp_path, "\n".join(lines[:-1]) + "\n" + lines[-1][:40])
    assert f"line {LAUNCHER_FOOTER} is cut short" in run.ended_early and "no footer from `receipts run`" in run.ended_early


def test_whole_last_record_without_its_newline_is_not_a_cut(tmp_path):
    assert _cut(tmp_path, "\n".join(_lines())).ended_early is None


def test_launcher_footer_reports_how_the_command_ended(tmp_path):
    lines = _lines()
    failed = lines[-1].replace('"exit_code":0', '"exit_code":3')
    assert _cut(tmp_path, "\n".join(lines[:-1] + [failed]) + "\n").ended_early == "the command exited with code 3"
    killed = lines[-1].replace('"exit_code":0,"signal":null', '"exit_code":143,"signal":"SIGTERM"')
    assert _cut(tmp_path, "\n".join(lines[:-1] + [killed]) + "\n").ended_early == \
        "the command was ended by SIGTERM (exit code 143)"


def test_every_line_boundary_truncation_is_marked(tmp_path):
    lines = _lines()
    for keep in range(7, LAUNCHER_FOOTER):  # from the ranks' headers on, every prefix lacks the final footer
        assert _cut(tmp_path, "\n".join(lines[:keep]) + "\n").ended_early, keep


# A torchtitan step line cut right after its memory field still ends in '%', which was the whole test.
def test_torchtitan_line_cut_after_the_memory_field(tmp_path):
    real = realdata("logs", "torchtitan_pr1287_dcp_zoc_steps200-250.txt")
    lines = real.read_text(encoding="utf-8").split("\n")
    cut_line = next(i for i, line in enumerate(lines, 1) if "step: 210" in line)
    victim = lines[cut_line - 1]
    path = tmp_path / "titan.txt"
    path.write_text("\n".join(lines[:cut_line - 1]) + "\n" + victim[: victim.index("%)") + 2], encoding="utf-8")
    log = read_log(path)
    run = log_parser(detect_log_format(log)).parse(log)
    assert run.steps["step"].to_list() == [200]
    assert run.ended_early.startswith(f"line {cut_line} is cut short")


def test_same_shape():
    a = "step: 200  loss:  6.1384  memory: 49.66GiB(52.28%)  tps: 5,856  mfu: 34.29%"
    assert same_shape(a, "step: 210  loss: 10.0388  memory: 49.66GiB(52.28%)  tps: 15,593  mfu: 32.75%")
    assert not same_shape(a, "step: 210  loss:  6.0388  memory: 49.66GiB(52.28%)")


def test_a_ranks_footer_with_an_error_exit_code(tmp_path):
    lines = _lines()
    failed = lines[RANK1_FOOTER - 1].replace('"rank":1,', '"rank":1,"exit_code":1,')
    run = _cut(tmp_path, "\n".join(lines[:RANK1_FOOTER - 1] + [failed] + lines[RANK1_FOOTER:]) + "\n")
    assert run.ended_early == "rank 1 reports exit code 1" and run.warnings == ()
