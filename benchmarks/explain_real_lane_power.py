"""Power of `receipts explain` on the real 2 x H200 lane (tests/data/explain, README there): each planted run
pairwise against each of the five baseline runs, and a host stall added to the A/A run's idle in long gaps (one gap
of the stall's length: idle_long; its other components as measured) against the five baseline runs (lane) and against each alone (pairwise): the smallest stall named
first. What docs/statistics.md quotes beside the false-alarm simulation.

    .venv/bin/python benchmarks/explain_real_lane_power.py
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from receipts.analysis.explain import RunComponents, StepChange, explain
from receipts.schema.categories import STEP_PARTS

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "explain"
BASE = [f"base_{i}" for i in range(1, 6)]
PLANTS = {"attn_1": "attention", "attn_2": "attention", "gemm_1": "gemm", "gemm_2": "gemm", "stall_1": "idle_long",
          "stall_2": "idle_long", "fp32_1": "nccl", "fp32_2": "nccl"}
STALLS_MS = (0.3, 0.5, 1.0, 2.0)


def _planted(c, what: str) -> bool:
    if what == "idle_long":  # or the stall's place: the long gap's, in every step (the gap level)
        return (c.level == "category" and c.name == "idle_long") or c.level == "gap"
    if what == "nccl":
        return ((c.level == "kernel" and c.name.startswith("ncclDevKernel_ReduceScatter"))
                or c.name == "nccl_reduce_scatter")
    return (c.level == "kernel" and c.category == what) or (c.level == "category" and c.name == what)


def main() -> None:
    from typer.testing import CliRunner

    from receipts.analysis.explain_run import explain_in_store
    from receipts.cli.main import app
    from receipts.store import open_store

    from receipts.analysis.profiles import profiled
    from receipts.analysis.explain_run import _runs

    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "lane.duckdb")
        result = CliRunner().invoke(app, ["--db", db, "ingest", "--tag", "main",
                                          *(str(DATA / r) for r in [*BASE, "aa_1", *PLANTS])])
        if result.exit_code:
            sys.exit(result.output)
        hits = total = 0
        with open_store(db, read_only=True) as store:
            for run, what in PLANTS.items():
                for base in BASE:
                    e = explain_in_store(store, run, against=base, last=5).explanation
                    first = e.changed[0] if e.changed else None
                    total += 1
                    hits += first is not None and _planted(first, what)
                    if first is None or not _planted(first, what):
                        print(f"  miss: {run} against {base}: first {first.name if first else 'nothing'}")
        print(f"plants pairwise against each baseline run, named first: {hits}/{total}")
        with open_store(db, read_only=True) as store:
            ids = {store.resolve(n): n for n in [*BASE, "aa_1"]}
            runs, _ = _runs(store, list(ids), ids, profiled(store, list(ids)), baseline=list(ids))
        by_name = {r.run_name: r for r in runs.values()}
        base_runs = [by_name[b] for b in BASE]
        aa = by_name["aa_1"]
        step = sum(v.ms_per_step for (lv, n), v in aa.values.items() if lv == "category" and n in STEP_PARTS)
        for stall in STALLS_MS:
            values = dict(aa.values)
            stalled_at = ("category", "idle_long")
            values[stalled_at] = replace(values[stalled_at], ms_per_step=values[stalled_at].ms_per_step + stall)
            stalled = RunComponents("stalled", "stalled", values)
            lane = explain(base_runs, [stalled], step=StepChange("inconclusive", step, step + stall, ""), mode="lane")
            pairs = [explain([b], [stalled], step=StepChange("inconclusive", step, step + stall, ""), mode="pairwise")
                     for b in base_runs]
            named = lambda e: bool(e.changed) and _planted(e.changed[0], "idle_long")  # noqa: E731
            print(f"+{stall:.1f} ms idle_long ({100 * stall / step:.1f}% of the step): lane "
                  f"{'named first' if named(lane) else 'not named'}; pairwise named first against "
                  f"{sum(map(named, pairs))}/{len(pairs)} baseline runs")
    print("command: .venv/bin/python benchmarks/explain_real_lane_power.py")


if __name__ == "__main__":
    main()
