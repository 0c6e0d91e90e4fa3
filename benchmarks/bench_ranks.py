"""Many ranks in parallel: a 64-rank Kineto profile (or a job profiled one nsys report
per rank) read serially, in worker processes and on a Dask LocalCluster, against the serial path, with the
same numbers.

    .venv/bin/python benchmarks/bench_ranks.py [--ranks 64] [--workers 1 2] [--repeat 2] [--no-dask]
    .venv/bin/python benchmarks/bench_ranks.py --format nsys --ranks 16 [--workers 2]

`--format nsys`: N exports built from our real per-rank pair (tests/data/gpu/multiexport/per_rank_gloo, one
`nsys profile` per rank): rank r is a copy of real rank r % 2 with RANK=r and WORLD_SIZE=N in its captured
environment and its session start moved r x 7 us later; the serial path is each export read in turn and
reduced (nsys_job.combine), as `--workers 1` reads them.

The set is synthetic, built from our real 2×H200 FSDP2 traces (tests/data/gpu/fsdp2_2gpu_kineto): rank r
is a copy of real rank r % 2, its distributedInfo.rank renumbered to r and world_size to --ranks, every
event's `ts` shifted by r × 7 µs (whole µs, text edited in place so the writer's layout, which the fast
reader relies on, is kept). It is written under /tmp (--set-dir), never into the project.

Each configuration runs in a fresh process (`--one MODE`), --repeat times, best wall time kept (the
machine is shared): `serial` is kineto.parse_files (the reference: the path every ingest took before),
`workers=N` the process pool of ingest/execution.py, `dask-local` a LocalCluster of the largest --workers
processes (cluster start-up included: `receipts ingest --dask local` pays it too), `start-up=N` the pool
alone (N spawned workers importing the reader, no trace: the fixed cost behind AUTO_MIN_BYTES). Peak RSS: the parent's
own (VmHWM) and each worker's after its last task. Every configuration's anatomy is digested (each frame
sorted by all its columns, every other field as is) and must equal the serial digest.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import hashlib
import json
import multiprocessing
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from peak_rss import peak_rss_mib

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "tests" / "data" / "gpu" / "fsdp2_2gpu_kineto" / "traces"
NSYS_SOURCE = ROOT / "tests" / "data" / "gpu" / "multiexport" / "per_rank_gloo"
SHIFT_US = 7


def build_set(out: Path, ranks: int) -> list[Path]:
    """`ranks` traces from the real 2-rank pair: renumbered, timestamps shifted, the layout untouched."""
    sources = sorted(SOURCE.glob("rank*.pt.trace.json.gz"))
    files = [out / f"rank{r}.pt.trace.json.gz" for r in range(ranks)]
    stamp = out / f".built-{ranks}-{SHIFT_US}"
    if stamp.exists() and all(f.exists() for f in files):
        return files
    out.mkdir(parents=True, exist_ok=True)
    texts = [gzip.decompress(p.read_bytes()).decode() for p in sources]
    ts = re.compile(r'"ts": (\d+)')
    for r, path in enumerate(files):
        text = texts[r % len(texts)]
        text = re.sub(r'("distributedInfo": \{[^}]*?"rank": )\d+(, "world_size": )\d+',
                      lambda m: f"{m.group(1)}{r}{m.group(2)}{ranks}", text, count=1)
        text = ts.sub(lambda m: f'"ts": {int(m.group(1)) + r * SHIFT_US}', text)
        path.write_bytes(gzip.compress(text.encode(), compresslevel=1))
    stamp.touch()
    return files


def build_nsys_set(out: Path, ranks: int) -> list[Path]:
    """`ranks` exports from the real per-rank pair: RANK / WORLD_SIZE rewritten, session starts moved."""
    import sqlite3

    files = [out / f"rank{r}.sqlite" for r in range(ranks)]
    stamp = out / f".built-nsys-{ranks}-{SHIFT_US}"
    if stamp.exists() and all(f.exists() for f in files):
        return files
    out.mkdir(parents=True, exist_ok=True)
    sources = [gzip.decompress((NSYS_SOURCE / f"rank{r}.sqlite.gz").read_bytes()) for r in (0, 1)]
    for r, path in enumerate(files):
        path.write_bytes(sources[r % 2])
        with sqlite3.connect(path) as db:
            env = db.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'").fetchone()[0]
            env = re.sub(r"(^|;)RANK=\d+", rf"\g<1>RANK={r}", env)
            env = re.sub(r"(^|;)WORLD_SIZE=\d+", rf"\g<1>WORLD_SIZE={ranks}", env)
            db.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = ? WHERE name = 'DeviceEnvironment'", [env])
            db.execute("UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + ?", [r * SHIFT_US * 1000])
    stamp.touch()
    return files


def digest(anatomy) -> str:
    import polars as pl

    h = hashlib.sha256()
    for f in dataclasses.fields(anatomy):
        value = getattr(anatomy, f.name)
        if isinstance(value, pl.DataFrame):
            value = value.sort(value.columns, nulls_last=True).write_csv(float_precision=None)
        h.update(f"{f.name}={value!r}\n".encode())
    return h.hexdigest()[:16]


def _import_reader(_: int) -> int:
    import receipts.ingest.kineto  # noqa: F401

    return os.getpid()


def one(mode: str, files: list[Path], fmt: str = "kineto") -> dict:
    """One configuration, in this (fresh) process: wall time, peak RSS, the anatomy's digest."""
    from receipts.ingest import kineto
    from receipts.pipeline import execution
    from receipts.schema.categories import load_category_rules

    rules = load_category_rules()
    stats = execution.MapStats()
    parse = execution.parse_kineto if fmt == "kineto" else execution.parse_nsys_job
    t0 = time.perf_counter()
    if mode.startswith("start-up="):  # the pool alone: N spawned workers importing the reader, no trace read
        n = int(mode.split("=")[1])
        with ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn")) as pool:
            list(pool.map(_import_reader, range(n)))
        return {"mode": mode, "wall_s": time.perf_counter() - t0, "where": f"{n} workers, no task",
                "parent_peak_mib": peak_rss_mib(), "worker_peak_mib": [], "digest": None}
    if mode == "serial":
        anatomy = (kineto.parse_files(files, rules=rules) if fmt == "kineto"
                   else execution.parse_nsys_job(files, rules=rules, plan=execution.RankMap(1)))
    elif mode.startswith("workers="):
        anatomy = parse(files, rules=rules, plan=execution.RankMap(int(mode.split("=")[1])), stats=stats)
    else:  # dask-local:N
        anatomy = parse(files, rules=rules, plan=execution.RankMap(int(mode.split(":")[1]), "local"), stats=stats)
    wall = time.perf_counter() - t0
    return {"mode": mode, "wall_s": wall, "where": stats.where, "parent_peak_mib": peak_rss_mib(),
            "worker_peak_mib": sorted(v / 1024 for v in stats.peak_rss_kib.values()) if mode != "serial" else [],
            "digest": digest(anatomy), "ranks": anatomy.ranks_traced, "steps": anatomy.steps.height}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--no-dask", action="store_true")
    ap.add_argument("--format", choices=("kineto", "nsys"), default="kineto")
    ap.add_argument("--set-dir", type=Path, default=Path("/tmp/receipts-bench-ranks"))
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    set_dir = args.set_dir / args.format
    files = (build_set if args.format == "kineto" else build_nsys_set)(set_dir, args.ranks)
    if args.one:
        print(json.dumps(one(args.one, files, args.format)))
        return
    size = sum(f.stat().st_size for f in files) / 2**20
    source = SOURCE if args.format == "kineto" else NSYS_SOURCE
    print(f"# {args.ranks} ranks from {source.relative_to(ROOT)}: {size:.1f} MiB "
          f"{'gzipped traces' if args.format == 'kineto' else 'of SQLite exports'} in {set_dir}; "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    modes = ["serial", *(f"workers={w}" for w in args.workers)]
    if not args.no_dask:
        modes.append(f"dask-local:{max(args.workers)}")
    modes.append(f"start-up={max(args.workers)}")
    results = {}
    for mode in modes:
        runs = [json.loads(subprocess.run([sys.executable, __file__, "--ranks", str(args.ranks), "--set-dir",
                                           str(args.set_dir), "--format", args.format, "--one", mode], check=True,
                                          capture_output=True,
                                          text=True).stdout.strip().splitlines()[-1]) for _ in range(args.repeat)]
        results[mode] = min(runs, key=lambda r: r["wall_s"])
    ref = results["serial"]
    print(f"{'configuration':<16} {'wall s':>7} {'vs serial':>9} {'parent peak MiB':>15}  {'worker peak MiB':<24} "
          f"same numbers")
    for mode, r in results.items():
        workers = ", ".join(f"{v:.0f}" for v in r["worker_peak_mib"]) or "-"
        same = "-" if r["digest"] is None else "yes" if r["digest"] == ref["digest"] else "NO"
        print(f"{mode:<16} {r['wall_s']:7.2f} {ref['wall_s'] / r['wall_s']:8.2f}x {r['parent_peak_mib']:15.0f}  "
              f"{workers:<24} {same} ({r['where']})")
    print(f"# load average after: {os.getloadavg()[0]:.1f}; command: .venv/bin/python benchmarks/bench_ranks.py "
          + " ".join(sys.argv[1:]))
    if any(r["digest"] not in (None, ref["digest"]) for r in results.values()):
        sys.exit("a configuration's anatomy differs from the serial path's")


if __name__ == "__main__":
    main()
