"""Log ingest: throughput and peak memory of the streamed parsers (what `receipts ingest` runs on a log).

    POLARS_MAX_THREADS=1 .venv/bin/python benchmarks/bench_log_ingest.py --repeat 3     # one-core numbers
    .venv/bin/python benchmarks/bench_log_ingest.py --megatron-rate     # Megatron's lines/s only (one core)
    .venv/bin/python benchmarks/bench_log_ingest.py --lines 2000000 --big-lines 10000000 [--formats nanochat]

The logs are built from the lines of real logs in ../shared/realdata/logs (nanochat sft_run, a Megatron-
DeepSpeed run with its arguments dump, a modded-nanogpt record): header lines, then the step lines repeated
with renumbered steps, written to a temp file. Throughput is the least of --repeat runs of sniffing and
parsing the file as `receipts ingest` parses it (sniff.parse_streamed: 8 MiB chunks, each reduced to its
numbers, the step rows spilled to Parquet in a scratch folder). The references, in the same run on the same
file: a bare polars read of its lines (the same 8 MiB blocks split into a Series of lines and numbered, what every
parser starts from, nothing extracted) and a raw read of the blocks (bytes only, no split). Every run of each, ours
and the references alike, is a fresh process timed from after its imports (`--child time-MODE`), so that no side
finds another's work warm. Each format's aim, in lines/s of CPU as `receipts ingest` parses, is printed beside it,
met or not.
Peak memory is measured in a fresh process per log (VmHWM, benchmarks/peak_rss.py: the kernel's high-water mark of
the whole process, interpreter and polars' arenas included). Every process here sets polars' allocator as the
command line sets it (receipts/cli/allocator.py). Peak memory: the streamed parse at --lines and --big-lines, the whole read (read_log + parse,
the path before streaming) at --lines, and `receipts --db NEW ingest LOG` itself (parse, window, summary and the
write of every step row) at --lines (and --big-lines). The floor under the ingest figures is the same command on
the log built to ~1,000 lines: the interpreter, typer and rich, polars, numpy, DuckDB and SQLAlchemy (the schema);
not pandas nor pyarrow, which the command line leaves out (receipts/cli/lean_imports.py).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from peak_rss import peak_rss_mib
from receipts.cli.allocator import return_freed_memory_at_once

# polars and the parsers load in the functions that use them: a measuring child sets polars' allocator option
# first, as `receipts` does at start-up (receipts/cli/allocator.py), which only works before polars loads.

REALDATA = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "logs"
# Lines/s of CPU, as `receipts ingest` parses (streamed, steps spilled). Megatron's lines, read through polars
# (one anchored extract of the usual start's fields, one for the loss), are ~330 bytes against nanochat's ~120.
AIM_LINES_PER_S = {"nanochat": 1e6, "megatron": 0.5e6, "modded_nanogpt": 1e6}
SOURCES = {
    "nanochat": ("sft_run_gtx1660.log", r"^step (\d+)", "step {:05d}"),
    "megatron": ("megatron-deepspeed__gpt3-0.125B-tokendropping-graduallyIncrease-lr-3.0e-4-baseline.log",
                 r"^ iteration\s+(\d+)/", " iteration {:8d}/"),
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
        while rep == 0 or written < n_lines:  # at least one pass of step lines, whatever the header's length
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


def timed(mode: str, path: Path, repeat: int) -> tuple[float, float]:
    """The least wall and least CPU seconds of `repeat` fresh processes that each do `mode` ('ingest', 'held',
    'read', 'raw') to the log once, timed from after their imports (CPU time is the steadier figure on a shared
    machine: time waiting for a core is not counted)."""
    runs = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, __file__, "--child", f"time-{mode}", str(path)], check=True,
                             capture_output=True, text=True, env=os.environ).stdout
        runs.append([float(x) for x in out.split()[-2:]])
    return min(r[0] for r in runs), min(r[1] for r in runs)


def raw_read(path: Path) -> int:
    """The floor every reader pays: the file's bytes, in the blocks the streamed reader reads."""
    from receipts.ingest.textlog import BLOCK_BYTES

    n = 0
    with open(path, "rb") as f:
        while block := f.read(BLOCK_BYTES):
            n += len(block)
    return n


def polars_read(path: Path) -> int:
    """The floor under every parse: the file's lines as polars Series, block by block, numbered."""
    from receipts.ingest.textlog import read_chunks

    return sum(chunk.frame.height for chunk in read_chunks(path))


def ingest(path: Path, spill: bool = True) -> int:
    """The parse as `receipts ingest` runs it: streamed, the step rows spilled to a scratch folder (or, with
    spill=False, held in memory: the parse code alone)."""
    import polars as pl

    from receipts.ingest import sniff

    with tempfile.TemporaryDirectory(prefix="bench-spill-") as scratch:
        parsed = sniff.parse_streamed(path, spill=Path(scratch) if spill else None)
        assert parsed is not None, f"{path} did not take the streamed path"
        return parsed.steps.lazy().select(pl.len()).collect().item()


def whole(path: Path) -> int:
    from receipts.ingest import log_formats, sniff
    from receipts.ingest.textlog import read_log

    log = read_log(path)
    return log_formats.parser(sniff.detect_log_format(log)).parse(log).steps.height


def peak_in_child(mode: str, path: Path) -> float:
    """Peak RSS (MiB) of a fresh process that does one thing to the log: 'stream', 'whole' or 'store'."""
    out = subprocess.run([sys.executable, __file__, "--child", mode, str(path)], check=True, capture_output=True,
                         text=True, env=os.environ).stdout
    return float(out.split()[-1])


def child(mode: str, path: Path) -> None:
    if os.environ.get("BENCH_ALLOCATOR") != "polars":
        return_freed_memory_at_once()
    if mode.startswith("time-"):
        import polars  # noqa: F401 - imported before the clock starts, as in a command that has started

        from receipts.ingest import sniff  # noqa: F401
        from receipts.ingest.textlog import read_chunks  # noqa: F401

        work = {"ingest": ingest, "held": lambda p: ingest(p, spill=False), "read": polars_read, "raw": raw_read}
        t0, c0 = time.perf_counter(), time.process_time()
        work[mode.removeprefix("time-")](path)
        print(f"{time.perf_counter() - t0} {time.process_time() - c0}")
        return
    if mode == "store":
        from receipts.cli.main import main as receipts_cli

        with tempfile.TemporaryDirectory() as tmp:
            # `receipts --db STORE ingest LOG`, the command itself in this process (its allocator setting too)
            sys.argv = ["receipts", "--db", str(Path(tmp) / "bench.duckdb"), "ingest", str(path)]
            try:
                receipts_cli()
            except SystemExit as done:
                if done.code:
                    raise
    else:
        {"stream": ingest, "whole": whole}[mode](path)
    print(f"{peak_rss_mib():.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=2_000_000)
    ap.add_argument("--big-lines", type=int, default=10_000_000, help="peak RSS of the streamed parse here too")
    ap.add_argument("--formats", nargs="+", default=list(SOURCES), choices=list(SOURCES))
    ap.add_argument("--big-formats", nargs="*", default=["nanochat"], choices=list(SOURCES))
    ap.add_argument("--big-store", action=argparse.BooleanOptionalAction, default=True,
                    help="the whole `receipts ingest` at --big-lines too (minutes: the bootstrap interval is O(n log^2 n))")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--allocator", choices=["receipts", "polars"], default="receipts",
                    help="polars' allocator as `receipts` sets it (freed pages returned at once) or polars' own default")
    ap.add_argument("--megatron-rate", action="store_true",
                    help="only Megatron's lines/s of CPU and its references, on one core (POLARS_MAX_THREADS=1 "
                         "unless set): no peak-memory children, seconds instead of minutes")
    ap.add_argument("--child", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]))
        return
    if args.megatron_rate:
        args.formats, args.big_lines = ["megatron"], 0
        os.environ.setdefault("POLARS_MAX_THREADS", "1")  # an aim in lines/s of CPU is one core's
    if args.allocator == "receipts":
        return_freed_memory_at_once()  # the timed parses too run as `receipts` runs them
    os.environ["BENCH_ALLOCATOR"] = args.allocator  # and the measuring children
    import polars as pl

    print("command: " + " ".join(shlex.quote(a) for a in [*(f"{k}={v}" for k, v in os.environ.items()
                                                             if k == "POLARS_MAX_THREADS"), "python", *sys.argv]))
    print(f"polars {pl.__version__}, threads={pl.thread_pool_size()} "
          f"(POLARS_MAX_THREADS={os.environ.get('POLARS_MAX_THREADS', 'unset')}), least of {args.repeat} fresh processes, "
          f"load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in args.formats:
            path = Path(tmp) / f"{fmt}.log"
            n = build_log(fmt, args.lines, path)
            size_mib = path.stat().st_size / 2**20
            steps = ingest(path)
            t_ingest, cpu_ingest = timed("ingest", path, args.repeat)
            t_mem, cpu_mem = timed("held", path, args.repeat)
            t_read, cpu_read = timed("read", path, args.repeat)
            t_raw, cpu_raw = timed("raw", path, args.repeat)
            assert polars_read(path) == n, "the polars read splits the file into the lines it was built from"
            print(f"\n{fmt}: {n:,} lines ({size_mib:.0f} MiB), {steps:,} steps parsed")
            print(f"  streamed ingest (sniff + parse)     {t_ingest:7.3f} s  {n / t_ingest / 1e6:6.2f} M lines/s "
                  f"(CPU {cpu_ingest:.3f} s: {n / cpu_ingest / 1e6:.2f} M lines/s)")
            aim = AIM_LINES_PER_S[fmt]
            print(f"  aim: >= {aim / 1e6:.1f} M lines/s of CPU as ingest parses: "
                  f"{'met' if n / cpu_ingest >= aim else 'NOT met'} ({n / cpu_ingest / 1e6:.2f} M)")
            print(f"  the same, steps kept in memory      {t_mem:7.3f} s  {n / t_mem / 1e6:6.2f} M lines/s "
                  f"(CPU {cpu_mem:.3f} s: {n / cpu_mem / 1e6:.2f} M lines/s)")
            print(f"  polars read of the lines (reference) {t_read:6.3f} s  {n / t_read / 1e6:6.2f} M lines/s "
                  f"(CPU {cpu_read:.3f} s: {n / cpu_read / 1e6:.2f} M lines/s)   "
                  f"ingest/read = {t_ingest / t_read:.1f}x (CPU {cpu_ingest / cpu_read:.1f}x)")
            print(f"  raw read of the file (8 MiB blocks) {t_raw:7.3f} s  {n / t_raw / 1e6:6.2f} M lines/s   "
                  f"ingest/raw = {t_ingest / t_raw:.1f}x (CPU {cpu_ingest / max(cpu_raw, 1e-9):.1f}x)")
            if args.megatron_rate:
                continue
            print(f"  peak RSS, streamed parse at {n / 1e6:.0f}M lines: {peak_in_child('stream', path):6.0f} MiB")
            print(f"  peak RSS, whole read + parse (before) at {n / 1e6:.0f}M lines: "
                  f"{peak_in_child('whole', path):6.0f} MiB")
            print(f"  peak RSS, `receipts ingest` into a new DuckDB store at {n / 1e6:.0f}M lines: "
                  f"{peak_in_child('store', path):6.0f} MiB")
            head = Path(tmp) / f"{fmt}-head.log"
            n_head = build_log(fmt, 1000, head)  # the header and one pass of the real log's step lines
            print(f"  peak RSS, `receipts ingest` of the same log at {n_head:,} lines (the floor): "
                  f"{peak_in_child('store', head):6.0f} MiB")
            head.unlink()
            path.unlink()
            if fmt in args.big_formats and args.big_lines:
                n_big = build_log(fmt, args.big_lines, path)
                print(f"  peak RSS, streamed parse at {n_big / 1e6:.0f}M lines "
                      f"({path.stat().st_size / 2**20:.0f} MiB): {peak_in_child('stream', path):6.0f} MiB")
                if args.big_store:
                    print(f"  peak RSS, `receipts ingest` into a new DuckDB store at {n_big / 1e6:.0f}M lines: "
                          f"{peak_in_child('store', path):6.0f} MiB")
                path.unlink()


if __name__ == "__main__":
    main()
