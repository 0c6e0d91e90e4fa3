"""DuckDB file vs PostgreSQL, side by side: write throughput and `compare` latency.

    RECEIPTS_TEST_PG=postgresql://receipts:receipts@127.0.0.1/receipts_test .venv/bin/python benchmarks/bench_backends.py

Without RECEIPTS_TEST_PG it runs .ci/postgres_setup.sh (installs/starts a local server) and uses the
URL it prints. Each run makes a fresh database (dropped afterwards) and a fresh DuckDB file, so the two
backends are measured on the same machine in the same run; the ratio column is PostgreSQL / DuckDB.

What is timed: only the store (Store.write_receipt, then the compare path: two loads and the
comparison), never parsing: the logs are parsed once, up front, and both backends get the same
Receipt objects.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def native_log(path: Path, *, steps: int, seed: int) -> Path:
    """A RECEIPT-format log (the capture library's own format): header, one line per step, footer."""
    identity = {"host_lineage": "h200-usw1c-bench-01", "preset": "nam52_h200_dense_ref_v1",
                "regime": "fsdp2/regional-compile"}
    lines = ["RECEIPT " + json.dumps({"v": 1, "kind": "header", "identity": identity, "hostname": "h200-usw1c-bench-01",
                                      "gpu_model": "NVIDIA H200", "gpu_count": 8, "world_size": 8,
                                      "env": {"NCCL_ALGO": "Ring"}, "software": {"torch": "2.6.0"}, "features": {}})]
    lines.append("RECEIPT " + json.dumps({"v": 1, "kind": "phase", "phase": "compile", "first_step": 1, "last_step": 5}))
    for i in range(1, steps + 1):
        ms = 400.0 + seed * 0.01 + (i * 7919 % 101) * 0.05
        lines.append("RECEIPT " + json.dumps({"v": 1, "kind": "step", "step": i, "rank": 0, "step_ms": ms,
                                              "tokens_per_s": 4e6 / ms, "loss": 3.0 - i * 1e-5}))
    lines.append("RECEIPT " + json.dumps({"v": 1, "kind": "footer", "rank": 0, "peak_allocated_bytes": 40 << 30,
                                          "peak_reserved_bytes": 48 << 30}))
    path.write_text("\n".join(lines) + "\n")
    return path


def parsed_receipts(folder: Path, *, count: int, steps: int):
    from receipts.pipeline import build_receipt, parse_log
    from receipts.pipeline.parse import source_file
    from receipts.schema.model import IdentityClaim
    from receipts.schema.registry import load_registry

    registry = load_registry(None)
    out = []
    for i in range(count):
        path = native_log(folder / f"bench_{steps}_{i:04d}.log", steps=steps, seed=i)
        parsed = parse_log(path)
        out.append(build_receipt(parsed, source=source_file(path, parsed.source_format, "log"), claim=IdentityClaim(),
                                 registry=registry, run_name=path.stem))
    return out


def time_writes(store, receipts) -> float:
    start = time.perf_counter()
    for receipt in receipts:
        assert store.write_receipt(receipt).created
    return time.perf_counter() - start


def time_compare(store, a: str, b: str, *, repeats: int) -> list[float]:
    from receipts.analysis.compare import compare
    from receipts.analysis.record import load

    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        compare(load(store, store.resolve(a)), load(store, store.resolve(b)))
        out.append((time.perf_counter() - start) * 1e3)
    return out


def postgres_url() -> str:
    url = os.environ.get("RECEIPTS_TEST_PG")
    if url:
        return url
    done = subprocess.run(["bash", str(REPO / ".ci" / "postgres_setup.sh")], capture_output=True, text=True, check=True)
    return done.stdout.strip().splitlines()[-1]


def with_dbname(url: str, dbname: str) -> str:
    """The same server and role, another database, as a libpq URI (parameters percent-encoded)."""
    from urllib.parse import urlencode

    from psycopg.conninfo import conninfo_to_dict

    params = {k: v for k, v in conninfo_to_dict(url).items() if k != "dbname"}
    return f"postgresql:///{dbname}?{urlencode(params)}"


def init_schema(url: str) -> None:
    """Create the receipts schema in a new database, as its owner does (`receipts db init`): writers never do."""
    from receipts.store import migrations

    with migrations.open_target(url, create=True) as target:
        migrations.init(target)


def bench(store_url: str, small, big, *, repeats: int) -> dict[str, float]:
    from receipts.store import open_store

    with open_store(store_url) as store:
        small_s = time_writes(store, small)
        big_s = time_writes(store, big)
        compare_ms = time_compare(store, small[0].run_name, small[1].run_name, repeats=repeats)
        big_compare_ms = time_compare(store, big[0].run_name, big[1].run_name, repeats=max(3, repeats // 4))
    small_rows = sum(r.parsed.steps.height for r in small)
    big_rows = sum(r.parsed.steps.height for r in big)
    return {
        "small receipts/s": len(small) / small_s,
        "small step rows/s": small_rows / small_s,
        "big receipts/s": len(big) / big_s,
        "big step rows/s": big_rows / big_s,
        "compare median ms (small)": statistics.median(compare_ms),
        "compare median ms (big)": statistics.median(big_compare_ms),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--receipts", type=int, default=200, help="small receipts to write (500 steps each)")
    parser.add_argument("--big", type=int, default=4, help="big receipts to write (200,000 steps each)")
    parser.add_argument("--repeats", type=int, default=20, help="compare calls timed per backend")
    args = parser.parse_args()

    import psycopg

    from receipts.store.urls import redact_url

    admin_url = postgres_url()
    dbname = f"receipts_bench_{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        small = parsed_receipts(folder, count=args.receipts, steps=500)
        big = parsed_receipts(folder, count=args.big, steps=200_000)
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{dbname}"')
            try:
                pg_url = with_dbname(admin_url, dbname)
                init_schema(pg_url)
                duck = bench(str(folder / "bench.duckdb"), small, big, repeats=args.repeats)
                pg = bench(pg_url, small, big, repeats=args.repeats)
            finally:
                admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
    print(f"receipts backends benchmark: {args.receipts} x 500-step and {args.big} x 200,000-step receipts; "
          f"PostgreSQL at {redact_url(admin_url)}")
    print(f"{'metric':<28} {'DuckDB':>14} {'PostgreSQL':>14} {'PG/DuckDB':>10}")
    for key in duck:
        print(f"{key:<28} {duck[key]:>14,.1f} {pg[key]:>14,.1f} {pg[key] / duck[key]:>10.2f}")


if __name__ == "__main__":
    main()
