"""Logs read chunk by chunk (textlog.read_chunks + parse_chunks) give exactly what reading them whole gives.

The streamed path is what `receipts ingest` takes for nanochat, Megatron and modded-nanogpt logs; the whole
path (read_log + parse) is what it took before and still takes for the other formats. Every real log and
every run.log under tests/data is compared both ways, whole and cut at a few byte offsets (a writer killed
mid-line, a crash after the last iteration), with chunks small enough that step lines, the arguments dump
and the final lines fall on chunk boundaries.
"""

from __future__ import annotations

import dataclasses
import os
import pty
import random
import select
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from conftest import REALDATA, REPO
from receipts.errors import InputError
from receipts.ingest import log_formats, sniff
from receipts.ingest.textlog import read_chunks, read_log
from receipts.pipeline import parse_log
from receipts.schema.model import ParsedRun

LOGS = sorted(p for p in (REALDATA / "logs").glob("*") if p.suffix != ".json") if (REALDATA / "logs").is_dir() else []
RUN_LOGS = sorted((REPO / "tests" / "data").rglob("run.log"))
NANOCHAT = REALDATA / "logs" / "sft_run_gtx1660.log"
# The first run.log of each folder of tests/data: a folder's logs are one recorder's RECEIPT format, which every
# streamed parser refuses the same way; the parsers' refusals are compared on these, the pipeline's entry on all.
REFUSED_RUN_LOGS = {min(p for p in RUN_LOGS if p.parent.parent == folder) for folder in {p.parent.parent for p in RUN_LOGS}}


def _outcome(parse) -> ParsedRun | str:
    try:
        return parse()
    except InputError as exc:
        return f"InputError: {exc}"


def _assert_same(whole: ParsedRun | str, streamed: ParsedRun | str) -> None:
    if isinstance(whole, str) or isinstance(streamed, str):
        assert whole == streamed
        return
    for f in dataclasses.fields(whole):
        a, b = getattr(whole, f.name), getattr(streamed, f.name)
        if isinstance(a, pl.DataFrame):
            b = b.collect() if isinstance(b, pl.LazyFrame) else b  # steps spilled to disk (ingest/spool.py)
            assert a.schema == b.schema and a.equals(b), f.name
        else:
            assert a == b, f.name


def _variants(path: Path, tmp_path: Path) -> list[Path]:
    """The log, and copies cut short at seeded random byte offsets."""
    data = path.read_bytes()
    rng = random.Random(path.name)
    cuts = []
    for k in range(3):
        cut = tmp_path / f"{path.stem}_cut{k}.log"
        cut.write_bytes(data[:rng.randrange(1, len(data))])
        cuts.append(cut)
    return [path, *cuts]


@pytest.mark.parametrize("path", LOGS + RUN_LOGS, ids=lambda p: p.name if p.parent.name == "logs" else p.parent.name)
def test_streamed_parsers_match_the_whole_read(path, tmp_path):
    """Each streamed parser on each variant, whole against chunked and against spilled to Parquet chunk by chunk
    (as `receipts ingest` parses). A parser reading its own format is compared at 997-byte and 64 KiB chunks and
    spilled at 997 bytes; a parser refusing the log (another format) at 64 KiB on every variant, spilled or not,
    and at 997 bytes on the whole log: a cut's small chunks are the whole log's up to its last one; of the run.logs
    under tests/data, on the first of each folder (REFUSED_RUN_LOGS). (Every parser
    on every variant at 997 bytes, spilled and not, cost three times the CPU for no case more: each small chunk
    costs a parser some 25 polars queries.) The small chunks of the two largest logs (modded-nanogpt's SOAP run,
    Megatron-DeepSpeed's) are a multiple of 997 bytes, so that no log takes more than some 160 of them, as the
    160 KB logs do at 997: the boundaries per log, not the bytes per chunk, are what the comparison samples (Yarn's
    log, of SOAP's format, is cut at 997)."""
    small = 997 * max(1, -(-path.stat().st_size // 160_000))
    for variant in _variants(path, tmp_path):
        try:
            log = read_log(variant)
        except InputError:
            continue
        for name in sniff.STREAMED_FORMATS:
            module = log_formats.streamed_parser(name)
            whole = _outcome(lambda: module.parse(log))
            refused = isinstance(whole, str)
            if refused and path in RUN_LOGS and path not in REFUSED_RUN_LOGS:
                continue
            for block in (64 * 1024,) if refused and variant != path else (small, 64 * 1024):
                _assert_same(whole, _outcome(lambda: module.parse_chunks(variant, read_chunks(variant,
                                                                                               block_bytes=block))))
            spill = tmp_path / f"spill-{variant.name}-{name}"
            spill.mkdir()
            block = 64 * 1024 if refused else small
            _assert_same(whole, _outcome(lambda: module.parse_chunks(variant, read_chunks(variant, block_bytes=block),
                                                                     spill)))
        # the pipeline's entry (sniffed, streamed where the format streams) against the whole read
        sniffed = _outcome(lambda: sniff.parse_log(log, None))
        _assert_same(sniffed, _outcome(lambda: parse_log(variant)))
        spill = tmp_path / f"spill-{variant.name}"
        spill.mkdir()
        _assert_same(sniffed, _outcome(lambda: parse_log(variant, spill=spill)))


def test_chunks_are_the_lines_of_the_whole_read(tmp_path):
    odd = tmp_path / "odd.log"  # blank runs across blocks, \r\n and \r progress bars, a BOM, bad UTF-8, no final newline
    odd.write_bytes("\ufeffhead\n\n\n\n".encode() + b"x\r\ny\rz\n" + b"\n" * 50 + b"\xff\xfe bad\nstep 1 | loss: 2\nlast")
    # Block 1 cuts a real log at every line end (a block ends at a newline) and 4096 inside its lines; 7 on a real
    # log gave the same chunks as 1 but where short lines run together, the case the odd file holds. Block 1 reads
    # each log's first 16 KiB (the larger logs cut mid-line: a last line without its newline), which hold the \r\n
    # lines of the logs that have them: a chunk per line costs a split of its own (~0.7 ms), 11 s over whole logs.
    heads = []
    for p in LOGS:
        heads.append(tmp_path / f"head_{p.name}")
        heads[-1].write_bytes(p.read_bytes()[:16 << 10])
    for path, blocks in [(odd, (1, 7, 4096)), *((p, (1,)) for p in heads), *((p, (4096,)) for p in LOGS)]:
        log = read_log(path)
        for block in blocks:
            chunks = list(read_chunks(path, block_bytes=block))
            frame = pl.concat([c.frame for c in chunks])
            assert frame["text"].to_list() == log.lines.to_list()
            assert frame["line"].to_list() == list(range(1, log.n_lines + 1))
            assert [c.last for c in chunks] == [False] * (len(chunks) - 1) + [True]
            assert chunks[-1].unterminated_last == log.unterminated_last


def test_progress_counts_up_to_the_file_size(tmp_path):
    """The callback the CLI's bar follows: bytes and lines only grow, and end at the file's size and lines."""
    log = tmp_path / "long.log"
    log.write_bytes(NANOCHAT.read_bytes() * 40)
    seen: list[tuple[int, int]] = []
    list(read_chunks(log, lambda b, n: seen.append((b, n)), block_bytes=64 * 1024))
    assert len(seen) > 10
    assert all(b1 < b2 and n1 < n2 for (b1, n1), (b2, n2) in zip(seen, seen[1:]))
    assert seen[-1] == (log.stat().st_size, read_log(log).n_lines)
    # through the pipeline: a streamed format and one read whole both end at the file's size
    for path in (log, REPO / "tests" / "data" / "gpu" / "fsdp2_2gpu_nsys" / "run.log"):
        calls: list[tuple[int, int]] = []
        parse_log(path, progress=lambda b, n: calls.append((b, n)))
        assert calls and calls[-1][0] == path.stat().st_size
        assert [b for b, _ in calls] == sorted(b for b, _ in calls)


def _run_on_a_terminal(args: list[str], cwd: Path) -> str:
    """Run a command with stdout and stderr on a pseudo-terminal, as a user's shell would; all it printed."""
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": "160", "TERM": "xterm"}
    proc = subprocess.Popen(args, stdin=follower, stdout=follower, stderr=follower, cwd=cwd, env=env, close_fds=True)
    os.close(follower)
    out = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 120)
        if not ready:
            proc.kill()
            break
        try:
            data = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        out += data
    proc.wait(timeout=60)
    os.close(leader)
    return out.decode("utf-8", errors="replace")


def test_a_long_ingest_on_a_terminal_shows_the_file_bytes_and_lines(tmp_path):
    log = tmp_path / "long_nanochat.log"
    # ~2.9M lines: well past the bar's one-second delay (the reading alone: ~2 s of CPU), loaded machine or not
    log.write_bytes(NANOCHAT.read_bytes() * 12000)
    out = _run_on_a_terminal([sys.executable, "-m", "receipts.cli.main", "--db", str(tmp_path / "r.duckdb"),
                              "ingest", str(log)], tmp_path)
    assert "ingested" in out, out[-2000:]
    assert "ingesting long_nanochat.log" in out and " lines" in out and "MiB" in out, out[-2000:]
