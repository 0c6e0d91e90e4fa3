"""Component false alarms of `receipts explain` on A/A lanes: simulated from the calibrated noise model, and counted
on the real A/A runs. What docs/statistics.md quotes.

    .venv/bin/python benchmarks/sim_explain_false_alarms.py [--lanes 400] [--seed 2026] [--real]
    .venv/bin/python benchmarks/sim_explain_false_alarms.py --corpus kineto   # or nsys: the one-H200 corpus
    .venv/bin/python benchmarks/sim_explain_false_alarms.py --inflate 2       # or --measured

Simulated lanes take their components from a real run (tests/data/explain base_1: its ~73 components at every
level, their values, classes and step-to-step spreads), then draw every run of one configuration as

    value = true value + between-run draw (sd kappa_class x value) + within-run draw (sd from the run's own steps)

(the host gap's between-run sd a share of the step). A draw of sd 50% puts a CPU range below zero one time in 40,
which no profile holds; the model keeps it (truncating at zero makes ranges that "appear" from a baseline of zeros,
log-normal draws a right tail the t-test does not assume: docs/statistics.md), so nothing changes between baseline and candidate; each lane is explained as `explain` does it (lane mode: n
baseline runs against one candidate; pairwise: one against one; from 3 baseline runs `explain` fits the prior to
the lane's own runs, explain_noise.lane_prior). `--inflate F` draws the between-run part F times wider than the
calibration says: a lane noisier than calibrated, which pairwise and 2 baseline runs judge by the calibration and
3 or more by their own runs. `--measured` draws each component's between-run sd as the template's real A/A runs
measure it (as quiet and as uneven about the calibration's shape as a real lane is). A false
alarm is a component called changed. With --real, the six real A/A runs of tests/data/explain are also counted:
every ordered pair pairwise, and each run against the other five as the lane.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from pathlib import Path

import numpy as np

from receipts.analysis.explain import RunComponents, StepChange, Value, explain
from receipts.analysis.explain_noise import CALIBRATION, CALIBRATIONS, STEP_SCALED, Calibration, component_class
from receipts.schema.categories import DECOMPOSITION, SHIPPED_KINDS

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "explain"
AA = [f"base_{i}" for i in range(1, 6)] + ["aa_1"]


def _store(tmp: Path) -> str:
    from typer.testing import CliRunner

    from receipts.cli.main import app

    db = str(tmp / "aa.duckdb")
    result = CliRunner().invoke(app, ["--db", db, "ingest", *(str(DATA / r) for r in AA)])
    if result.exit_code:
        sys.exit(result.output)
    return db


def _corpus_store(tmp: Path, profiler: str) -> tuple[str, list[str]]:
    """The one-H200 corpus in a store, and the names of its A/A runs under `profiler`."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from calibrate_explain_noise import corpus_store

    db = str(tmp / "corpus.duckdb")
    return db, corpus_store(db, profiler)


def _loaded(db: str, names: list[str]) -> dict[str, RunComponents]:
    from receipts.analysis.profiles import profiled
    from receipts.analysis.explain_run import _runs
    from receipts.store import open_store

    with open_store(db, read_only=True) as store:
        ids = {store.resolve(n): n for n in names}
        runs, _ = _runs(store, list(ids), ids, profiled(store, list(ids)), baseline=list(ids))
    return runs


def _template(db: str, name: str) -> RunComponents:
    return next(iter(_loaded(db, [name]).values()))


def _draw(rng, template: RunComponents, name: str, inflate: float, step_ms: float,
          calibration: Calibration = CALIBRATION, measured: dict | None = None) -> RunComponents:
    values = {}
    for key, v in template.values.items():
        klass = component_class(key[0], key[1], v.category, SHIPPED_KINDS)  # the lanes' rules
        kappa = calibration.kappa_pct[klass] / 100.0 * inflate
        scale = step_ms if klass in STEP_SCALED else abs(v.ms_per_step)
        between = inflate * measured.get(key, 0.0) if measured is not None else kappa * scale
        within = np.sqrt(v.step_var or 0.0)
        x = v.ms_per_step + rng.normal(0.0, between) + rng.normal(0.0, within)
        values[key] = Value(float(x), v.calls_per_step, v.category, v.step_var)
    return RunComponents(name, name, values)


def measured_spread(runs: list[RunComponents]) -> dict[tuple[str, str], float]:
    """Each component's between-run sd over real runs of one configuration: their variance less what their own
    steps explain (the model's tau), the calibration script's measure, per component instead of per class."""
    keys = {k for r in runs for k in r.values}
    out = {}
    for key in keys:
        x = np.array([r.values[key].ms_per_step if key in r.values else 0.0 for r in runs])
        w = np.mean([(r.values[key].step_var or 0.0) if key in r.values else 0.0 for r in runs])
        out[key] = float(np.sqrt(max(0.0, float(np.var(x, ddof=1)) - float(w))))
    return out


def simulate(template: RunComponents, *, n_a: int, lanes: int, seed: int, inflate: float,
             calibration: Calibration = CALIBRATION, measured: dict | None = None) -> tuple[int, int, int]:
    """(components named, components tested, comparisons with any named) over `lanes` A/A lanes. `measured`: each
    component's own between-run sd (measured_spread) instead of its class's calibrated one."""
    rng = np.random.default_rng(seed)
    step_ms = sum(v.ms_per_step for (lv, n), v in template.values.items()
                  if lv == "category" and n in DECOMPOSITION)
    step = StepChange("no change", step_ms, step_ms, "")
    named = tested = any_named = 0
    for _ in range(lanes):
        base = [_draw(rng, template, f"a{i}", inflate, step_ms, calibration, measured) for i in range(n_a)]
        e = explain(base, [_draw(rng, template, "b", inflate, step_ms, calibration, measured)], step=step,
                    mode="pairwise" if n_a == 1 else "lane", calibration=calibration)
        named += len(e.changed)
        tested += e.family
        any_named += bool(e.changed)
    return named, tested, any_named


def real(db: str) -> list[tuple[str, int, int, int]]:
    from receipts.analysis.explain_run import explain_in_store
    from receipts.store import open_store

    out = []
    with open_store(db, read_only=True) as store:
        for label, pairs in (("pairwise, ordered pairs", list(itertools.permutations(AA, 2))),):
            named = tested = hit = 0
            for a, b in pairs:
                e = explain_in_store(store, b, against=a, last=5).explanation
                named, tested, hit = named + len(e.changed), tested + e.family, hit + bool(e.changed)
            out.append((label, len(pairs), named, tested) + (hit,))
    runs = _loaded(db, AA)  # keyed by receipt id
    named = tested = hit = 0
    for rid in runs:  # each A/A run against the other five as the lane
        base = [runs[i] for i in runs if i != rid]
        e = explain(base, [runs[rid]], step=StepChange("no change", 55.9, 55.9, ""), mode="lane")
        named, tested, hit = named + len(e.changed), tested + e.family, hit + bool(e.changed)
    out.append(("lane, one against the other five", len(runs), named, tested, hit))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=400)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--inflate", type=float, default=1.0)
    parser.add_argument("--sizes", default="1,2,3,5,10",
                        help="baseline runs per lane, comma-separated (each size has its own seed: a size's row is "
                             "the same alone or among others)")
    parser.add_argument("--real", action="store_true")
    parser.add_argument("--measured", action="store_true",
                        help="each component's between-run sd as its template's real A/A runs measure it (a lane "
                             "as quiet, and as uneven, as it is), not its class's calibrated one")
    parser.add_argument("--corpus", choices=sorted(CALIBRATIONS),
                        help="the template is the planted one-H200 corpus's base_1 under this profiler, the noise "
                             "that profiler's calibration (tests/data/explain_corpus; its real A/A runs: "
                             "benchmarks/bench_explain_power.py)")
    args = parser.parse_args()
    calibration = CALIBRATIONS[args.corpus] if args.corpus else CALIBRATION
    with tempfile.TemporaryDirectory() as tmp:
        db, names = _corpus_store(Path(tmp), args.corpus) if args.corpus else (_store(Path(tmp)), AA)
        template = _template(db, f"{args.corpus}_base_1" if args.corpus else "base_1")
        measured = None
        if args.measured:
            measured = measured_spread(list(_loaded(db, names).values()))
        noise = (f"each component's between-run sd as {template.run_name}'s A/A runs measure it" if args.measured
                 else f"calibrated noise ({calibration.source})")
        print(f"simulated A/A lanes from {template.run_name}'s {len(template.values)} components, {noise} "
              f"x{args.inflate:g}, {args.lanes} lanes each, seed {args.seed}")
        print(f"{'baseline runs':>14} {'tests':>8} {'named':>6} {'rate':>9} {'lanes with any':>15}")
        for n_a in map(int, args.sizes.split(",")):
            named, tested, hit = simulate(template, n_a=n_a, lanes=args.lanes, seed=args.seed + n_a,
                                          inflate=args.inflate, calibration=calibration, measured=measured)
            print(f"{n_a:>14} {tested:>8} {named:>6} {named / tested:>9.2e} {hit:>8} / {args.lanes}")
        if args.real and not args.corpus:
            print("\nreal A/A runs (tests/data/explain: base_1..5, aa_1)")
            for label, comparisons, named, tested, hit in real(db):
                print(f"  {label}: {comparisons} comparisons, {tested} component tests, {named} named, "
                      f"{hit} comparisons with any")


if __name__ == "__main__":
    main()
