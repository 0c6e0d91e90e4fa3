"""Compare two receipts: refuse unless they are the same lane; otherwise a ratio with its CI, and drift.

Refusal is a result (Comparison.comparable = False with the differing fields), never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from receipts.analysis.record import StoredReceipt
from receipts.analysis.stats import RatioCI, Summary, ratio_ci, summarize

IDENTITY_FIELDS = ("host_lineage", "preset_family", "launch_regime")
RAW_FIELD = {"host_lineage": "raw_host_lineage", "preset_family": "raw_preset", "launch_regime": "raw_regime"}
# A ratio outside [1 - MIN_EFFECT, 1 + MIN_EFFECT] is needed, besides a CI that excludes 1, for a verdict.
MIN_EFFECT = 0.01
# Software facts that belong to the node image rather than the training stack.
INFRA_SOFTWARE = ("driver", "driver_version", "nvidia_driver", "numa_balancing", "kernel")


@dataclass(frozen=True)
class Difference:
    field: str
    a: Any
    b: Any
    note: str = ""


@dataclass(frozen=True)
class RunSummary:
    id: str
    run_name: str
    step_ms: Summary | None
    tokens_per_s: Summary | None
    first_step: int | None
    last_step: int | None
    warmup_steps: int
    window_rule: str
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    ended_early: str | None


@dataclass(frozen=True)
class Comparison:
    a: RunSummary
    b: RunSummary
    comparable: bool
    reason: str                         # one line: why refused, or the verdict
    differences: tuple[Difference, ...]  # identity fields that stop the comparison
    resolution: tuple[str, ...]          # alias resolution notes of both receipts
    ratio: RatioCI | None = None         # step time B/A
    tokens_ratio: RatioCI | None = None  # tokens/s B/A
    verdict: str | None = None           # 'faster' | 'slower' | 'no significant change' | 'inconclusive'
    drift: dict[str, tuple[Difference, ...]] | None = None


def _summary(r: StoredReceipt) -> RunSummary:
    return RunSummary(r.id, r.run_name, summarize(r.steady_step_ms), summarize(r.steady_tokens_per_s),
                      r.window_first_step, r.window_last_step, r.warmup_steps, r.window_rule,
                      r.peak_allocated_bytes, r.peak_reserved_bytes, r.ended_early)


def identity_differences(a: StoredReceipt, b: StoredReceipt) -> tuple[Difference, ...]:
    out = []
    for name in IDENTITY_FIELDS:
        va, vb = getattr(a, name), getattr(b, name)
        if va is None or vb is None or va != vb:
            ra, rb = getattr(a, RAW_FIELD[name]), getattr(b, RAW_FIELD[name])
            note = "missing" if va is None or vb is None else f"raw {ra!r} vs {rb!r}"
            out.append(Difference(name, va, vb, note))
    return tuple(out)


def _dict_diff(prefix: str, a: dict, b: dict) -> list[Difference]:
    out = []
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            out.append(Difference(f"{prefix}.{key}", a.get(key, "<absent>"), b.get(key, "<absent>")))
    return out


def drift(a: StoredReceipt, b: StoredReceipt) -> dict[str, tuple[Difference, ...]]:
    """recipe (feature bundle, model shape) / runtime (software, env overlay) / infrastructure."""
    soft_a = {k: v for k, v in a.software.items() if k not in INFRA_SOFTWARE}
    soft_b = {k: v for k, v in b.software.items() if k not in INFRA_SOFTWARE}
    infra: list[Difference] = []
    for name in ("machine_class", "gpu_model", "gpu_count", "world_size"):
        if getattr(a, name) != getattr(b, name):
            infra.append(Difference(name, getattr(a, name), getattr(b, name)))
    infra += _dict_diff("software", {k: a.software[k] for k in a.software if k in INFRA_SOFTWARE},
                        {k: b.software[k] for k in b.software if k in INFRA_SOFTWARE})
    infra += _dict_diff("topology", a.topology, b.topology)
    return {
        "recipe": tuple(_dict_diff("features", a.features, b.features)),
        "runtime": tuple(_dict_diff("software", soft_a, soft_b) + _dict_diff("env", a.env, b.env)),
        "infrastructure": tuple(infra),
    }


def verdict_for(ratio: RatioCI | None, min_effect: float = MIN_EFFECT) -> str:
    """For step time: B faster when the whole CI is below 1 and the effect is at least min_effect."""
    if ratio is None:
        return "inconclusive"
    if ratio.ci_high < 1.0 and ratio.value <= 1.0 - min_effect:
        return "faster"
    if ratio.ci_low > 1.0 and ratio.value >= 1.0 + min_effect:
        return "slower"
    return "no significant change"


def compare(a: StoredReceipt, b: StoredReceipt, *, min_effect: float = MIN_EFFECT) -> Comparison:
    sa, sb = _summary(a), _summary(b)
    resolution = tuple(f"A: {n}" for n in a.resolution) + tuple(f"B: {n}" for n in b.resolution)
    if not a.complete or not b.complete:
        rumors = [r for r in (a, b) if not r.complete]
        names = ", ".join(f"{r.run_name} ({r.id[:12]}) lacks {', '.join(f for f in IDENTITY_FIELDS if not getattr(r, f))}"
                          for r in rumors)
        return Comparison(sa, sb, False, f"refused: incomplete identity (a rumor): {names}",
                          identity_differences(a, b), resolution)
    diffs = identity_differences(a, b)
    if diffs:
        fields = "; ".join(f"{d.field} {d.a!r} != {d.b!r}" for d in diffs)
        return Comparison(sa, sb, False, f"refused: not the same lane: {fields}", diffs, resolution)
    ratio = ratio_ci(a.steady_step_ms, b.steady_step_ms)
    tokens = ratio_ci(a.steady_tokens_per_s, b.steady_tokens_per_s)
    verdict = verdict_for(ratio, min_effect)
    if ratio is None:
        reason = "comparable, but a run has fewer than 2 steady-state steps: inconclusive"
    else:
        reason = (f"B/A median step time {ratio.value:.4f} "
                  f"[{ratio.ci_low:.4f}, {ratio.ci_high:.4f}] ({ratio.confidence:.0%} CI): {verdict}")
    return Comparison(sa, sb, True, reason, (), resolution, ratio, tokens, verdict, drift(a, b))


def to_json(c: Comparison) -> dict[str, Any]:
    """The stable `compare --json` contract."""
    def run(s: RunSummary) -> dict[str, Any]:
        st = s.step_ms
        return {
            "id": s.id, "run_name": s.run_name,
            "steady_state": {
                "median_step_ms": st.median if st else None, "p10_step_ms": st.p10 if st else None,
                "p90_step_ms": st.p90 if st else None, "cv": st.cv if st else None, "n_steps": st.n if st else 0,
                "first_step": s.first_step, "last_step": s.last_step, "warmup_steps": s.warmup_steps,
                "window_rule": s.window_rule,
                "median_tokens_per_s": s.tokens_per_s.median if s.tokens_per_s else None,
            },
            "memory": {"peak_allocated_bytes": s.peak_allocated_bytes, "peak_reserved_bytes": s.peak_reserved_bytes},
            "ended_early": s.ended_early,
        }

    def ci(r: RatioCI | None, metric: str) -> dict[str, Any] | None:
        if r is None:
            return None
        return {"metric": metric, "value": r.value, "ci_low": r.ci_low, "ci_high": r.ci_high,
                "confidence": r.confidence, "method": r.method}

    out: dict[str, Any] = {
        "comparable": c.comparable, "reason": c.reason, "a": run(c.a), "b": run(c.b),
        "differences": [{"field": d.field, "a": d.a, "b": d.b, "note": d.note} for d in c.differences],
        "resolution": list(c.resolution),
    }
    if c.comparable:
        out["ratio"] = ci(c.ratio, "step_time")
        out["tokens_per_s_ratio"] = ci(c.tokens_ratio, "tokens_per_s")
        out["verdict"] = c.verdict
        out["drift"] = {k: [{"field": d.field, "a": d.a, "b": d.b} for d in v] for k, v in (c.drift or {}).items()}
    return out
