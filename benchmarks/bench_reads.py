"""Reads that do not scale with steps: `show`, `compare` and `list` on a store holding a receipt of
N steps, with the steady-state summaries stored at ingest, against the reference measured in the same run: the
same commands on a copy of the store without the summaries (what every read did before schema 6: every step row
through the statistics).

    .venv/bin/python benchmarks/bench_reads.py [--lines 2000000] [--repeat 3]

The log is nanochat's real step lines (../shared/realdata/logs/sft_run_gtx1660.log) repeated with renumbered
steps (benchmarks/bench_log_ingest.build_log), ingested twice under two run names (a same-lane pair to compare).
Timings are in-process CLI calls (typer's CliRunner), best of --repeat; peak RSS is the process high-water mark.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_log_ingest import build_log  # noqa: E402

from typer.testing import CliRunner  # noqa: E402

from receipts.cli.main import app  # noqa: E402
from receipts.store import open_store  # noqa: E402

IDENTITY = ["--host-lineage", "bench-host", "--preset", "bench_preset", "--regime", "single/no-compile"]


def run(db: str, *args: str) -> float:
    t0 = time.perf_counter()
    result = CliRunner().invoke(app, ["--db", db, *args], catch_exceptions=False)
    elapsed = time.perf_counter() - t0
    assert result.exit_code == 0, result.output[-2000:]
    return elapsed


def best(db: str, repeat: int, *args: str) -> float:
    return min(run(db, *args) for _ in range(repeat))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "big.log"
        build_log("nanochat", args.lines, log)
        db = str(Path(tmp) / "fast.duckdb")
        t0 = time.perf_counter()
        run(db, "ingest", str(log), "--run-name", "big_a", *IDENTITY, "--format", "nanochat")
        ingest_s = time.perf_counter() - t0
        # a second receipt of the same lane: the same log with one line changed (a new content hash)
        log_b = Path(tmp) / "big_b.log"
        with open(log, "rb") as src, open(log_b, "wb") as dst:
            shutil.copyfileobj(src, dst)
            dst.write(b"# another run\n")
        run(db, "ingest", str(log_b), "--run-name", "big_b", *IDENTITY, "--format", "nanochat")
        slow = str(Path(tmp) / "reference.duckdb")
        shutil.copyfile(db, slow)
        with open_store(slow) as s:
            s.sql("DELETE FROM receipt_summaries")
        print(f"store: 2 receipts of {args.lines:,} log lines each (ingest of one: {ingest_s:.1f} s)")
        print(f"{'read':<10} {'summaries (s)':>14} {'recompute (s)':>14} {'speed-up':>9}")
        for label, cmd in (("show", ["show", "big_a", "--json"]), ("compare", ["compare", "big_a", "big_b", "--json"]),
                           ("list", ["list", "--json"])):
            fast, ref = best(db, args.repeat, *cmd), best(slow, args.repeat, *cmd)
            print(f"{label:<10} {fast:>14.3f} {ref:>14.3f} {ref / fast:>8.1f}x")
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"peak RSS of this process: {rss:,.0f} MiB")
        print("command: .venv/bin/python benchmarks/bench_reads.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
