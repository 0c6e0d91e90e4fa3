"""Ingest throughput of the third-party log parsers: read_log + detect + parse over >= 1M lines.

    .venv/bin/python benchmarks/bench_log_ingest.py [--lines 1000000] [--repeat 3]
    POLARS_MAX_THREADS=1 .venv/bin/python benchmarks/bench_log_ingest.py     # one-core numbers

The logs are built from the step lines of real logs in ../shared/realdata/logs (nanochat sft_run and a
modded-nanogpt record), repeated with renumbered steps into a temp file. The reference, measured in the
same run on the same file, is the raw scan every parser must pay anyway: read the bytes, decode, split
into lines and build the polars Series (what `read_log` does), and a polars line count of the file.
Peak memory is the process's max RSS from resource.getrusage (kernel-reported high-water mark, whole
process, so it includes the interpreter and polars' arenas), sampled after each format's runs.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

from receipts.ingest import sniff
from receipts.ingest.textlog import read_log

REALDATA = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "logs"
SOURCES = {
    "nanochat": ("sft_run_gtx1660.log", r"^step (\d+)", "step {:05d}"),
    "modded_nanogpt": ("track_1_short_2025-09-10_Yarn__ef66c943-e262-400f-822f-068d397a1dc9.txt",
                       r"^step:(\d+)/", "step:{}/"),
}


def build_log(fmt: str, n_lines: int, out: Path) -> int:
    """Header lines of the real log, then its step lines repeated with steps renumbered 1..N."""
    name, step_rx, step_fmt = SOURCES[fmt]
    text = (REALDATA / name).read_text(encoding="utf-8")
    lines = text.splitlines()
    rx = re.compile(step_rx)
    first = next(i for i, line in enumerate(lines) if rx.match(line))
    header = lines[:first]
    body = [line for line in lines[first:] if rx.match(line) and "val_loss" not in line]
    # train_time must keep growing for modded-nanogpt: shift each copy by the span of one pass
    written = 0
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(header) + "\n")
        written += len(header)
        step = 0
        rep = 0
        span = _train_time_span(body) if fmt == "modded_nanogpt" else 0
        while written < n_lines:
            chunk = []
            for line in body:
                step += 1
                new = rx.sub(step_fmt.format(step), line, count=1)
                if span:
                    new = re.sub(r"train_time:(\d+)ms",
                                 lambda m: f"train_time:{int(m.group(1)) + rep * span}ms", new, count=1)
                chunk.append(new)
            f.write("\n".join(chunk) + "\n")
            written += len(chunk)
            rep += 1
    return written


def _train_time_span(body: list[str]) -> int:
    times = [int(m.group(1)) for line in body if (m := re.search(r"train_time:(\d+)ms", line))]
    return times[-1] + 100


def timed(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def raw_scan(path: Path) -> int:
    data = path.read_bytes().decode("utf-8", errors="replace")
    return len(pl.Series("text", data.split("\n"), dtype=pl.Utf8))


def polars_count(path: Path) -> int:
    return pl.scan_csv(path, has_header=False, separator="\x1f", quote_char=None,
                       schema={"text": pl.Utf8}).select(pl.len()).collect().item()


def ingest(path: Path) -> int:
    log = read_log(path)
    name = sniff.detect_log_format(log)
    parsed = sniff.log_parser(name).parse(log)
    return parsed.steps.height


def max_rss_mib() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024  # bytes on macOS, KiB on Linux


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"polars {pl.__version__}, threads={pl.thread_pool_size()} "
          f"(POLARS_MAX_THREADS={os.environ.get('POLARS_MAX_THREADS', 'unset')}), best of {args.repeat}")
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in SOURCES:
            path = Path(tmp) / f"{fmt}.log"
            n = build_log(fmt, args.lines, path)
            size_mib = path.stat().st_size / 2**20
            steps = ingest(path)
            t_ingest = timed(lambda: ingest(path), args.repeat)
            t_scan = timed(lambda: raw_scan(path), args.repeat)
            t_count = timed(lambda: polars_count(path), args.repeat)
            print(f"\n{fmt}: {n:,} lines ({size_mib:.0f} MiB), {steps:,} steps parsed")
            print(f"  ingest (read_log+detect+parse) {t_ingest:7.3f} s  {n / t_ingest / 1e6:6.2f} M lines/s")
            print(f"  raw scan (read+split+Series)   {t_scan:7.3f} s  {n / t_scan / 1e6:6.2f} M lines/s   "
                  f"ingest/raw = {t_ingest / t_scan:.2f}x")
            print(f"  polars line count (scan_csv)   {t_count:7.3f} s  {n / t_count / 1e6:6.2f} M lines/s   "
                  f"ingest/count = {t_ingest / t_count:.2f}x")
            print(f"  peak RSS so far (getrusage ru_maxrss): {max_rss_mib():.0f} MiB")
            path.unlink()


if __name__ == "__main__":
    main()
