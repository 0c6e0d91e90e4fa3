"""The change-point rule's false alarms on flat series and its power on a change followed by a weaker one, for
the rule `history` uses (pooled and before-side t-tests, Bonferroni) and for the pooled t-test alone
(Apache Otava's), over the same seeded series.

    .venv/bin/python benchmarks/sim_changepoints.py [--reps 2000]

Flat series: 10, 20, 40, 80 run medians, Gaussian noise of 0.7% and heavy-tailed noise (Student t, 3 df,
scale 0.5%). The shape: 8 base runs, 4 at +2.9%, 2 at +0.7%, at 0.4% and 0.6% run-to-run noise; found = the
first change point is the first slowed run. Numbers in docs/statistics.md ("Change points").
"""

from __future__ import annotations

import argparse

import numpy as np

from receipts.analysis import changepoint


def rate(make, check, reps: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    return sum(bool(check(changepoint.change_points(make(rng)))) for _ in range(reps)) / reps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=2000)
    reps = ap.parse_args().reps
    both = changepoint._test
    cases = []
    for sd in (0.004, 0.006):
        cases.append((f"8 base, 4 at +2.9%, 2 at +0.7%, noise {100 * sd:g}%: found at run 9",
                      lambda r, sd=sd: np.r_[100 * (1 + r.normal(0, sd, 8)), 102.9 * (1 + r.normal(0, sd, 4)),
                                             100.7 * (1 + r.normal(0, sd, 2))],
                      lambda cps: [c.index for c in cps][:1] == [8], reps // 2))
    for n in (10, 20, 40, 80):
        cases.append((f"flat, {n} runs, Gaussian 0.7%: false alarm", lambda r, n=n: 55 * (1 + r.normal(0, 0.007, n)),
                      bool, reps))
        cases.append((f"flat, {n} runs, t(3) 0.5%: false alarm",
                      lambda r, n=n: 55 * (1 + 0.005 * r.standard_t(3, n)), bool, reps))
    print(f"{'series':58s} {'history':>8s} {'pooled t alone':>15s}")
    for i, (name, make, check, n_reps) in enumerate(cases):
        changepoint._test = both
        ours = rate(make, check, n_reps, i)
        changepoint._test = changepoint._ttest
        pooled = rate(make, check, n_reps, i)
        print(f"{name:58s} {100 * ours:7.2f}% {100 * pooled:14.2f}%", flush=True)
    changepoint._test = both


if __name__ == "__main__":
    main()
