"""The calibration of analysis/explain_noise.py: per component class, the relative between-run standard deviation of
one run's value when nothing changes, measured on A/A runs of one configuration: the runs' variance less the part
their own steps explain (the model's tau^2 = s^2 - mean within-run variance, at least 0).

    .venv/bin/python benchmarks/calibrate_explain_noise.py [--db STORE --runs r1,r2,...]
    .venv/bin/python benchmarks/calibrate_explain_noise.py --corpus nsys     # or kineto: the planted corpus's A/A

Without --db: the six A/A runs of tests/data/explain (base_1..5, aa_1; 2 x H200, Nsight Systems), ingested into a
temporary store. Per class (component_class), over the components whose mean is at least 1% of the step (smaller
ones are held by the step floor and the minimum effect, not by their relative spread), it prints the largest and the
median relative sd (the host gap's relative to the step: its own value swings around zero), and the component
with the largest: CALIBRATION takes the largest, rounded up. Run it on a new
corpus of A/A runs (another GPU, another profiler) to see whether the shipped calibration covers it. Last, the prior
`explain` fits to these runs when they are a lane's baseline (explain_noise.lane_prior): the calibration is the
envelope pairwise needs, the fitted prior what the lane's own runs say.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

from receipts.analysis.explain_noise import (CALIBRATION, CALIBRATIONS, FIT_SHARE, STEP_SCALED, Calibration, Prior,
                                             component_class, lane_prior)
from receipts.schema.categories import SHIPPED_KINDS, STEP_PARTS

REPO = Path(__file__).resolve().parents[1]
AA = [f"base_{i}" for i in range(1, 6)] + ["aa_1"]
CORPUS = REPO / "tests" / "data" / "explain_corpus" / "store"


def measure(db: str, names: list[str], calibration: Calibration = CALIBRATION
            ) -> tuple[dict[str, list[tuple[float, str]]], Prior]:
    """Per class, each component's relative between-run sd (and its name); and the prior `explain` fits to these
    runs as a lane (explain_noise.lane_prior: the calibration's shape, these runs' level and spread about it)."""
    from receipts.analysis.profiles import profiled
    from receipts.analysis.explain_run import _runs
    from receipts.store import open_store

    with open_store(db, read_only=True) as store:
        ids = {store.resolve(n): n for n in names}
        runs, _ = _runs(store, list(ids), ids, profiled(store, list(ids)), baseline=list(ids))
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    within: dict[tuple[str, str], list[float]] = defaultdict(list)
    category: dict[tuple[str, str], str | None] = {}
    for run in runs.values():
        for key, v in run.values.items():
            values[key].append(v.ms_per_step)
            within[key].append(v.step_var or 0.0)
            category[key] = v.category
    step = float(np.mean([sum(v.ms_per_step for (lv, n), v in r.values.items() if lv == "category" and n in STEP_PARTS
                               and n != "host_gap") for r in runs.values()]))
    out: dict[str, list[tuple[float, str]]] = defaultdict(list)
    rows = []
    for key, xs in values.items():
        x = np.array(xs + [0.0] * (len(runs) - len(xs)))
        rows.append((x, np.array(within[key] + [0.0] * (len(runs) - len(xs))),
                     component_class(key[0], key[1], category[key], SHIPPED_KINDS)))
        mean = float(np.mean(x))
        klass = component_class(key[0], key[1], category[key], SHIPPED_KINDS)
        scale = step if klass in STEP_SCALED else abs(mean)
        # the model's between-run part: the runs' variance less what their own steps explain
        between = np.sqrt(max(0.0, float(np.var(x, ddof=1)) - float(np.mean(within[key]))))
        if klass in STEP_SCALED or abs(mean) >= FIT_SHARE * step:
            out[klass].append((between / scale, f"{key[0]}:{key[1][:40]}"))
    return out, lane_prior(rows, step_ms=step, calibration=calibration)


def corpus_store(db: str, profiler: str) -> list[str]:
    """The planted one-GPU corpus (tests/data/explain_corpus/store) imported into `db`, brought to this build's
    components by `receipts db upgrade`; the names of its A/A runs under `profiler` (tag aa-<profiler>)."""
    import duckdb
    from typer.testing import CliRunner

    from receipts.cli.main import app

    con = duckdb.connect(db)
    con.execute(f"IMPORT DATABASE '{CORPUS}'")
    names = [r[0] for r in con.execute("SELECT run_name FROM receipts WHERE superseded_by IS NULL AND tags_json "
                                       "LIKE ? ORDER BY run_name", [f'%"aa-{profiler}"%']).fetchall()]
    con.close()
    result = CliRunner().invoke(app, ["--db", db, "db", "upgrade"])
    if result.exit_code:
        sys.exit(result.output)
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db")
    parser.add_argument("--runs", default=",".join(AA))
    parser.add_argument("--corpus", choices=sorted(CALIBRATIONS),
                        help="the planted one-H200 corpus's A/A runs under this profiler (tests/data/explain_corpus)")
    args = parser.parse_args()
    names = args.runs.split(",")
    shipped = CALIBRATIONS[args.corpus] if args.corpus else CALIBRATION
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db
        if args.corpus:
            db = str(Path(tmp) / "corpus.duckdb")
            names = corpus_store(db, args.corpus)
        elif db is None:
            from typer.testing import CliRunner

            from receipts.cli.main import app

            db = str(Path(tmp) / "aa.duckdb")
            result = CliRunner().invoke(app, ["--db", db, "ingest",
                                              *(str(REPO / "tests" / "data" / "explain" / r) for r in names)])
            if result.exit_code:
                sys.exit(result.output)
        measured, prior = measure(db, names, shipped)
    print(f"{len(names)} A/A runs; relative between-run sd of one run's value, components >= 1% of the step")
    print(f"shipped: {shipped.source}")
    print(f"{'class':<8} {'n':>3} {'median':>7} {'largest':>8} {'shipped':>8}  largest at")
    for klass in sorted(shipped.kappa_pct):
        rows = sorted(measured.get(klass, []))
        if not rows:
            print(f"{klass:<8} {0:>3} {'-':>7} {'-':>8} {shipped.kappa_pct[klass]:>7.1f}%")
            continue
        rel = np.array([r for r, _ in rows])
        print(f"{klass:<8} {len(rows):>3} {100 * np.median(rel):>6.2f}% {100 * rel.max():>7.2f}% "
              f"{shipped.kappa_pct[klass]:>7.1f}%  {rows[-1][1]}")
    print(f"the prior `explain` fits to these runs as a lane ({prior.components} components): "
          f"{prior.scale:.3g} x the calibrated between-run variance (sd x{np.sqrt(prior.scale):.2f}), "
          f"d0 {prior.df:.1f} (its components' spread about the calibration's shape)")


if __name__ == "__main__":
    main()
