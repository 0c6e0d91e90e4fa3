"""nsys ingest throughput: parse() on an export scaled to >= 5M kernel rows, against DuckDB scanning
the same kernel columns bare, in the same run (aim <= 3x, peak RSS <= 400 MiB at 5M kernels); and the peak RSS of the
whole `receipts ingest` of it (parse, steady window, straggler analysis, the store's write).

    .venv/bin/python benchmarks/bench_nsys_ingest.py [--kernels 5000000] [--source mfu_2gpu_after.sqlite]

The scaled export is a real one (../shared/realdata/nsys) with its kernel, memcpy, memset and runtime
rows replicated N times, timestamps shifted by the capture's span and correlation ids by their max (each
table copy after copy, so that its rows follow time as a long capture's do: nsys appends them as buffers flush),
plus one `step i` NVTX range per copy (or per `--copies-per-step` copies) and process (opened on a thread that
launches nothing, so step attribution must go through the runtime correlation, any thread). Built once into the
temp dir and reused. Each measurement runs in a fresh child process so its peak RSS and CPU seconds are its own
(CPU: the process's, DuckDB's threads included; the figure to read on a shared, loaded machine).
The reference: DuckDB scanning bare exactly the columns parse() reads from the large tables (kernel, memcpy,
memset, runtime; READS below), the floor of any ingest that reads them; and, for context, the kernel table's
columns alone.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REAL = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "nsys"
TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
          "CUPTI_ACTIVITY_KIND_RUNTIME")
# The columns nsys.parse reads from each large table of such an export, as `receipts ingest` runs it (no
# --keep-raw): ingest/nsys_activity.py _activity_select (the stream and the short name go only to the raw events,
# graphNodeId says whether a kernel ran inside a graph replay, gridX..blockZ its launch shape) and
# sql/_nsys_launches.sql. None other, none fewer: tests/test_bench_nsys_reads.py holds it to the parse on real
# exports.
READS = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ("globalPid", "deviceId", "correlationId", "start", "end", "demangledName",
                                   "graphNodeId", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("globalPid", "deviceId", "correlationId", "start", "end", "copyKind"),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("globalPid", "deviceId", "correlationId", "start", "end"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("globalTid", "correlationId", "start"),
}

# Peak RSS from VmHWM, which exec resets; ru_maxrss in a child reports at least its parent's RSS at the fork.
HWM = """
def _hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
"""
# The parse as `receipts ingest` runs it (argv[2] 'spill': the kept activity and the events in a scratch folder),
# or with everything held in memory ('held': as a worker process or the library call without a folder reads it);
# argv[3], if given, the step pattern (one that matches nothing reads the capture as one window per rank).
PARSE = HWM + """
import json, sys, tempfile, time
from pathlib import Path
from receipts.ingest import nsys
from receipts.schema.categories import load_category_rules
with tempfile.TemporaryDirectory() as scratch:
    t, c = time.perf_counter(), time.process_time()
    a = nsys.parse(Path(sys.argv[1]), rules=load_category_rules(),
                   spill=Path(scratch) if sys.argv[2] == "spill" else None,
                   **({"step_pattern": sys.argv[3]} if len(sys.argv) > 3 else {}))
    s, cpu = time.perf_counter() - t, time.process_time() - c
print(json.dumps({"s": s, "cpu": cpu, "rss": _hwm(),
                  "steps": a.steps.height, "unattributed": a.unattributed, "activities": int(a.steps["kernels"].sum())}))
"""
# The whole command, as a user runs it: parse, the steady window, the straggler analysis, the store's write.
INGEST = HWM + """
import json, sys, tempfile, time
from pathlib import Path
from receipts.cli.main import main
with tempfile.TemporaryDirectory() as tmp:
    sys.argv = ["receipts", "--db", str(Path(tmp) / "bench.duckdb"), "ingest", sys.argv[1]]
    t, c = time.perf_counter(), time.process_time()
    try:
        main()
    except SystemExit as done:
        if done.code:
            raise
    s, cpu = time.perf_counter() - t, time.process_time() - c
print(json.dumps({"s": s, "cpu": cpu, "rss": _hwm()}))
"""
# argv[2]: the tables to scan, as JSON {table: columns}; every column aggregated, so that each is read.
SCAN = HWM + """
import json, sys, time
from receipts import duck
con = duck.connect(extensions=("sqlite_scanner",))
t, c = time.perf_counter(), time.process_time()
rows = [con.execute("SELECT count(*), " + ", ".join(f'max("{col}")' for col in cols)
                    + " FROM sqlite_scan(?, ?)", [sys.argv[1], table]).fetchone()[0]
        for table, cols in json.loads(sys.argv[2]).items()]
s, cpu = time.perf_counter() - t, time.process_time() - c
print(json.dumps({"s": s, "cpu": cpu, "rss": _hwm(), "rows": rows}))
"""


def build(source: Path, kernels: int, copies_per_step: int = 1) -> Path:
    with sqlite3.connect(source) as db:
        base = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    copies = -(-kernels // base)
    per_step = f"-{copies_per_step}-per-step" if copies_per_step > 1 else ""
    out = Path(tempfile.gettempdir()) / f"receipts-bench-{source.stem}-x{copies}{per_step}-in-time-order.sqlite"
    if out.is_file():
        return out
    part = out.with_suffix(".part")
    part.unlink(missing_ok=True)
    part.write_bytes(source.read_bytes())
    part.chmod(0o644)
    db = sqlite3.connect(part)
    db.execute("PRAGMA journal_mode = OFF")
    db.execute("PRAGMA synchronous = OFF")
    # Runtime calls included: a launch precedes its kernel, and must fall inside its copy's step.
    bounds = [db.execute(f'SELECT min(start), max("end") FROM {t}').fetchone() for t in TABLES]
    lo, hi = min(b[0] for b in bounds), max(b[1] for b in bounds)
    span = hi - lo + 1_000_000
    corr = 1 + max(db.execute(f"SELECT max(correlationId) FROM {t}").fetchone()[0] or 0 for t in TABLES)
    db.execute(f"CREATE TEMP TABLE n AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
               f"WHERE i < {copies - 1}) SELECT i FROM n")
    for table in TABLES:
        cols = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
        shifted = {"start": f"start + n.i * {span}", "end": f'"end" + n.i * {span}',
                   "correlationId": f"correlationId + n.i * {corr}"}
        select = ", ".join(shifted.get(c, f'b."{c}"') for c in cols)
        db.execute(f"CREATE TEMP TABLE b AS SELECT * FROM {table}")
        db.execute(f'INSERT INTO {table} ({", ".join(chr(34) + c + chr(34) for c in cols)}) '
                   f"SELECT {select} FROM n CROSS JOIN b")  # copy by copy: rows in time order, as nsys writes
        db.execute("DROP TABLE b")
    # One step range per `copies_per_step` copies and process, on a thread id no launch uses (pid | 0xABCDE).
    db.execute("INSERT INTO n VALUES (0)")
    k = copies_per_step
    db.execute(f"INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) "
               f"SELECT {lo} + n.i * {span}, {hi} + 1 + (n.i + {k - 1}) * {span}, 59, 'step ' || (n.i / {k}), "
               "p.globalPid + 703710 FROM n CROSS JOIN (SELECT DISTINCT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL) AS p "
               f"WHERE n.i % {k} = 0")
    db.commit()
    db.close()
    part.rename(out)
    return out


def run(code: str, path: Path, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code, str(path), *args], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=5_000_000)
    ap.add_argument("--source", default="mfu_2gpu_after.sqlite")
    ap.add_argument("--repeat", type=int, default=2, help="the least of N fresh processes for each measurement")
    ap.add_argument("--without-steps", action="store_true",
                    help="parse with a step pattern that matches nothing: one window per rank (the whole-ingest row "
                         "still reads the steps: `receipts ingest` takes the default pattern)")
    ap.add_argument("--copies-per-step", type=int, default=1,
                    help="copies of the source capture in one step (2: half the steps, each twice as long): "
                         "whether the peak follows the activity or the steps")
    args = ap.parse_args()
    load_at_start = " ".join(f"{x:.2f}" for x in os.getloadavg())
    t = time.perf_counter()
    path = build(REAL / args.source, args.kernels, args.copies_per_step)
    print(f"export: {path} ({path.stat().st_size / 2**30:.2f} GiB, ready in {time.perf_counter() - t:.1f} s)")
    kernel = "CUPTI_ACTIVITY_KIND_KERNEL"
    least = lambda runs: {**runs[-1], "s": min(r["s"] for r in runs), "cpu": min(r["cpu"] for r in runs)}  # noqa: E731
    scan = least([run(SCAN, path, json.dumps({kernel: READS[kernel]})) for _ in range(args.repeat)])
    scan_all = least([run(SCAN, path, json.dumps(READS)) for _ in range(args.repeat)])
    pattern = [r"^no such range (\d+)$"] if args.without_steps else []
    parsed = least([run(PARSE, path, "spill", *pattern) for _ in range(args.repeat)])
    held = least([run(PARSE, path, "held", *pattern) for _ in range(args.repeat)])
    ingested = run(INGEST, path)
    rows = scan["rows"][0]
    print(f"\n{'measurement (least of --repeat fresh processes)':<50}{'seconds':>9}{'CPU s':>8}{'kernel rows/CPU-s':>19}"
          f"{'peak RSS MiB':>14}")
    for label, r in (("duckdb sqlite_scan, the kernel columns parse reads", scan),
                     ("duckdb sqlite_scan, all columns parse reads (ref)", scan_all),
                     ("nsys.parse, spilled (as `receipts ingest`)", parsed),
                     ("nsys.parse, held in memory (workers, API)", held),
                     ("`receipts ingest` into a new store (once)", ingested)):
        print(f"{label:<50}{r['s']:>9.2f}{r['cpu']:>8.2f}{rows / r['cpu']:>19,.0f}{r['rss'] / 2**20:>14,.0f}")
    kernels, memcpy, memset, runtime = scan_all["rows"]
    print(f"\nrows: kernel {kernels:,}, memcpy {memcpy:,}, memset {memset:,}, runtime {runtime:,}; steps: "
          f"{parsed['steps']:,}; activities in steps: {parsed['activities']:,}; unattributed: {parsed['unattributed']:,}")
    print(f"parse / bare scan of all it reads: {parsed['s'] / scan_all['s']:.2f}x wall, "
          f"{parsed['cpu'] / scan_all['cpu']:.2f}x CPU (aim <= 3x); parse / bare scan of the kernel columns: "
          f"{parsed['cpu'] / scan['cpu']:.2f}x CPU; peak RSS {parsed['rss'] / 2**20:,.0f} MiB")
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}; load average at the start: {load_at_start}, "
          "at the end: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
