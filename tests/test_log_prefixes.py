"""Step lines as teams' logs carry them: behind a logger's prefix, a launcher's rank label, with memory.

The real nanochat lines (../shared/realdata/logs/nanochat_pr147_a100_mfu.txt) are written again through
Python's own `logging` with the formats people configure (the documented defaults among them), so each prefix
is exactly what the logging module produces; the numbers parsed behind any prefix must be those of the bare
file.
"""

from __future__ import annotations

import logging

import pytest

from receipts.pipeline import parse_log
from tests.conftest import realdata

FORMATS = {
    "basicConfig default": logging.BASIC_FORMAT,                         # INFO:root:...
    "asctime - levelname": "%(asctime)s - %(levelname)s - %(message)s",
    "asctime - name - levelname": "%(asctime)s - %(name)s - %(levelname)s - %(message)s",
    "asctime levelname": "%(asctime)s %(levelname)s %(message)s",
    "[levelname]": "[%(levelname)s] %(message)s",
    "hydra": "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s",
    "levelname:name:lineno": "%(levelname)s:%(name)s:%(lineno)d: %(message)s",
    "asctime | levelname | name": "%(asctime)s | %(levelname)-8s | %(name)s - %(message)s",
    "asctime levelname [filename:lineno]": "%(asctime)s %(levelname)s [%(filename)s:%(lineno)d] %(message)s",
}


def _logged(tmp_path, fmt: str, lines: list[str], name: str):
    path = tmp_path / f"{name}.log"
    handler = logging.FileHandler(path, mode="w")
    handler.setFormatter(logging.Formatter(fmt))
    logger = logging.getLogger(f"train.{name}")
    logger.handlers, logger.propagate = [handler], False
    logger.setLevel(logging.INFO)
    for line in lines:
        logger.info(line)
    handler.close()
    return path


def _numbers(parsed):
    return parsed.steps.select("step", "step_ms", "tokens_per_s", "loss", "mfu_pct").rows()


@pytest.mark.parametrize("fmt", list(FORMATS), ids=list(FORMATS))
def test_a_logger_prefix_is_stripped_like_a_launcher_label(tmp_path, fmt):
    bare = realdata("logs", "nanochat_pr147_a100_mfu.txt")
    lines = bare.read_text().splitlines()
    path = _logged(tmp_path, FORMATS[fmt], lines, fmt.replace(" ", "_").replace("|", "").replace(":", ""))
    assert path.read_text().splitlines()[0] != lines[0]  # the logger did prefix it
    parsed = parse_log(path)
    assert parsed.source_format == "nanochat"
    assert _numbers(parsed) == _numbers(parse_log(bare)) and len(_numbers(parsed)) == len(lines)


def test_free_text_before_a_step_is_not_a_prefix(tmp_path):
    path = tmp_path / "chatter.log"
    path.write_text("the model said: step 00004/21400 (0.02%) | loss: 8.89 | lrm: 1.00 | dt: 989.44ms\n")
    with pytest.raises(Exception, match="unknown log format"):
        parse_log(path)


def test_an_unterminated_last_step_line_behind_another_prefix_is_kept(tmp_path):
    """The last step line has no newline and a logger prefix other than the line before it (another level,
    another module): the step line itself is whole, so the step is kept, not called cut short."""
    bare = realdata("logs", "nanochat_pr147_a100_mfu.txt").read_text().splitlines()
    prefixed = [f"2026-11-29 10:00:{i:02d},123 INFO [train.py:88] {line}" for i, line in enumerate(bare)]
    prefixed[-1] = f"2026-11-29 10:00:59,999 WARNING [loop.py:1204] {bare[-1]}"
    path = tmp_path / "unterminated.log"
    path.write_text("\n".join(prefixed))
    parsed = parse_log(path)
    assert parsed.ended_early is None
    assert _numbers(parsed) == _numbers(parse_log(realdata("logs", "nanochat_pr147_a100_mfu.txt")))
    cut = tmp_path / "cut.log"
    cut.write_text("\n".join(prefixed)[:-12])  # the same last line cut: still said
    assert "is cut short" in (parse_log(cut).ended_early or "")


def test_torchrun_tee_labels_are_ranks(tmp_path):
    bare = realdata("logs", "nanochat_pr147_a100_mfu.txt").read_text().splitlines()
    path = tmp_path / "tee.log"
    path.write_text("".join(f"[default{rank}]:{line}\n" for line in bare for rank in (0, 1)))
    steps = parse_log(path).steps
    assert steps.height == 2 * len(bare)
    assert sorted(set(steps["rank"].to_list())) == [0, 1]
    assert steps.filter(steps["rank"] == 1)["step_ms"].to_list() == [989.44, 991.09, 992.91, 992.59, 994.14,
                                                                     *steps.filter(steps["rank"] == 1)["step_ms"].to_list()[5:]]


def test_memory_per_step_and_peak_reserved(tmp_path):
    bare = realdata("logs", "nanochat_pr147_a100_mfu.txt").read_text().splitlines()
    with_mem = [line.replace(" | total time:", f" | mem: {20 + i * 0.5:.2f}GiB | total time:") for i, line in enumerate(bare)]
    path = tmp_path / "mem.log"
    path.write_text("\n".join([*with_mem, "Peak memory usage: 24012.50MiB", "Peak memory reserved: 30720.00MiB"]) + "\n")
    parsed = parse_log(path)
    assert parsed.steps["allocated_bytes"].to_list() == [round((20 + i * 0.5) * 2**30) for i in range(len(bare))]
    (peak,) = parsed.memory
    assert (peak.peak_allocated_bytes, peak.peak_reserved_bytes) == (int(24012.5 * 2**20), int(30720 * 2**20))
    only_usage = tmp_path / "usage.log"
    only_usage.write_text("\n".join([*bare, "Peak memory usage: 24012.50MiB"]) + "\n")
    (peak,) = parse_log(only_usage).memory
    assert peak.peak_reserved_bytes is None  # unknown, never 0


def test_per_step_mem_alone_is_the_peak_allocated_in_show_list_and_compare(tmp_path):
    """No `Peak memory` summary: the per-step `mem:` (the allocator's peak so far) gives the peak allocated that
    show, list and compare print."""
    from cli_helpers import cli, cli_json

    bare = realdata("logs", "nanochat_pr147_a100_mfu.txt").read_text().splitlines()
    with_mem = [line.replace(" | total time:", f" | mem: {11 + i * 0.01:.2f}GiB | total time:")
                for i, line in enumerate(bare)]
    path = tmp_path / "mem_only.log"
    path.write_text("\n".join(with_mem) + "\n")
    expected = round((11 + (len(bare) - 1) * 0.01) * 2**30)
    (peak,) = parse_log(path).memory
    assert (peak.peak_allocated_bytes, peak.peak_reserved_bytes) == (expected, None)
    db = str(tmp_path / "m.duckdb")
    assert cli_json(db, "ingest", str(path))[0] == 0
    shown = cli_json(db, "show", "mem_only")[1]
    assert shown["memory"]["peak_allocated_bytes"] == expected
    assert [r["peak_allocated_bytes"] for r in cli_json(db, "list")[1]] == [expected]
    text = cli(db, "show", "mem_only").output
    assert "peak allocated -" not in text and f"{expected / 2**30:.2f}" in text
