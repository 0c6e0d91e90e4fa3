"""Time to first paint of the lane view on a 10,000-receipt store, in Debian's headless Chromium.

    .venv/bin/python benchmarks/bench_dashboard.py [--receipts 10000] [--steps 300]

The store starts from real ingested data (the modded-nanogpt speedrun logs, a nanochat log, the nsys export:
the same builder as tests/test_dashboard_apptest.py) and is grown with bulk SQL: each copy of a real
receipt gets its own identity (host lineage, preset family, launch regime drawn from small pools, 5% rumors),
a run date spread over a year, a lineage tag, and that receipt's first --steps steps with step times scaled
by a per-copy factor. First paint = navigation start -> the lane chart painted and the script run finished
(performance.now() in the page). References measured in the same run: the bare lane query on the same store,
and first paint on the small real store.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

REPO = Path(__file__).resolve().parents[1]
TARGET_S = 2.0

GROW_SQL = """
INSERT INTO receipts
SELECT r.* REPLACE (
    r.id || '-' || lpad(CAST(g.i AS VARCHAR), 5, '0') AS id,
    r.content_sha256 || '-' || CAST(g.i AS VARCHAR) AS content_sha256,
    r.run_name || '-' || CAST(g.i AS VARCHAR) AS run_name,
    CASE WHEN g.i % 20 = 0 THEN NULL ELSE 'bench-host-' || CAST(g.i % 7 AS VARCHAR) END AS host_lineage,
    'bench-preset-' || CAST(g.i % 5 AS VARCHAR) AS preset_family,
    CASE WHEN g.i % 3 = 0 THEN 'fsdp2/regional-compile' ELSE 'ddp/full-compile' END AS launch_regime,
    g.i % 20 <> 0 AS identity_complete,
    strftime(TIMESTAMP '2025-01-01' + to_minutes(CAST(g.i * 53 AS BIGINT)), '%Y-%m-%dT%H:%M:%S') AS started_at,
    '["wave-' || CAST(g.i % 12 AS VARCHAR) || '"]' AS tags_json)
FROM receipts r, range($n_per) g(i)
WHERE r.id IN (SELECT id FROM receipts WHERE identity_complete LIMIT $n_base)
  AND g.i < $n_per
"""
STEPS_SQL = """
INSERT INTO receipt_steps
WITH first AS (SELECT receipt_id, min(step) AS step0 FROM receipt_steps GROUP BY receipt_id)
SELECT r.id AS receipt_id, s.step, s.rank,
       s.step_ms * (0.9 + 0.2 * ((hash(r.id) % 1000) / 1000.0)) AS step_ms,
       s.tokens_per_s, s.loss, s.mfu_pct, s.allocated_bytes, s.reserved_bytes, s.line, s.warmup
FROM receipts r JOIN receipt_steps s ON s.receipt_id = split_part(r.id, '-', 1)
JOIN first f ON f.receipt_id = s.receipt_id
WHERE r.id LIKE '%-%' AND s.step <= f.step0 + $steps
"""
SOURCES_SQL = """
INSERT INTO receipt_sources
SELECT r.id, s.sha256 || '-' || r.id, s.path, s.size_bytes, s.format, s.role, s.ingested_at
FROM receipts r JOIN receipt_sources s ON s.receipt_id = split_part(r.id, '-', 1) AND s.role = 'log'
WHERE r.id LIKE '%-%'
"""


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def grow(db: Path, n_receipts: int, steps: int) -> int:
    from receipts.store import open_store

    with open_store(db) as store:
        n_base = store.sql("SELECT count(*) AS n FROM receipts WHERE identity_complete")["n"][0]
        n_per = -(-n_receipts // n_base)
        con = store.con
        con.execute("BEGIN TRANSACTION")
        con.execute(GROW_SQL, {"n_per": n_per, "n_base": n_base})
        con.execute(STEPS_SQL, {"steps": steps})
        con.execute(SOURCES_SQL)
        con.execute("COMMIT")
        con.execute("CHECKPOINT")  # fold the WAL in: read-only openers would otherwise replay it every time
        return store.sql("SELECT count(*) AS n FROM receipts")["n"][0]


def bare_query_s(db: Path, repeats: int = 5) -> float:
    from receipts.store import open_store

    params = dict(hosts=None, presets=None, regimes=None, tag=None, since=None, until=None, search=None)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        with open_store(db, read_only=True) as store:
            store.version()
            store.query("dash_filter_options")
            store.query("dash_lanes", params)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def first_paint_s(browser, db: Path, profile: Path, repeats: int = 3) -> tuple[float, float]:
    """(cold: first load after the server starts, uncached; warm: median of reloads, cache hit)."""
    script = """([sel]) => {
        const charts = [...document.querySelectorAll(sel)].filter(e => e.getBoundingClientRect().width > 0);
        const running = document.querySelector('[data-testid="stStatusWidget"]')?.innerText?.includes('Running');
        const table = document.querySelector('[data-testid="stDataFrame"]');
        return charts.length >= 1 && table && !running ? performance.now() : false;
    }"""
    with browser.serve_dashboard(str(db), browser.free_port()) as base, browser.chromium_page(profile) as page:
        url = f"{base}/?{urlencode({'view': 'lanes'})}"
        times = []
        for _ in range(repeats + 1):
            page.goto(url)
            times.append(page.wait_for_function(script, arg=[browser.CHARTS], timeout=60_000).json_value() / 1e3)
        return times[0], statistics.median(times[1:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--receipts", type=int, default=10_000)
    ap.add_argument("--steps", type=int, default=300, help="steps copied per generated receipt")
    args = ap.parse_args()
    apptest = _load("dash_apptest", REPO / "tests" / "test_dashboard_apptest.py")
    browser = _load("dash_browser", REPO / "tests" / "test_dashboard_browser.py")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        small, big = root / "small.duckdb", root / "big.duckdb"
        apptest.build_store(small, root / "logs_small")
        apptest.build_store(big, root / "logs_big")
        t0 = time.perf_counter()
        n = grow(big, args.receipts, args.steps)
        grow_s = time.perf_counter() - t0
        from receipts.store import open_store
        with open_store(big, read_only=True) as s:
            n_steps = s.sql("SELECT count(*) AS n FROM receipt_steps")["n"][0]
        q_small, q_big = bare_query_s(small), bare_query_s(big)
        cold_small, warm_small = first_paint_s(browser, small, root / "p1")
        cold_big, warm_big = first_paint_s(browser, big, root / "p2")
    print(f"store: {n:,} receipts, {n_steps:,} step rows (grown by bulk SQL in {grow_s:.2f} s)")
    print(f"{'measure':44s} {'small store':>12s} {'10k store':>12s} {'ratio':>7s}")
    for name, a, b in (("bare lane queries (open+version+2 queries)", q_small, q_big),
                       ("lane view first paint, cold (uncached)", cold_small, cold_big),
                       ("lane view first paint, warm (cached)", warm_small, warm_big)):
        print(f"{name:44s} {a:11.3f}s {b:11.3f}s {b / a:6.2f}x")
    verdict = "meets" if cold_big <= TARGET_S else "MISSES"
    print(f"first paint on {n:,} receipts (cold) {cold_big:.3f} s: {verdict} the {TARGET_S:.1f} s aim")


if __name__ == "__main__":
    main()
