"""`receipts explain` over a 10-run lane of profiled receipts: it reads the per-run component summaries stored at
ingest, so it answers in well under a second. References measured in the same run, on the same store:

  bare read    the stored component rows of the 11 receipts, one query (sql/explain_components.sql): the least any
               explain could cost
  recompute    explain on a copy of the store without receipt_components: every run's components computed from
               its anatomy rows on read (what a store upgraded to schema 9 reads until `receipts db upgrade`)

    .venv/bin/python benchmarks/bench_explain.py [--repeat 5]

The lane: the 14 real 2-GPU runs of tests/data/explain (run.log + nsys export each) ingested with the tag `bench`;
the candidate stall_1 against tag:bench --last 10 (10 baseline runs, all profiled; check leaves those
with plants far from the rest out as outliers, so fewer are used). Timings are in-process, best
of --repeat after one warm-up call (the first call of a process also pays its imports: printed apart, as is a whole
`receipts explain` process).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from typer.testing import CliRunner

from receipts.analysis.explain_inputs import RULE
from receipts.analysis.explain_run import explain_in_store
from receipts.analysis.profiles import profiled
from receipts.cli.main import app
from receipts.store import open_store

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "explain"
CANDIDATE, AGAINST, LAST = "stall_1", "tag:bench", 10


def best(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def process_import(module: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "lane.duckdb")
        t0 = time.perf_counter()
        result = CliRunner().invoke(app, ["--db", db, "ingest", "--tag", "bench", *sorted(str(p) for p in DATA.iterdir()
                                                                                       if p.is_dir())])
        assert result.exit_code == 0, result.output[-2000:]
        ingest_s = time.perf_counter() - t0
        ref = str(Path(tmp) / "recompute.duckdb")
        shutil.copyfile(db, ref)
        with open_store(ref) as s:
            s.sql("DELETE FROM receipt_components")

        t0 = time.perf_counter()
        with open_store(db, read_only=True) as store:
            first = explain_in_store(store, CANDIDATE, against=AGAINST, last=LAST)
        first_s = time.perf_counter() - t0
        e = first.explanation
        assert e is not None, first.refusal
        ids = [*e.baseline_runs, *e.candidate_runs]

        with open_store(db, read_only=True) as store:
            exports = {rid: p["source_sha256"] for rid, p in profiled(store, ids).items()}
            bare = best(lambda: store.query("explain_components", {"ids": list(exports), "exports": list(exports.values()),
                                                                   "rule": RULE}), args.repeat)
            stored = best(lambda: explain_in_store(store, CANDIDATE, against=AGAINST, last=LAST), args.repeat)
        with open_store(ref, read_only=True) as store:
            recompute = best(lambda: explain_in_store(store, CANDIDATE, against=AGAINST, last=LAST), args.repeat)
        cli = best(lambda: CliRunner().invoke(app, ["--db", db, "explain", CANDIDATE, "--against", AGAINST, "--last",
                                                    str(LAST), "--json"]), args.repeat)
        def process(*argv: str) -> float:
            t0 = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "receipts.cli.main", "--db", db, *argv], capture_output=True)
            assert done.returncode in (0, 1), done.stderr  # check: 1 = slower, an answer
            return time.perf_counter() - t0
        process_s = process("explain", CANDIDATE, "--against", AGAINST, "--last", str(LAST))
        check_s = process("check", CANDIDATE, "--against", AGAINST, "--last", str(LAST))
        duckdb_s = process_import("duckdb")

        print(f"lane: 14 profiled runs (ingested in {ingest_s:.1f} s); baseline: the {LAST} most recent besides the "
              f"candidate, of which {len(e.baseline_runs)} used (check leaves the planted runs out as outliers); "
              f"{len(e.components)} components")
        print(f"{'what':<44} {'seconds':>8} {'x bare read':>11}")
        for label, s in (("bare read of the stored component rows", bare),
                         ("explain (stored components)", stored),
                         ("explain --json through the CLI, in-process", cli),
                         ("explain, components recomputed from anatomy", recompute)):
            print(f"{label:<44} {s:>8.3f} {s / bare:>10.1f}x")
        print(f"recompute / stored: {recompute / stored:.1f}x")
        print(f"first call in this process (its imports): {first_s:.2f} s")
        print(f"whole processes: receipts explain {process_s:.2f} s, receipts check of the same run {check_s:.2f} s, "
              f"python -c 'import duckdb' {duckdb_s:.2f} s")
        print(f"< 1 s: {'yes' if stored < 1.0 else 'NO'}")
        print("command: .venv/bin/python benchmarks/bench_explain.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
