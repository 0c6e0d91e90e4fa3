"""What a profiled run is explained from, read from the store as plain rows: its component summaries (stored at
ingest, analysis/components.py), its kernels' launch shapes, and the step-to-step spread of its category and rank
components. A few hundred rows a run, so plain Python and DuckDB do it, and `compare` / `explain` import no polars
or NumPy (tests/test_lean_imports.py); the ingest, which computes components from a whole profile, keeps polars.

The spread: a component's value is a median over steps, so its within-run variance is pi/2 x s^2 / n, s the steps'
robust spread (1.4826 x MAD: one slow step does not make a component look noisy), times the AR(1) factor
(1 + r) / (1 - r) of the steps' lag-1 autocorrelation r (in [0, 0.9]: a host gap that drifts from step to step,
where the CPU runs ahead of the GPU, is known far less well than its step count says), which also divides the steps
into effective ones. A within-run part: the between-run part comes from the runs (analysis/explain_noise.py).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from receipts.schema.categories import BETWEEN_STEPS, DECOMPOSITION, HOST_GAP

if TYPE_CHECKING:
    from receipts.store import Store

# The rule analysis/components.py makes component rows under: bump it when a level's definition there changes
# (`receipts db upgrade` recomputes rows stored under another rule).
RULE = "components-v3"
EXPOSED = "exposed_comm"
# (level, name) -> (the within-run variance of the run's value, ms², the effective steps it rests on)
Spread = dict[tuple[str, str], tuple[float, int]]


def stored_many(store: "Store", ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The stored component rows (under this build's RULE) of each receipt that has them: its newest attached
    export's, as `anatomy` shows it (sql/explain_components.sql); each row level, name, category, ms_per_step,
    calls_per_step, n_steps."""
    out: dict[str, list[dict[str, Any]]] = {}
    if not ids:
        return out
    for r in store.query_rows("explain_components", {"ids": ids, "rule": RULE}):
        rid = r.pop("receipt_id")
        r.pop("source_sha256")
        out.setdefault(rid, []).append(r)
    return out


def shapes_many(store: "Store", ids: list[str]) -> dict[str, dict[str, dict[str, tuple[float, float]]]]:
    """Each receipt's kernels by launch shape (its newest attached export's, sql/explain_kernel_shapes.sql): kernel
    name -> shape -> (calls, ms) per rank-step. A receipt whose profile recorded no shapes (or that was stored
    before schema 16) is absent."""
    out: dict[str, dict[str, dict[str, tuple[float, float]]]] = {}
    if not ids:
        return out
    for r in store.query_rows("explain_kernel_shapes", {"ids": ids}):
        kernel = out.setdefault(r["receipt_id"], {}).setdefault(r["name"], {})
        kernel[r["shape"]] = (float(r["calls_per_step"]), float(r["ms_per_step"]))
    return out


def spread_many(store: "Store", ids: list[str]) -> dict[str, Spread]:
    """The within-run spread (module docstring) of each category and rank component of each receipt's newest
    attached export, from its stored per-step rows (sql/explain_step_series.sql); a profile of one rank has no rank
    level. A receipt without an export is absent."""
    if not ids:
        return {}
    series: dict[str, dict[tuple[str, str], list[float]]] = {}
    for r in store.query_rows("explain_step_series", {"ids": ids, "decomposition": list(DECOMPOSITION),
                                                      "host_gap": HOST_GAP, "between_steps": BETWEEN_STEPS,
                                                      "exposed": EXPOSED}):
        series.setdefault(r["receipt_id"], {}).setdefault((r["level"], r["name"]), []).append(float(r["ms"]))
    out = {}
    for rid, by_name in series.items():
        ranks = sum(level == "rank" for level, _ in by_name)
        out[rid] = {key: series_spread(x) for key, x in by_name.items() if key[0] != "rank" or ranks >= 2}
    return out


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

