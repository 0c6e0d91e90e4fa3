"""nsys ingest throughput: parse() on an export scaled to >= 5M kernel rows, against DuckDB scanning
the same kernel columns bare, in the same run (issue 15: aim <= 3x, bounded peak RSS); and the peak RSS of the
whole `receipts ingest` of it (parse, steady window, straggler analysis, the store's write).

    .venv/bin/python benchmarks/bench_nsys_ingest.py [--kernels 5000000] [--source mfu_2gpu_after.sqlite]

The scaled export is a real one (../shared/realdata/nsys) with its kernel, memcpy, memset and runtime
rows replicated N times, timestamps shifted by the capture's span and correlation ids by their max (each
table copy after copy, so that its rows follow time as a long capture's do: nsys appends them as buffers flush),
plus one `step i` NVTX range per copy (or per `--copies-per-step` copies) and process (opened on a thread that
launches nothing, so step attribution must go through the runtime correlation, any thread). Built once into the
temp dir and reused. Each measurement runs in a fresh child process so its peak RSS is its own.
A second reference, for context: DuckDB scanning bare every column parse() must read from the large
tables (kernel, memcpy, memset, runtime), the floor of any ingest that reads them.
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
KERNEL_COLS = ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "demangledName", "shortName")
TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
          "CUPTI_ACTIVITY_KIND_RUNTIME")

# Peak RSS from VmHWM, which exec resets; ru_maxrss in a child reports at least its parent's RSS at the fork.
HWM = """
def _hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
"""
# The parse as `receipts ingest` runs it (argv[2] 'spill': the kept activity and the events in a scratch folder),
# or with everything held in memory ('held': as a worker process or the library call without a folder reads it);
# argv[3] the correlation path ('spill': the hand-written partitions; 'duckdb': DuckDB's hash aggregate and join
# under memory_limit and temp_directory); argv[4], if given, the step pattern (one that matches nothing reads the
# capture as one window per rank).
PARSE = HWM + """
import json, sys, tempfile, time
from pathlib import Path
from receipts.ingest import nsys
from receipts.schema.categories import load_category_rules
with tempfile.TemporaryDirectory() as scratch:
    t = time.perf_counter()
    a = nsys.parse(Path(sys.argv[1]), rules=load_category_rules(),
                   spill=Path(scratch) if sys.argv[2] == "spill" else None, correlation=sys.argv[3],
                   **({"step_pattern": sys.argv[4]} if len(sys.argv) > 4 else {}))
    s = time.perf_counter() - t
print(json.dumps({"s": s, "rss": _hwm(),
                  "steps": a.steps.height, "unattributed": a.unattributed, "activities": int(a.steps["kernels"].sum())}))
"""
# The whole command, as a user runs it: parse, the steady window, the straggler analysis, the store's write.
INGEST = HWM + """
import json, sys, tempfile, time
from pathlib import Path
from receipts.cli.main import main
with tempfile.TemporaryDirectory() as tmp:
    sys.argv = ["receipts", "--db", str(Path(tmp) / "bench.duckdb"), "ingest", sys.argv[1]]
    t = time.perf_counter()
    try:
        main()
    except SystemExit as done:
        if done.code:
            raise
    s = time.perf_counter() - t
print(json.dumps({"s": s, "rss": _hwm()}))
"""
SCAN = HWM + """
import json, sys, time
from receipts import duck
con = duck.connect(extensions=("sqlite_scanner",))
t = time.perf_counter()
row = con.execute("SELECT count(*), sum(\\"end\\" - start), max(deviceId), max(streamId), max(correlationId), "
                  "max(globalPid), max(demangledName), max(shortName) "
                  "FROM sqlite_scan(?, 'CUPTI_ACTIVITY_KIND_KERNEL')", [sys.argv[1]]).fetchone()
s = time.perf_counter() - t
print(json.dumps({"s": s, "rss": _hwm(), "rows": row[0]}))
"""
SCAN_ALL = HWM + """
import json, sys, time
from receipts import duck
con = duck.connect(extensions=("sqlite_scanner",))
t = time.perf_counter()
cols = ("count(*), max(start), max(\\"end\\"), max(deviceId), max(streamId), max(correlationId), max(globalPid)")
rows = [con.execute(f"SELECT {cols}{extra} FROM sqlite_scan(?, '{table}')", [sys.argv[1]]).fetchone()[0]
        for table, extra in (("CUPTI_ACTIVITY_KIND_KERNEL", ", max(demangledName), max(shortName)"),
                             ("CUPTI_ACTIVITY_KIND_MEMCPY", ", max(copyKind)"), ("CUPTI_ACTIVITY_KIND_MEMSET", ""))]
rows.append(con.execute("SELECT count(*), max(start), max(correlationId), max(globalTid) "
                        "FROM sqlite_scan(?, 'CUPTI_ACTIVITY_KIND_RUNTIME')", [sys.argv[1]]).fetchone()[0])
s = time.perf_counter() - t
print(json.dumps({"s": s, "rss": _hwm(), "rows": rows}))
"""

# DuckDB alone doing what the hand-written spill does: the earliest runtime call per (process, correlation id) (hash
# aggregate), each activity's launch (hash join), its step (the range open at the launch, by an ASOF join), and the
# activity ordered by (process, step, start) for the per-step interval arithmetic (the bins' job): the query only,
# no anatomy, so a floor under a parse built on it. argv[2]: memory_limit; argv[3]: threads.
SORTED = HWM + r"""
import json, sys, tempfile, time
from receipts import duck
QUERY = '''
WITH gpu AS (
    SELECT globalPid AS pid_key, correlationId AS corr_id, start AS start_ns, "end" AS end_ns, 0::UTINYINT AS kind,
           demangledName AS name_id, NULL::BIGINT AS copy_kind FROM nsys.CUPTI_ACTIVITY_KIND_KERNEL
    UNION ALL SELECT globalPid, correlationId, start, "end", 1, NULL, copyKind FROM nsys.CUPTI_ACTIVITY_KIND_MEMCPY
    UNION ALL SELECT globalPid, correlationId, start, "end", 2, NULL, NULL FROM nsys.CUPTI_ACTIVITY_KIND_MEMSET),
rt AS (SELECT globalTid - (globalTid & 16777215) AS pid_key, correlationId AS corr_id, min(start) AS launch_ns
       FROM nsys.CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY ALL),
launched AS (SELECT g.*, r.launch_ns FROM gpu AS g LEFT JOIN rt AS r USING (pid_key, corr_id))
SELECT l.pid_key, CASE WHEN l.launch_ns < s.e THEN s.code ELSE -1 END AS code, l.kind, l.name_id, l.copy_kind,
       l.start_ns, l.end_ns
FROM launched AS l ASOF LEFT JOIN steps AS s ON s.pid_key = l.pid_key AND l.launch_ns >= s.s
ORDER BY l.pid_key, code, l.start_ns
'''
con = duck.connect(extensions=("sqlite_scanner",))
with tempfile.TemporaryDirectory() as scratch:
    con.execute(f"SET memory_limit = '{sys.argv[2]}'")
    con.execute(f"SET threads = {sys.argv[3]}")
    con.execute(f"SET temp_directory = '{scratch}'")
    con.execute("SET preserve_insertion_order = false")
    con.execute(f"ATTACH '{sys.argv[1]}' AS nsys (TYPE sqlite, READ_ONLY)")
    t = time.perf_counter()
    con.execute('''CREATE TEMP TABLE steps AS SELECT globalTid - (globalTid & 16777215) AS pid_key, start AS s,
                   "end" AS e, row_number() OVER (ORDER BY start)::INTEGER AS code FROM nsys.NVTX_EVENTS
                   WHERE eventType = 59 AND regexp_matches(text, '^step [0-9]+$')''')
    try:
        rows = sum(b.num_rows for b in con.execute(QUERY).fetch_record_batch(1 << 17))
    except Exception as exc:  # the measurement says it did not run
        rows = type(exc).__name__
    s = time.perf_counter() - t
print(json.dumps({"s": s, "rss": _hwm(), "rows": rows}))
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
    ap.add_argument("--repeat", type=int, default=2, help="best of N for each side")
    ap.add_argument("--without-steps", action="store_true",
                    help="parse with a step pattern that matches nothing: one window per rank (the whole-ingest row "
                         "still reads the steps: `receipts ingest` takes the default pattern)")
    ap.add_argument("--copies-per-step", type=int, default=1,
                    help="copies of the source capture in one step (2: half the steps, each twice as long): "
                         "whether the peak follows the activity or the steps")
    ap.add_argument("--sort-memory", nargs="*", default=["256MB", "512MB"],
                    help="memory_limit of each run of the DuckDB-only query with ORDER BY (one thread)")
    args = ap.parse_args()
    load_at_start = " ".join(f"{x:.2f}" for x in os.getloadavg())
    t = time.perf_counter()
    path = build(REAL / args.source, args.kernels, args.copies_per_step)
    print(f"export: {path} ({path.stat().st_size / 2**30:.2f} GiB, ready in {time.perf_counter() - t:.1f} s)")
    scan = min((run(SCAN, path) for _ in range(args.repeat)), key=lambda r: r["s"])
    scan_all = min((run(SCAN_ALL, path) for _ in range(args.repeat)), key=lambda r: r["s"])
    pattern = [r"^no such range (\d+)$"] if args.without_steps else []
    parsed = min((run(PARSE, path, "spill", "spill", *pattern) for _ in range(args.repeat)), key=lambda r: r["s"])
    held = min((run(PARSE, path, "held", "spill", *pattern) for _ in range(args.repeat)), key=lambda r: r["s"])
    duck_parsed = min((run(PARSE, path, "spill", "duckdb", *pattern) for _ in range(args.repeat)),
                      key=lambda r: r["s"])
    duck_sorted = [run(SORTED, path, memory, "1") for memory in args.sort_memory]
    ingested = run(INGEST, path)
    print(f"\n{'measurement':<60}{'seconds':>9}{'x all-cols scan':>16}{'peak RSS MiB':>14}")
    for label, r in (("duckdb sqlite_scan, kernel cols (ref)", scan),
                     ("duckdb sqlite_scan, all cols parse reads (ref)", scan_all),
                     ("nsys.parse, hand-written spill (as `receipts ingest`)", parsed),
                     ("nsys.parse, hand-written, held in memory", held),
                     ("nsys.parse, DuckDB correlation + steps, spilled", duck_parsed),
                     *((f"DuckDB join + ASOF + ORDER BY, query only, {m}", r)
                       for m, r in zip(args.sort_memory, duck_sorted)),
                     ("`receipts ingest` into a new store (once)", ingested)):
        note = f"  ({r['rows']})" if isinstance(r.get("rows"), str) else ""
        print(f"{label:<60}{r['s']:>9.2f}{r['s'] / scan_all['s']:>15.2f}x{r['rss'] / 2**20:>14,.0f}{note}")
    kernels, memcpy, memset, runtime = scan_all["rows"]
    print(f"\nrows: kernel {kernels:,}, memcpy {memcpy:,}, memset {memset:,}, runtime {runtime:,}; steps: "
          f"{parsed['steps']:,}; activities in steps: {parsed['activities']:,}; unattributed: {parsed['unattributed']:,}")
    for label, r in (("hand-written spill", parsed), ("DuckDB correlation", duck_parsed)):
        print(f"{label}: parse / bare scan of all it reads {r['s'] / scan_all['s']:.2f}x (aim <= 3x), "
              f"/ bare kernel scan {r['s'] / scan['s']:.2f}x; peak RSS {r['rss'] / 2**20:,.0f} MiB (aim <= 400)")
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}; load average at the start: {load_at_start}, "
          "at the end: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
