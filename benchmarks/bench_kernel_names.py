"""What matching kernel names in one spelling for both profilers costs: the kernel corpus's names
(tests/data/kernel_categories_expected.tsv, every kernel name of the real files the tests read) classified with
the shipped rules, each rule tried on the name and its canonical spelling, against the name alone (the
reference, measured in the same run); and canonical_kernel_name alone.

    .venv/bin/python benchmarks/bench_kernel_names.py [--repeat 5]

A fresh rule set per timing (classification is cached per name and rule set). Best of --repeat.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from receipts.schema import categories
from receipts.schema.kernel_names import canonical_kernel_name

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "kernel_categories_expected.tsv"


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    repeat = ap.parse_args().repeat
    names = [line.split("\t", 1)[1].rstrip("\n") for line in CORPUS.read_text().splitlines(keepends=True)
             if not line.startswith("#")]
    both = best(lambda: categories.load_category_rules().classify_many(names), repeat)
    canon = best(lambda: [canonical_kernel_name(n) for n in names], repeat)
    categories.canonical_kernel_name = lambda n: n  # the reference: every rule on the name alone
    alone = best(lambda: categories.load_category_rules().classify_many(names), repeat)
    print(f"{len(names)} kernel names, best of {repeat}")
    print(f"classify_many, name alone (reference)      {1000 * alone:8.1f} ms")
    print(f"classify_many, name or canonical spelling  {1000 * both:8.1f} ms  ({both / alone:.2f}x)")
    print(f"canonical_kernel_name alone                {1000 * canon:8.1f} ms  ({canon / alone:.2f}x)")


if __name__ == "__main__":
    main()
