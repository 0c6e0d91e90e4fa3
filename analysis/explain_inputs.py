"""What a profiled run is explained from, read from the store as plain rows: its component summaries (stored at
ingest, analysis/components.py), its kernels' launch shapes, and the step-to-step spread of its category and rank
components. A few hundred rows a run, so plain Python and DuckDB do it, and `compare` / `explain` import no polars
or NumPy (tests/test_lean_imports.py); the ingest, which computes components from a whole profile, keeps polars.

The spread: a component's value is a median over steps, so its within-run variance is pi/2 x s^2 / n, s the steps'
robust spread (1.4826 x MAD: one slow step does not make a component look noisy), times the AR(1) factor
(1 + r) / (1 - r) of the steps' lag-1 autocorrelation r (in [0, 0.9]: a host gap that drifts from step to step,
where the CPU runs ahead of the GPU, is known far less well than its step count says), which also divides the steps
into effective ones. A within-run part: the between-run part comes from the runs (analysis/explain_noise.py).
A long gap's place (the gap level) is a mean over steps, mostly zeros: s^2 / n with s the steps' sample standard
deviation (the MAD of a place with a gap in a third of the steps is 0), times the same factor (a profiler's pauses
come in runs of steps).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from receipts.schema.step_parts import BETWEEN_STEPS, DECOMPOSITION, HOST_GAP

if TYPE_CHECKING:
    from receipts.store import Store

# The rule analysis/components.py makes component rows under: bump it when a level's definition there changes
# (`receipts db upgrade` recomputes rows stored under another rule).
RULE = "components-v4"
EXPOSED = "exposed_comm"
GAP_START = "(span start)"  # the place of a long gap before a step span's first activity (the gap level)
# (level, name) -> (the within-run variance of the run's value, ms², the effective steps it rests on)
Spread = dict[tuple[str, str], tuple[float, int]]


def _exports(exports: Mapping[str, str]) -> dict[str, list[str]]:
    """The query parameters naming each receipt's export: $ids and, in the same order, $exports."""
    return {"ids": list(exports), "exports": list(exports.values())}


def stored_many(store: "Store", exports: Mapping[str, str]) -> dict[str, list[dict[str, Any]]]:
    """The stored component rows (under this build's RULE) of each receipt that has them. `exports`: receipt id ->
    the source_sha256 of its newest attached export, as analysis/profiles.py profiled() found it (the one `anatomy`
    shows; sql/explain_components.sql); each row level, name, category, ms_per_step, calls_per_step, n_steps."""
    out: dict[str, list[dict[str, Any]]] = {}
    if not exports:
        return out
    for r in store.query_rows("explain_components", {**_exports(exports), "rule": RULE}):
        rid = r.pop("receipt_id")
        r.pop("source_sha256")
        out.setdefault(rid, []).append(r)
    return out


def shapes_many(store: "Store", exports: Mapping[str, str]) -> dict[str, dict[str, dict[str, tuple[float, float]]]]:
    """Each receipt's kernels by launch shape (the export `exports` names for it, as stored_many's;
    sql/explain_kernel_shapes.sql): kernel name -> shape -> (calls, ms) per rank-step. A receipt whose profile
    recorded no shapes (or that was stored before schema 16) is absent."""
    out: dict[str, dict[str, dict[str, tuple[float, float]]]] = {}
    if not exports:
        return out
    for r in store.query_rows("explain_kernel_shapes", _exports(exports)):
        kernel = out.setdefault(r["receipt_id"], {}).setdefault(r["name"], {})
        kernel[r["shape"]] = (float(r["calls_per_step"]), float(r["ms_per_step"]))
    return out


def spread_many(store: "Store", exports: Mapping[str, str]) -> dict[str, Spread]:
    """The within-run spread (module docstring) of each category and rank component of each receipt's export
    (`exports`, as stored_many's), from its stored per-step rows (sql/explain_step_rows.sql,
    explain_step_markers.sql): the series analysis/components.py category_steps and rank_steps make of the same
    rows. A profile of one rank has no rank level; a receipt without steady steps is absent."""
    if not exports:
        return {}
    params = _exports(exports)
    rows: dict[str, list[dict[str, Any]]] = {}
    for r in store.query_rows("explain_step_rows", params):
        rows.setdefault(r["receipt_id"], []).append(r)
    markers: dict[str, list[dict[str, Any]]] = {}
    for r in store.query_rows("explain_step_markers", params):
        markers.setdefault(r["receipt_id"], []).append(r)
    gaps: dict[str, list[dict[str, Any]]] = {}
    for r in store.query_rows("explain_gap_rows", params):
        gaps.setdefault(r["receipt_id"], []).append(r)
    out = {}
    for rid, steps in markers.items():
        series = step_series(rows.get(rid, []), steps)
        if series:
            out[rid] = {key: series_spread(x) for key, x in series.items()}
            out[rid].update({key: mean_spread(x) for key, x in gap_series(gaps.get(rid, []), steps).items()})
    return out


def gap_series(gaps: Sequence[Mapping[str, Any]], steps: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], list[float]]:
    """Per gap place ('NAME #CALL'), its gap time in each steady step, in step order, summed over the ranks that ran
    the step and divided by them (a rank-step without a gap there counts 0), as components.gap_steps. `gaps`: rank,
    step, after, call, gap_ms; `steps`: rank, step, warmup."""
    steady = {(s["rank"], s["step"]) for s in steps if s["step"] is not None and not s["warmup"]}
    ranks_in_step: dict[int, int] = {}
    for _, step in steady:
        ranks_in_step[step] = ranks_in_step.get(step, 0) + 1
    total: dict[tuple[str, int], float] = {}
    for g in gaps:
        if (g["rank"], g["step"]) in steady:
            name = GAP_START if g["after"] is None else f"{g['after']} #{g['call']}"
            total[(name, g["step"])] = total.get((name, g["step"]), 0.0) + g["gap_ms"]
    return {("gap", name): [total.get((name, step), 0.0) / n for step, n in sorted(ranks_in_step.items())]
            for name in sorted({name for name, _ in total})}


def mean_spread(x: Sequence[float]) -> tuple[float, int]:
    """(the within-run variance of the mean of a step series, the effective steps): the module docstring's rule for
    a gap's place. Steps in step order."""
    n = len(x)
    var = statistics.variance(x) if n > 1 else 0.0
    factor = (1.0 + (r := _lag1(x))) / (1.0 - r)
    return var / max(n, 1) * factor, max(1, int(n / factor))


def step_series(rows: Sequence[Mapping[str, Any]], steps: Sequence[Mapping[str, Any]]
                ) -> dict[tuple[str, str], list[float]]:
    """Per (level, name), a component's value in each steady step, in step order: each category's time (the host
    gap and the time between steps too) summed over the ranks that ran the step and divided by them, a rank without
    it counting 0; each rank's exposed communication (0 where it has none), where the profile has two ranks or more.
    `rows`: rank, step, category, time_ms in rank, step order; `steps`: rank, step, wall_ms, start_ns, warmup."""
    steady = {(s["rank"], s["step"]) for s in steps if s["step"] is not None and not s["warmup"]}
    ranks_in_step: dict[int, int] = {}
    for _, step in steady:
        ranks_in_step[step] = ranks_in_step.get(step, 0) + 1
    kept = [(r["rank"], r["step"], r["category"], r["time_ms"]) for r in rows if (r["rank"], r["step"]) in steady]
    span: dict[tuple[int, int], float] = {}
    for rank, step, category, ms in kept:
        if category in DECOMPOSITION:
            span[(rank, step)] = span.get((rank, step), 0.0) + ms
    # the host gap: the step's range (its marker) less its GPU span, so the parts and the gap sum to the range
    kept += [(s["rank"], s["step"], HOST_GAP, s["wall_ms"] - span.get((s["rank"], s["step"]), 0.0)) for s in steps
             if (s["rank"], s["step"]) in steady and s["wall_ms"] is not None]
    total: dict[tuple[str, int], float] = {}
    for _, step, category, ms in kept:
        total[(category, step)] = total.get((category, step), 0.0) + ms
    out: dict[tuple[str, str], list[float]] = {}
    for category in sorted({c for _, _, c, _ in kept}):
        out[("category", category)] = [total.get((category, step), 0.0) / n for step, n in sorted(ranks_in_step.items())]
    between = _between_steps(steps, steady)
    if between:
        out[("category", BETWEEN_STEPS)] = between
    ranks = sorted({rank for rank, _ in steady}, key=_nulls_first)
    if len(ranks) >= 2:
        exposed = {(rank, step): ms for rank, step, category, ms in kept if category == EXPOSED}
        for rank in ranks:
            out[("rank", f"rank {rank}")] = [exposed.get((rank, step), 0.0)
                                             for step in sorted(step for r, step in steady if r == rank)]
    return out


def _between_steps(steps: Sequence[Mapping[str, Any]], steady: set[tuple[int, int]]) -> list[float]:
    """Per steady step that has a next step marker on its rank, in step order: the time from the end of its range to
    the start of the next one, the mean over the ranks that have one."""
    marked = sorted(((s["rank"], s["start_ns"], s["step"], s["wall_ms"]) for s in steps
                     if s["step"] is not None and s["start_ns"] is not None and s["wall_ms"] is not None),
                    key=lambda m: (_nulls_first(m[0]), m[1]))
    gaps: dict[int, list[float]] = {}
    for (rank, start, step, wall), (next_rank, next_start, _, _) in zip(marked, marked[1:]):
        if next_rank == rank and (rank, step) in steady:
            gaps.setdefault(step, []).append((next_start - start) / 1e6 - wall)
    return [sum(x) / len(x) for _, x in sorted(gaps.items())]


def _nulls_first(value: int | None) -> tuple[bool, int]:
    return value is not None, value or 0


def series_spread(x: Sequence[float]) -> tuple[float, int]:
    """(the within-run variance of the median of a step series, in its unit squared, the effective steps): the
    module docstring's rule. Steps in step order."""
    n = len(x)
    s = 0.0
    if n:
        centre = statistics.median(x)
        s = 1.4826 * statistics.median([abs(v - centre) for v in x])
    factor = (1.0 + (r := _lag1(x))) / (1.0 - r)
    return math.pi / 2.0 * s * s / max(n, 1) * factor, max(1, int(n / factor))


def _lag1(x: Sequence[float]) -> float:
    """The lag-1 autocorrelation of a step series, clipped to [0, 0.9] (0: too short or constant)."""
    if len(x) < 4:
        return 0.0
    mean = sum(x) / len(x)
    e = [v - mean for v in x]
    g0 = sum(v * v for v in e)
    return 0.0 if g0 <= 0 else min(0.9, max(0.0, sum(u * v for u, v in zip(e[1:], e[:-1])) / g0))

