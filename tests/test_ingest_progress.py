"""The ingest progress bar (cli/progress.py): on stderr, only on a terminal, only past a delay."""

from __future__ import annotations

import io
import re
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


def test_one_line_in_an_80_column_terminal_whatever_the_name(tmp_path):
    # Seen in an 80-column terminal: the bar's `MiB` wrapped onto a line of its own under the byte counts.
    long_name = tmp_path / ("track_1_short_2025-09-10_Yarn__ef66c943-e262-400f-822f-068d397a1dc9" + "_x" * 20 + ".txt")
    long_name.write_bytes(b"x" * (300 << 12))
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=80)
    with IngestProgress([long_name], console, delay_s=0.0) as progress:
        time.sleep(0.2)
        progress.read(1 << 20, 4_000_082)
        time.sleep(0.3)
    visible = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    frames = [f for f in visible.replace("\r", "\n").split("\n") if f.strip()]
    assert frames and all(len(f) <= 80 and "MiB" in f and " files " in f for f in frames), frames
    assert "ingesting track…" in frames[-1] and "1.0/1.2 MiB 4,000,082 lines, 0/1 files" in frames[-1], frames[-1]


def test_a_file_read_to_its_end_is_still_in_progress_until_stored(tmp_path):
    # rich finishes a task at its total: the spinner blanked and the elapsed time froze while the last 4 s of a
    # 4M-line ingest (window, summary, the store's write) ran, which looked hung.
    log = tmp_path / "run.log"
    log.write_bytes(b"x" * 4096)
    console, out = _terminal()
    with IngestProgress([log], console, delay_s=0.0) as progress:
        progress.read(4096, 100)
        task = progress._progress.tasks[0]
        assert not task.finished and task.description == "finishing run.log"
        time.sleep(0.2)
        progress.done(str(log))
        assert task.finished and task.description == "done"
    assert "finishing run.log" in out.getvalue()


def test_an_nsys_export_moves_the_bar_as_its_tables_stream(tmp_path):
    # A 1 GB export sat at 0/969.6 MiB for its whole 10 s: the bar now follows the rows of its runtime and activity
    # tables streamed, as bytes of the file, and reaches the file's size when they are read.
    from receipts.ingest import nsys
    from receipts.pipeline import ingest_each
    from receipts.schema.categories import load_category_rules
    from receipts.schema.registry import load_registry
    from receipts.store import open_store

    export = realdata("nsys", "mfu_2gpu_after.sqlite")
    fractions: list[float] = []
    nsys.parse(export, rules=load_category_rules(), progress=fractions.append)
    assert fractions and fractions == sorted(fractions) and fractions[-1] == 1.0 and 0 < fractions[0] < 1
    seen: list[tuple[int, int]] = []
    with open_store(str(tmp_path / "r.duckdb")) as store:
        outcomes = list(ingest_each(store, [export], registry=load_registry(None),
                                    progress=lambda done, lines: seen.append((done, lines))))
    assert not [o for o in outcomes if not hasattr(o, "receipt_id")], outcomes
    assert seen == [(int(export.stat().st_size * f), 0) for f in fractions]


def test_duckdb_draws_no_progress_bar_of_its_own():
    # Its bar (`100% ▕████`) broke into ours under a long scan of an export.
    from receipts import duck

    assert duck.connect().execute("SELECT current_setting('enable_progress_bar')").fetchone()[0] is False


def test_a_count_bar_says_done_of_total():
    # `receipts push`: receipts copied of the source's, by the ingest bar's rules (terminal only, past a delay)
    from receipts.cli.progress import CountProgress

    console, out = _terminal()
    with CountProgress("pushing receipts", console, delay_s=0.0) as progress:
        progress(3, 10)
        time.sleep(0.3)
        assert progress.started
    assert "pushing receipts" in out.getvalue() and "3/10" in out.getvalue()
    quiet = Console(file=io.StringIO(), force_terminal=False)
    with CountProgress("pushing receipts", quiet, delay_s=0.0) as progress:
        progress(3, 10)
    assert not progress.enabled and quiet.file.getvalue() == ""
