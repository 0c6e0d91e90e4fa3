"""`receipts gate` over 100 claims against a 10,000-receipt DuckDB store, `receipts list` over all of it, and
`receipts history` of its largest lane.

    .venv/bin/python benchmarks/bench_gate.py [--receipts 10000] [--claims 100] [--repeat 3]

The store is built from real receipts: the logs in ../shared/realdata/logs (nanochat SFT, Megatron-
DeepSpeed, the two modded-nanogpt speedrun records) and the example RECEIPT logs are ingested through
the normal pipeline, then replicated with bulk SQL (INSERT ... SELECT over range()) into N receipts with
varied identities (3 host lineages x 4 presets x 3 regimes), step times scaled per copy with per-step
jitter, and memory peaks scaled per copy. Going through ingest 10,000 times would measure the parsers.

Timed, best of --repeat:
  reference   one raw DuckDB query fetching the steady-state rows (per step, slowest rank) of every
              receipt the claims name: the rows any gate must read
  in-process  load_claims + run_gate (resolve, load, compare with bootstrap CIs, rules)
  CLI         `receipts --db STORE gate CLAIMS --json` as a subprocess (includes interpreter start and
              imports), and `receipts --version` alone for the start-up share
Ratios are against the reference measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REALDATA = REPO.parent / "shared" / "realdata" / "logs"
LANE = ("h200-usw1c-bench-01", "nam52_h200_dense_ref_v1", "ddp/full-compile")
HOSTS = ("h200-usw1c-bench-01", "h200-euw4a-canonical", "h200-usw1c-bringup")
PRESETS = ("nam52_h200_dense_ref_v1", "nam52_h200_dense_no_mhc_recovery_v1", "nam52_h200_sparse_support_region_v1",
           "nam52r_h200_prod_candidate_v1")
REGIMES = ("ddp/full-compile", "fsdp2/regional-compile", "megatron/no-compile/pp2,tp2")


def build_store(db: Path, n: int) -> int:
    from receipts.analysis.summary import resummarize
    from receipts.pipeline import ingest_paths
    from receipts.schema.model import IdentityClaim
    from receipts.schema.registry import load_registry
    from receipts.store import open_store

    logs = sorted((REPO / "examples" / "claims" / "receipts").glob("*.log"))
    real = [REALDATA / "sft_run_gtx1660.log",
            REALDATA / "megatron-deepspeed__gpt3-0.125B-tokendropping-graduallyIncrease-lr-3.0e-4-baseline.log",
            *sorted(REALDATA.glob("track_1_short_*.txt"))]
    with open_store(str(db)) as store:
        registry = load_registry()
        ingest_paths(store, [p for p in logs if "rumor" not in p.name], registry=registry)
        ingest_paths(store, [p for p in real if p.exists()], identity=IdentityClaim(*LANE), registry=registry)
        con = store.con
        con.execute("CREATE TEMP TABLE tpl AS SELECT row_number() OVER (ORDER BY id) - 1 AS t, * FROM receipts")
        n_tpl = con.execute("SELECT count(*) FROM tpl").fetchone()[0]
        con.execute("SELECT setseed(0.42)")
        # Ids look like real ones (16 hex of a hash): DuckDB's string zone maps keep an 8-byte prefix, so
        # 'bench0000000001'-style ids would defeat the per-receipt pruning a real store gets.
        # copy i takes template i % n_tpl; identity cycles through hosts/presets/regimes so lanes hold
        # ~n/36 receipts each; speed factor 0.7..1.3 and memory factor 0.8..1.2 vary by copy.
        con.execute("""
            CREATE TEMP TABLE copies AS
            SELECT i, i % $n_tpl AS t, substr(md5('bench' || i), 1, 16) AS id, printf('bench_%05d', i) AS run_name,
                   ($hosts)[1 + i % 3] AS host, ($presets)[1 + (i // 3) % 4] AS preset,
                   ($regimes)[1 + (i // 12) % 3] AS regime,
                   0.7 + 0.6 * ((i * 7919) % 1000) / 1000.0 AS speed, 0.8 + 0.4 * ((i * 104729) % 1000) / 1000.0 AS mem
            FROM range($n) r(i)""", {"n_tpl": n_tpl, "n": n, "hosts": list(HOSTS), "presets": list(PRESETS),
                                     "regimes": list(REGIMES)})
        cols = [r[0] for r in con.execute("SELECT name FROM pragma_table_info('receipts')").fetchall()]
        override = {"id": "c.id", "content_sha256": "'bench' || c.id", "run_name": "c.run_name",
                    "host_lineage": "c.host", "raw_host_lineage": "c.host", "preset_family": "c.preset",
                    "raw_preset": "c.preset", "launch_regime": "c.regime", "raw_regime": "c.regime",
                    "identity_complete": "true",  # and the lane key, as ingest writes it (schema/lane.py Lane.key)
                    "lane_key": "'[' || to_json(c.host)::text || ',' || to_json(c.preset)::text || ',' "
                                "|| to_json(c.regime)::text || ']'",
                    "peak_allocated_bytes": "CAST(tpl.peak_allocated_bytes * c.mem AS BIGINT)",
                    "peak_reserved_bytes": "CAST(tpl.peak_reserved_bytes * c.mem AS BIGINT)"}
        select = ", ".join(override.get(col, f"tpl.{col}") for col in cols)
        con.execute("BEGIN")
        con.execute(f"INSERT INTO receipts SELECT {select} FROM copies c JOIN tpl USING (t)")
        con.execute("""INSERT INTO receipt_steps
            SELECT c.id, s.step, s.rank, s.step_ms * c.speed * (1 + 0.01 * (random() - 0.5)),
                   s.tokens_per_s / c.speed, s.loss, s.mfu_pct, s.allocated_bytes, s.reserved_bytes, s.line, s.warmup
            FROM copies c JOIN tpl USING (t) JOIN receipt_steps s ON s.receipt_id = tpl.id
            ORDER BY c.id, s.step, s.rank""")  # one receipt's rows together, as one-transaction-per-receipt ingest leaves them
        con.execute("""INSERT INTO receipt_memory
            SELECT c.id, m.rank, CAST(m.peak_allocated_bytes * c.mem AS BIGINT), CAST(m.peak_reserved_bytes * c.mem AS BIGINT)
            FROM copies c JOIN tpl USING (t) JOIN receipt_memory m ON m.receipt_id = tpl.id""")
        con.execute("""INSERT INTO receipt_env SELECT c.id, e.name, e.value, e.is_set, e.redacted
            FROM copies c JOIN tpl USING (t) JOIN receipt_env e ON e.receipt_id = tpl.id""")
        con.execute("COMMIT")
        # Ingest stores each receipt's steady-state summary, which list, show, compare and the gate read; the
        # copies get theirs from their own steps through the same code (`receipts db upgrade`'s). Without them
        # every read fell back to the step rows (list over 10,000 receipts: 4.3 s instead of well under 0.5 s).
        resummarize(store)
        return con.execute("SELECT count(*) FROM receipt_steps").fetchone()[0]


def write_claims(path: Path, n_receipts: int, n_claims: int) -> list[str]:
    """Claims over pairs in one lane and from one template, so every claim runs the full path (compare,
    bootstrap, rules): copies i and i + 792 share host/preset/regime (period 36) and template (792 is a
    multiple of 8 and 12, the template counts without and with the real logs)."""
    step = 36 * 11 * 2
    lines, refs = ["version: 1", "defaults: {max_cv: 1.0}", "claims:"], []
    for k in range(n_claims):
        a = (k * 97) % (n_receipts - step)
        b = a + step
        refs += [f"bench_{a:05d}", f"bench_{b:05d}"]
        if k % 5 == 4:
            lines.append(f"  - {{name: claim {k}, baseline: bench_{a:05d}, candidate: bench_{b:05d}, "
                         f"metric: peak_reserved, change: 0B, tolerance_bytes: 8GiB, declared_drift: [runtime, infrastructure]}}")
        else:
            metric = "tokens_per_s" if k % 5 == 3 else "step_time"
            lines.append(f"  - {{name: claim {k}, baseline: bench_{a:05d}, candidate: bench_{b:05d}, "
                         f"metric: {metric}, speedup: 1.0, tolerance: 0.5, declared_drift: [runtime, infrastructure]}}")
    path.write_text("\n".join(lines) + "\n")
    return refs


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--receipts", type=int, default=10_000)
    ap.add_argument("--claims", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--store", type=Path, help="keep the built store here and reuse it when it exists")
    args = ap.parse_args()

    from receipts.analysis.claims import load_claims
    from receipts.analysis.gate_inputs import run_gate
    from receipts.store import open_store

    with tempfile.TemporaryDirectory() as tmp:
        db, claims = args.store or Path(tmp) / "bench.duckdb", Path(tmp) / "claims.yaml"
        t0 = time.perf_counter()
        if db.exists():
            with open_store(str(db), read_only=True) as store:
                n_rows = store.sql("SELECT count(*) AS n FROM receipt_steps")["n"][0]
            print(f"store: reusing {db}")
        else:
            n_rows = build_store(db, args.receipts)
        print(f"store: {args.receipts} receipts, {n_rows:,} step rows, built in {time.perf_counter() - t0:.1f} s "
              f"({db.stat().st_size / 2**20:.0f} MiB)")
        refs = write_claims(claims, args.receipts, args.claims)

        with open_store(str(db), read_only=True) as store:
            con = store.con
            ids = con.execute("SELECT id FROM receipts WHERE run_name IN (SELECT unnest($r))", {"r": refs}).fetchall()
            ids = [r[0] for r in ids]

            def reference():
                con.execute("""SELECT receipt_id, step, max(step_ms) AS step_ms, max(tokens_per_s) AS tokens_per_s
                               FROM receipt_steps WHERE receipt_id IN (SELECT unnest($ids)) AND NOT warmup
                               AND step_ms IS NOT NULL GROUP BY receipt_id, step""", {"ids": ids}).fetchall()

            result = {}

            def in_process():
                result["r"] = run_gate(store, load_claims(claims))

            t_ref = best(reference, args.repeat)
            t_gate = best(in_process, args.repeat)
            c0 = time.process_time()
            reference()
            cpu_ref = time.process_time() - c0
            c0 = time.process_time()
            in_process()
            cpu_gate = time.process_time() - c0
        accepted = sum(r.accepted for r in result["r"].results)
        exe = str(Path(sys.executable).with_name("receipts"))  # the CLI of the interpreter running this
        cmd = [exe, "--db", str(db), "gate", str(claims), "--json"]

        def gate_cli() -> None:  # exit 1 is a rejected claim; anything else would time a failure as a speed-up
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            assert done.returncode in (0, 1), done.stderr

        t_cli = best(gate_cli, args.repeat)
        t_start = best(lambda: subprocess.run([exe, "--version"], capture_output=True, check=True), args.repeat)
        # `list` over the whole store (< 0.5 s over 10,000 receipts): every current receipt with its
        # steady-state median and peaks, from the stored summaries; against a bare read of the receipts table.
        listed = subprocess.run([exe, "--db", str(db), "list", "--json"], capture_output=True, check=True)
        n_listed = len(json.loads(listed.stdout))
        t_list = best(lambda: subprocess.run([exe, "--db", str(db), "list", "--json"], capture_output=True,
                                             check=True), args.repeat)
        from typer.testing import CliRunner

        from receipts.cli.main import app

        runner = CliRunner()
        runner.invoke(app, ["--db", str(db), "list", "--json"])  # imports and the file's first open, as above
        t_list_warm = best(lambda: runner.invoke(app, ["--db", str(db), "list", "--json"]), args.repeat)
        t_table = best(lambda: subprocess.run([exe, "--db", str(db), "list"], capture_output=True, check=True),
                       args.repeat)
        with open_store(str(db), read_only=True) as store:
            t_list_ref = best(lambda: store.con.execute("SELECT * FROM receipts").fetchall(), args.repeat)
            # `history` of the largest lane: every current run with its interval, z and change points, from the
            # stored summaries; against a bare read of those runs' receipts and summary rows.
            lane = store.con.execute("SELECT host_lineage, preset_family, launch_regime, count(*) AS n FROM receipts "
                                     "WHERE superseded_by IS NULL AND identity_complete GROUP BY ALL "
                                     "ORDER BY n DESC, host_lineage, preset_family, launch_regime LIMIT 1").fetchone()
            t_history_ref = best(lambda: store.con.execute(
                "SELECT * FROM receipts r JOIN receipt_summaries s ON s.receipt_id = r.id WHERE host_lineage = ? "
                "AND preset_family = ? AND launch_regime = ? AND superseded_by IS NULL", list(lane[:3])).fetchall(),
                args.repeat)
        history_cmd = [exe, "--db", str(db), "history", " ".join(lane[:3]), "--json"]
        t_history = best(lambda: subprocess.run(history_cmd, capture_output=True, check=True), args.repeat)

    print(f"claims: {args.claims} ({accepted} accepted), {len(set(ids))} receipts named")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (wall times stretch under load; CPU times less)")
    print(f"reference (raw DuckDB steady-state rows)   {t_ref:8.3f} s   1.0x      cpu {cpu_ref:7.3f} s")
    print(f"gate in-process (load_claims + run_gate)   {t_gate:8.3f} s   {t_gate / t_ref:6.1f}x   cpu {cpu_gate:7.3f} s "
          f"({cpu_gate / cpu_ref:.1f}x reference cpu)")
    print(f"gate CLI (subprocess, --json)              {t_cli:8.3f} s   {t_cli / t_ref:6.1f}x reference")
    print(f"  of which CLI start-up (receipts --version) {t_start:6.3f} s")
    print(f"list CLI (subprocess, --json, {n_listed:,} rows) {t_list:8.3f} s   {t_list / t_list_ref:6.1f}x a bare read of "
          f"the receipts table ({t_list_ref:.3f} s); {t_list - t_start:.3f} s after start-up")
    print(f"list in-process (CliRunner, --json, warm)    {t_list_warm:8.3f} s   {t_list_warm / t_list_ref:6.1f}x the same bare read")
    print(f"list CLI (subprocess, table of the newest 200)  {t_table:8.3f} s   {t_table / t_list_ref:6.1f}x the same bare read")
    print(f"history CLI (subprocess, --json, the largest lane: {lane[3]} runs) {t_history:8.3f} s   "
          f"{t_history / t_history_ref:6.1f}x a bare read of its runs' rows ({t_history_ref:.3f} s)")
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    sys.exit(0)


if __name__ == "__main__":
    main()
