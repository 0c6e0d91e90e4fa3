"""`receipts push`: a node's DuckDB store copied to the team's store, to a fresh DuckDB file and to PostgreSQL.

    .venv/bin/python benchmarks/bench_push.py [--receipts 2000] [--store KEEP.duckdb] [--no-postgres]

The source is bench_gate.py's store (real receipts replicated with varied identities, every receipt with its
stored summary), of --receipts receipts. Timed, each once, as a subprocess (`receipts --db SOURCE push --to
TARGET`, interpreter start included): the first push into an empty target, then the push again with nothing
to copy. On PostgreSQL each receipt is its own transaction (store/sync.py), so a push interrupted or run from two
nodes at once copies every receipt exactly once; a DuckDB file (one writer at a time) takes a batch of receipts
in one; the source is read a query per table per batch.

Reference, in the same run: DuckDB copying the same tables bare (ATTACH the source, CREATE TABLE AS SELECT each
table into a new file): the floor of moving the rows, without a transaction per receipt or the target's checks.
Peak RSS of each push: the child's (VmHWM through /usr/bin/time's %M). PostgreSQL: RECEIPTS_TEST_PG or the
server .ci/postgres_setup.sh starts, a fresh database per run, dropped after.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench_backends import init_schema, postgres_url, with_dbname
from bench_gate import build_store

REPO = Path(__file__).resolve().parents[1]


def timed_push(exe: str, source: Path, target: str) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MiB, the command's last line) of one push as a subprocess."""
    start = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-f", "%M", exe, "--db", str(source), "push", "--to", target],
                          capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    return wall, int(done.stderr.strip().splitlines()[-1]) / 1024, done.stdout.strip().splitlines()[-1]


def bare_copy(source: Path, target: Path) -> float:
    import duckdb

    start = time.perf_counter()
    con = duckdb.connect(str(target))
    con.execute(f"ATTACH '{source}' AS src (READ_ONLY)")
    for (table,) in con.execute("SELECT table_name FROM information_schema.tables WHERE table_catalog = 'src'"
                                ).fetchall():
        con.execute(f'CREATE TABLE "{table}" AS SELECT * FROM src."{table}"')
    con.close()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--receipts", type=int, default=2000)
    ap.add_argument("--store", type=Path, help="keep the built source store here and reuse it when it exists")
    ap.add_argument("--no-postgres", action="store_true")
    args = ap.parse_args()
    exe_s = str(Path(sys.executable).with_name("receipts"))  # the CLI of the interpreter running this
    with tempfile.TemporaryDirectory() as tmp:
        source = args.store or Path(tmp) / "source.duckdb"
        if not source.exists():
            build_store(source, args.receipts)
        import duckdb

        with duckdb.connect(str(source), read_only=True) as con:
            n_receipts, n_steps = con.execute("SELECT (SELECT count(*) FROM receipts), "
                                              "(SELECT count(*) FROM receipt_steps)").fetchone()
        t_ref = bare_copy(source, Path(tmp) / "bare.duckdb")
        rows = [("DuckDB file", *timed_push(exe_s, source, str(Path(tmp) / "team.duckdb")),
                 timed_push(exe_s, source, str(Path(tmp) / "team.duckdb"))[0])]
        if not args.no_postgres:
            import psycopg

            admin_url = postgres_url()
            dbname = f"receipts_push_{uuid.uuid4().hex[:8]}"
            with psycopg.connect(admin_url, autocommit=True) as admin:
                admin.execute(f'CREATE DATABASE "{dbname}"')
                try:
                    url = with_dbname(admin_url, dbname)
                    init_schema(url)
                    rows.append(("PostgreSQL", *timed_push(exe_s, source, url), timed_push(exe_s, source, url)[0]))
                finally:
                    admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
    print(f"source: {n_receipts:,} receipts, {n_steps:,} step rows; load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs")
    print(f"reference: DuckDB copying every table bare into a new file  {t_ref:7.2f} s")
    for target, wall, rss, said, again in rows:
        print(f"push to {target:<12} {wall:7.2f} s ({n_receipts / wall:5.0f} receipts/s, {wall / t_ref:5.1f}x the "
              f"bare copy), peak RSS {rss:5.0f} MiB; again, nothing to copy: {again:5.2f} s")
        print(f"  {said}")
    print("command: " + " ".join([Path(sys.executable).name, *sys.argv]))


if __name__ == "__main__":
    main()
