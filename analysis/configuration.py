"""The runs of a baseline's configuration: where a comparison's noise floor comes from.

A verdict's noise is how much one run of the *baseline's* configuration moves when nothing changes. Measured from
every current run of the lane it would take in the runs being judged and other pull requests' runs: in a lane of 4
baseline runs and 6 planted variants, a +9.4% attention swap read as within a 4.6% "floor" that the variants
themselves made. So the floor of `compare A B` (the CLI, the dashboard's compare view) is measured from:

  1. the lane's current runs that carry every tag A carries ("4 runs tagged main"), when A has a tag;
  2. else the lane's untagged current runs with no recipe or runtime drift from A (analysis/compare.py's `drift`: the same
     features, model shape, software outside the node image and environment overlay);

in both cases never B (the run being judged), and of those the most recent FLOOR_WINDOW. `compare` and the claims
gate's pair claims (baseline: a receipt) use it; `check` and tag claims measure theirs on the tag's runs
(analysis/check.py), candidates left out. With fewer than MIN_RUNS
such runs the floor is the documented default and says "too few baseline runs to bound this". So the same pair
gets the same verdict whatever other pull requests have put into the lane.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Sequence

from receipts.analysis.lanes import Lane, lane_of, lane_run_rows
from receipts.analysis.noise import FLOOR_WINDOW, MIN_RUNS, NoiseFloor, noise_floor

if TYPE_CHECKING:
    from receipts.analysis.record import StoredReceipt
    from receipts.store import Store

# Untagged baselines: how many of the lane's most recent runs are read to find those without drift from A.
_SCAN = 5 * FLOOR_WINDOW


def basis_words(n: int, a: "StoredReceipt") -> str:
    """'4 runs tagged main' / '3 runs with the baseline's recipe and runtime'."""
    runs = f"{n} run{'s' if n != 1 else ''}"
    if a.tags:
        return f"{runs} tagged {', '.join(sorted(a.tags))}"
    return f"{runs} with {a.run_name}'s recipe and runtime (no tag on {a.run_name})"


def configuration_floor(store: "Store", a: "StoredReceipt", b: "StoredReceipt",
                        drift: Callable[["StoredReceipt", "StoredReceipt"], dict]) -> NoiseFloor | None:
    """The noise floor of A's configuration in A's lane, B left out (module docstring); None for a rumor.
    `drift` is analysis/compare.py's (passed in: that module imports this one)."""
    return configuration_floors(store, [(a, b)], drift)[0]


def configuration_floors(store: "Store", pairs: Sequence[tuple["StoredReceipt", "StoredReceipt"]],
                         drift: Callable[["StoredReceipt", "StoredReceipt"], dict]) -> list[NoiseFloor | None]:
    """configuration_floor of each (A, B), one read of a lane's runs per (lane, A's tags) however many pairs share
    it (the claims gate judges a hundred pairs at once)."""
    keys = {(lane, tuple(sorted(a.tags))) for a, _ in pairs if (lane := lane_of(a)) is not None}
    reads = _lane_reads(store, keys)
    loaded = _prefetch(store, [rows for (_, tags), rows in reads.items() if not tags])
    out: list[NoiseFloor | None] = []
    for a, b in pairs:
        lane = lane_of(a)
        if lane is None:
            out.append(None)
            continue
        rows = [r for r in reads[(lane, tuple(sorted(a.tags)))] if r["receipt_id"] != b.id]
        if a.tags:
            rows = [r for r in rows if set(a.tags) <= set(r["tags"] or ())][-FLOOR_WINDOW:]
        else:
            rows = _undrifted(store, a, rows, drift, loaded)
        out.append(_floor(a, rows))
    return out


def _lane_reads(store: "Store", keys: set[tuple[Lane, tuple[str, ...]]]) -> dict[tuple, list[dict]]:
    """The lane_runs rows of each (lane, tags) key, one query per first tag for all the lanes that need it."""
    by_tag: dict[str | None, set[Lane]] = {}
    for lane, tags in keys:
        by_tag.setdefault(tags[0] if tags else None, set()).add(lane)
    rows: dict[tuple[Lane, str | None], list[dict]] = {}
    for tag, lanes in by_tag.items():
        for r in lane_run_rows(store, sorted(lanes, key=str), tag=tag, last=_SCAN):
            lane = Lane.from_key(r["lane_key"])
            rows.setdefault((lane, tag), []).append(r)
    return {(lane, tags): rows.get((lane, tags[0] if tags else None), []) for lane, tags in keys}


def _prefetch(store: "Store", groups: list[list[dict]]) -> dict[str, "StoredReceipt"]:
    """The newest untagged runs of each untagged group, one load for all: what _undrifted reads first."""
    from receipts.analysis.record import load_many

    ids = list(dict.fromkeys(r["receipt_id"] for rows in groups
                             for r in [r for r in reversed(rows) if not r["tags"]][:FLOOR_WINDOW + 2]))
    return load_many(store, ids, series=False) if ids else {}


def _undrifted(store: "Store", a: "StoredReceipt", rows: list[dict], drift: Callable,
               loaded: dict[str, "StoredReceipt"]) -> list[dict]:
    """The most recent FLOOR_WINDOW untagged rows without recipe or runtime drift from A (A itself kept), newest
    first read in batches: a lane of one recipe reads about FLOOR_WINDOW receipts, not all it scanned."""
    from receipts.analysis.record import load_many

    kept: list[dict] = []
    todo = [r for r in reversed(rows) if r["receipt_id"] == a.id or not r["tags"]]
    while todo and len(kept) < FLOOR_WINDOW:
        batch, todo = todo[:FLOOR_WINDOW + 2], todo[FLOOR_WINDOW + 2:]
        wanted = [r["receipt_id"] for r in batch if r["receipt_id"] not in loaded and r["receipt_id"] != a.id]
        if wanted:
            loaded |= load_many(store, wanted, series=False)
        kept += [r for r in batch if r["receipt_id"] == a.id or _same(a, loaded[r["receipt_id"]], drift)]
    return list(reversed(kept[:FLOOR_WINDOW]))


def _floor(a: "StoredReceipt", rows: list[dict]) -> NoiseFloor:
    floor = noise_floor([(r["receipt_id"], r["median_step_ms"]) for r in rows])
    basis = basis_words(floor.n_runs, a)
    if floor.source == "lane":
        return replace(floor, basis=basis, note=f"{floor.note}; from {basis}")
    return replace(floor, basis=basis,
                   note=(f"too few baseline runs to bound this: {basis} (B left out), {MIN_RUNS} needed; the default "
                         f"{floor.floor_pct:g}% is assumed"))


def _same(a: "StoredReceipt", other: "StoredReceipt", drift: Callable) -> bool:
    moved = drift(a, other)
    return not moved.get("recipe") and not moved.get("runtime")
