"""Compare two receipts: refuse unless they are the same lane; otherwise a verdict, the ratio with its
interval (run-to-run noise included), each run's own interval, the noise floor of the baseline's configuration
(analysis/configuration.py), and drift.

Refusal is a result (Comparison.comparable = False with the differing fields), never an exception.
The verdict is analysis.verdict.decide's, the one rule every command uses. `compare` is pure (the floor
is passed in; without one the default floor applies); `compare_in_store` reads both receipts and their
lane's floor.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from receipts.analysis import telemetry
from receipts.analysis.configuration import configuration_floor
from receipts.analysis.lanes import lane_of
from receipts.analysis.listing import series_headline
from receipts.analysis.noise import NoiseFloor, default_floor, floor_json
from receipts.analysis.record import StoredReceipt
from receipts.analysis.figures import RatioCI, RunInterval, Summary
from receipts.analysis.straggler_reports import explains, stored_report_many
from receipts.analysis.verdict import MIN_EFFECT, Verdict, VerdictResult, decide

from receipts.schema.lane import FIELDS

if TYPE_CHECKING:
    from receipts.store import Store

IDENTITY_FIELDS = FIELDS  # the lane's (schema/lane.py)
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
    interval: RunInterval | None = None         # steady-state median step time, moving-block bootstrap
    tokens_interval: RunInterval | None = None  # the same for tokens/s
    series_unit: str = "step"                   # what one point of the series is (MLPerf: epoch / block)
    time_to_train_s: float | None = None        # an MLPerf result's headline: run_start -> run_stop


@dataclass(frozen=True)
class Comparison:
    a: RunSummary
    b: RunSummary
    comparable: bool
    reason: str                         # one line: why refused, or the verdict
    differences: tuple[Difference, ...]  # identity fields that stop the comparison
    resolution: tuple[str, ...]          # alias resolution notes of both receipts
    ratio: RatioCI | None = None         # step time B/A, run-to-run noise included
    tokens_ratio: RatioCI | None = None  # tokens/s B/A, the same
    verdict: Verdict | None = None       # 'faster' | 'slower' | 'no change' | 'inconclusive' (analysis.verdict)
    drift: dict[str, tuple[Difference, ...]] | None = None
    noise_floor: NoiseFloor | None = None
    detail: VerdictResult | None = None  # the step-time verdict with its why and runs_needed
    straggler: dict[str, Any] | None = None  # analysis.straggler_reports.explains: does a straggler explain the difference
    memory_drift: list[dict[str, Any]] | None = None  # analysis.memory_geometry.drift: which bucket moved
    warnings: tuple[str, ...] = ()      # what makes the comparison weaker than it looks (comparison_warnings)


def _summary(r: StoredReceipt, *, intervals: bool = False) -> RunSummary:
    return RunSummary(r.id, r.run_name, r.step_summary, r.tokens_summary,
                      r.window_first_step, r.window_last_step, r.warmup_steps, r.window_rule,
                      r.peak_allocated_bytes, r.peak_reserved_bytes, r.ended_early,
                      r.step_interval if intervals else None,
                      r.tokens_interval if intervals else None,
                      r.provenance.get("step_unit") or "step", series_headline(r.provenance)["time_to_train_s"])


def identity_differences(a: StoredReceipt, b: StoredReceipt) -> tuple[Difference, ...]:
    out = []
    for name in IDENTITY_FIELDS:
        va, vb = getattr(a.lane, name), getattr(b.lane, name)
        if va is None or vb is None or va != vb:
            ra, rb = getattr(a.raw, name), getattr(b.raw, name)
            note = "missing" if va is None or vb is None else f"raw {ra!r} vs {rb!r}"
            out.append(Difference(name, va, vb, note))
    return tuple(out)


def _dict_diff(prefix: str, a: dict, b: dict) -> list[Difference]:
    out = []
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            out.append(Difference(f"{prefix}.{key}", a.get(key, "<absent>"), b.get(key, "<absent>")))
    return out


def recipe_facts(r: StoredReceipt) -> dict[str, Any]:
    """Every recipe fact a receipt holds, by name: its features (the preset's feature bundle, and what the log
    said of the recipe: a Megatron argument dump, nanochat's config, MLPerf's hyperparameters, a RECEIPT header's
    features), a nested mapping flattened (`optimizer: {name: AdamW}` -> `features.optimizer.name`). None is no
    fact. A new source of recipe facts (the optimizer a recorder sees) joins by landing in this mapping.

    `program`: the third-party training program whose log it is (megatron, nanochat, torchtitan, mllog, ...;
    none for a run only the capture library logged, or a log read by a declared step line): two programs name
    their recipes in different words, so their facts share no name, yet they are different recipes."""
    out: dict[str, Any] = {}
    program = (r.source_format or "").split("+")[-1]
    if program and program not in ("receipt", "declared"):  # the capture library's own log, a declared step line
        out["program"] = program

    def put(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                put(f"{prefix}.{key}", inner)
        elif value is not None:
            out[prefix] = value

    put("features", r.features)
    return out


def recipe_drift(a: StoredReceipt, b: StoredReceipt) -> tuple[Difference, ...]:
    """The recipe facts both receipts know and that differ, field by field. A fact one side does not hold is
    unknown there, not drift: a log without an argument dump says nothing about the learning rate."""
    fa, fb = recipe_facts(a), recipe_facts(b)
    return tuple(Difference(k, fa[k], fb[k]) for k in sorted(fa.keys() & fb.keys()) if fa[k] != fb[k])


def drift(a: StoredReceipt, b: StoredReceipt) -> dict[str, tuple[Difference, ...]]:
    """recipe (recipe_drift: feature bundle, model shape, argument dumps) / runtime (software, env overlay) /
    infrastructure."""
    # A receipt that names no profiler ran under none (ingest/profiler.py): nsys against none is drift too.
    soft_a = {"profiler": "none", **{k: v for k, v in a.software.items() if k not in INFRA_SOFTWARE}}
    soft_b = {"profiler": "none", **{k: v for k, v in b.software.items() if k not in INFRA_SOFTWARE}}
    infra: list[Difference] = []
    for name in ("machine_class", "gpu_model", "gpu_count", "world_size"):
        # a fact one side never stated (a log that names no GPU) is unknown there, not a different machine
        if getattr(a, name) != getattr(b, name) and getattr(a, name) is not None and getattr(b, name) is not None:
            infra.append(Difference(name, getattr(a, name), getattr(b, name)))
    infra += _dict_diff("software", {k: a.software[k] for k in a.software if k in INFRA_SOFTWARE},
                        {k: b.software[k] for k in b.software if k in INFRA_SOFTWARE})
    infra += _dict_diff("topology", a.topology, b.topology)
    return {
        "recipe": recipe_drift(a, b),
        "runtime": tuple(_dict_diff("software", soft_a, soft_b) + _dict_diff("env", a.env, b.env)),
        "infrastructure": tuple(infra),
    }


def _ratio(v: VerdictResult | None) -> RatioCI | None:
    return None if v is None else RatioCI(v.ratio, v.ci_low, v.ci_high, v.confidence, v.method)


# Steady windows whose lengths differ by more than this factor describe different parts of their runs: a run whose
# step time drifts (a sequence length that grows) has a different median over steps 20..470 than over 20..2130.
WINDOW_SPAN_FACTOR = 1.5


def comparison_warnings(a: StoredReceipt, b: StoredReceipt) -> tuple[str, ...]:
    """A receipt compared with itself, a superseded receipt, steady windows of unequal length."""
    out = []
    if a.id == b.id:
        out.append(f"A and B are the same receipt {a.id} ({a.run_name}): the comparison measures nothing")
    for label, r in (("A", a), ("B", b)):
        if r.superseded_by:
            out.append(f"{label} {r.run_name} ({r.id[:12]}) is superseded by {r.superseded_by} (a later ingest of the "
                       "same run, which holds more of it)")
    spans = [r.window_last_step - r.window_first_step + 1 for r in (a, b)
             if r.window_first_step is not None and r.window_last_step is not None]
    if a.id != b.id and len(spans) == 2 and min(spans) > 0 and max(spans) > WINDOW_SPAN_FACTOR * min(spans):
        out.append(f"the steady windows differ in length: A steps {a.window_first_step}..{a.window_last_step}, "
                   f"B steps {b.window_first_step}..{b.window_last_step} (more than {WINDOW_SPAN_FACTOR:g}x apart): "
                   "each median describes a different part of its run")
    return tuple(out)


def compare(a: StoredReceipt, b: StoredReceipt, *, floor: NoiseFloor | None = None,
            min_effect: float = MIN_EFFECT, stragglers: tuple[dict | None, dict | None] = (None, None)) -> Comparison:
    """B against A. `floor`: the lane's noise floor (analysis.lanes.lane_floors); None = the default floor."""
    resolution = tuple(f"A: {n}" for n in a.resolution) + tuple(f"B: {n}" for n in b.resolution)
    if not a.complete or not b.complete:
        rumors = [r for r in (a, b) if not r.complete]
        names = ", ".join(f"{r.run_name} ({r.id[:12]}) lacks {', '.join(r.lane.missing)}"
                          for r in rumors)
        return Comparison(_summary(a), _summary(b), False, f"refused: incomplete identity (a rumor): {names}",
                          identity_differences(a, b), resolution, warnings=comparison_warnings(a, b))
    diffs = identity_differences(a, b)
    if diffs:
        fields = "; ".join(f"{d.field} {d.a!r} != {d.b!r}" for d in diffs)
        return Comparison(_summary(a), _summary(b), False, f"refused: not the same lane: {fields}", diffs, resolution,
                          warnings=comparison_warnings(a, b))
    floor = floor or default_floor()
    sa, sb = _summary(a, intervals=True), _summary(b, intervals=True)
    detail = decide([sa.interval], [sb.interval], floor, min_effect=min_effect) if sa.interval and sb.interval else None
    tokens = (decide([sa.tokens_interval], [sb.tokens_interval], floor, min_effect=min_effect, lower_is_better=False)
              if sa.tokens_interval and sb.tokens_interval else None)
    if detail is None:
        verdict: Verdict = "inconclusive"
        reason = "comparable, but a run has fewer than 2 steady-state steps: inconclusive"
    else:
        verdict = detail.verdict
        reason = (f"B/A median step time {detail.ratio:.4f} [{detail.ci_low:.4f}, {detail.ci_high:.4f}] "
                  f"({detail.confidence:.0%}, run-to-run noise included): {verdict}: {detail.why}")
    straggler = explains(*stragglers, sa.step_ms.median if sa.step_ms else None,
                         sb.step_ms.median if sb.step_ms else None)
    return Comparison(sa, sb, True, reason, (), resolution, _ratio(detail), _ratio(tokens), verdict, drift(a, b),
                      floor, detail, straggler, warnings=comparison_warnings(a, b))


def compare_in_store(store: "Store", a_id: str, b_id: str, *, min_effect: float = MIN_EFFECT) -> Comparison:
    """Load both receipts and the noise floor of A's configuration in their lane (analysis/configuration.py: A's tag,
    else A's recipe and runtime; B left out; the most recent FLOOR_WINDOW), then compare."""
    from receipts.analysis.record import load_many

    from receipts.analysis.memory_geometry import drift as memory_drift, geometry, load_sources

    loaded = load_many(store, [a_id, b_id], series=False)
    a, b = loaded[a_id], loaded[b_id]
    lane = lane_of(a)
    # The floor of A's configuration, B never in it (analysis/configuration.py): the same pair, the same verdict,
    # whatever other runs share the lane.
    floor = configuration_floor(store, a, b, drift) if lane is not None and lane == lane_of(b) else None
    reports = stored_report_many(store, [a_id, b_id])  # both runs' straggler reports in one read
    result = compare(a, b, floor=floor, min_effect=min_effect, stragglers=(reports.get(a_id), reports.get(b_id)))
    # Memory drift is a fact about the two runs, reported whether or not their speeds may be compared.
    sources = load_sources(store, [a_id, b_id])
    ga, gb = (geometry(sources[r.id], peak_allocated_bytes=r.peak_allocated_bytes,
                       peak_reserved_bytes=r.peak_reserved_bytes) for r in (a, b))
    return replace(result, memory_drift=memory_drift(ga, gb), drift=_with_telemetry(store, result.drift, a_id, b_id))


def _with_telemetry(store: "Store", found: dict[str, tuple[Difference, ...]] | None, a_id: str, b_id: str
                    ) -> dict[str, tuple[Difference, ...]] | None:
    """The GPUs' telemetry differences as infrastructure drift (a refused comparison has no drift: None stays None)."""
    if found is None:
        return None
    stored = telemetry.load(store, [a_id, b_id])
    return with_telemetry(found, stored.get(a_id, ()), stored.get(b_id, ()))


def with_telemetry(found: dict[str, tuple[Difference, ...]], a: tuple, b: tuple) -> dict[str, tuple[Difference, ...]]:
    """`found` with the differences of two runs' GPU telemetry (per-rank GpuTelemetry; clocks, power limit,
    throttling, errors: analysis/telemetry.drift) added to its infrastructure drift."""
    rows = telemetry.drift(telemetry.summarise(a), telemetry.summarise(b))
    return {**found, "infrastructure": tuple(found.get("infrastructure", ())) + tuple(Difference(*row) for row in rows)}


def interval_json(i: RunInterval | None) -> dict[str, Any] | None:
    return None if i is None else {"median": i.median, "ci_low": i.ci_low, "ci_high": i.ci_high,
                                   "confidence": i.confidence, "n_steps": i.n, "block_length": i.block_length,
                                   "method": i.method}


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
                "interval": interval_json(s.interval),
            },
            "memory": {"peak_allocated_bytes": s.peak_allocated_bytes, "peak_reserved_bytes": s.peak_reserved_bytes},
            "ended_early": s.ended_early, "time_to_train_s": s.time_to_train_s, "series_unit": s.series_unit,
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
        "memory_drift": c.memory_drift,
        "warnings": list(c.warnings),
    }
    if c.comparable:
        out["ratio"] = ci(c.ratio, "step_time")
        out["tokens_per_s_ratio"] = ci(c.tokens_ratio, "tokens_per_s")
        out["verdict"] = c.verdict
        out["why"] = c.detail.why if c.detail else c.reason
        out["runs_needed"] = c.detail.runs_needed if c.detail else None
        out["noise_floor"] = floor_json(c.noise_floor)
        out["drift"] = {k: [{"field": d.field, "a": d.a, "b": d.b} for d in v] for k, v in (c.drift or {}).items()}
        out["straggler"] = c.straggler
    return out
