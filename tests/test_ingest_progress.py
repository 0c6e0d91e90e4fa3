"""The ingest progress bar (cli/progress.py): on stderr, only on a terminal, only past a delay."""

from __future__ import annotations

import io
import time

from rich.console import Console

from cli_helpers import cli
from conftest import GPU_DATA, realdata
from receipts.cli.progress import IngestProgress, target_bytes


def _terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=120), out


def test_the_bar_names_the_file_and_counts_bytes_and_files(tmp_path):
    logs = [GPU_DATA / "fsdp2_2gpu_nsys" / "run.log", realdata("logs", "nanochat_pr147_a100_mfu.txt")]
    console, out = _terminal()
    with IngestProgress(logs, console, delay_s=0.0) as progress:
        time.sleep(0.3)
        assert progress.started
        progress.done(str(logs[0]))
        time.sleep(0.3)
        progress.done(str(logs[1]))
    text = out.getvalue()
    assert "ingesting run.log" in text and "0/2 files" in text and "1/2 files" in text
    assert f"ingesting {logs[1].name}" in text
    total = sum(target_bytes(p) for p in logs)
    assert total == sum(p.stat().st_size for p in logs)


def test_a_quick_batch_never_draws_it():
    console, out = _terminal()
    log = GPU_DATA / "fsdp2_2gpu_nsys" / "run.log"
    with IngestProgress([log], console, delay_s=5.0) as progress:
        progress.done(str(log))
    assert not progress.started and out.getvalue() == ""


def test_not_a_terminal_no_bar(db):
    """CliRunner's stderr is not a terminal (like CI logs and pipes): the output is exactly the usual lines."""
    result = cli(db, "ingest", str(GPU_DATA / "fsdp2_2gpu_nsys" / "run.log"))
    assert result.exit_code == 0
    assert "files" not in result.stderr and "ingesting" not in result.stderr
    console = Console(file=io.StringIO(), force_terminal=False)
    assert not IngestProgress([GPU_DATA / "fsdp2_2gpu_nsys" / "run.log"], console).enabled
