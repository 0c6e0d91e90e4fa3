"""`receipts explain`: the step-time verdict (check's against a tag, compare's against one run) and the components
that explain it, read from the per-run component summaries stored at ingest (analysis/components.py) and judged by
analysis/explain.py. Also what `compare`, `check --markdown` and the dashboard's compare view show when both
sides have a profile.

Baseline of `--against tag:T`: check's (analysis/check.py) over the runs that can explain: the lane's `last` most
recent runs carrying T that have a profile with steady steps (newer runs without one are passed over), outliers
and runs without a steady state left out; the step verdict and the components judge against the same runs. Against
one run: compare's verdict, and a pairwise explanation (one run each side: the calibrated noise alone). The noise's
calibration is the profiler's (analysis/explain_noise.py calibration_for: the runs' profile formats).

A refusal is a result with one line saying why, like a refused comparison: a candidate without a profile (saying
which profile to attach), one whose profile has no steady steps, a baseline without any profiled run, or check's
and compare's own refusals (no baseline, incomplete identity, not the same lane).

The judgement's machinery (explain's statistics; check's baseline selection) is imported once both sides have a
profile, in the functions that use it: a `compare` of runs without one never loads it. What a profiled run is
judged from is a few hundred plain rows (analysis/explain_inputs.py): no command here imports polars or NumPy,
except to summarise a profile stored before its components were (tests/test_lean_imports.py).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from receipts.analysis import telemetry
from receipts.analysis.compare import Comparison, compare_in_store
from receipts.analysis.lanes import TAG_PREFIX
from receipts.analysis.profiles import profiled
from receipts.analysis.straggler_reports import stored_report
from receipts.errors import Remedy, UsageError

if TYPE_CHECKING:
    import polars as pl

    from receipts.analysis.explain_inputs import Spread
    from receipts.analysis.check import CandidateCheck, CheckResult
    from receipts.analysis.explain import Explanation, Mode, RunComponents, Value
    from receipts.analysis.recategorise import RulesDifference
    from receipts.schema.categories import CategoryRules
    from receipts.store import Store

EXIT_OK, EXIT_REFUSED = 0, 3
_HOW = {"nsys": "an Nsight Systems export of that run (nsys profile -t cuda,nvtx ...; nsys export --type sqlite)",
        "kineto": "the PyTorch profiler traces of that run, one per rank (torch.profiler with ProfilerStep markers)"}
_EITHER = ("an Nsight Systems export (nsys profile -t cuda,nvtx; nsys export --type sqlite) or the PyTorch profiler "
           "traces of each rank")


@dataclass(frozen=True)
class ExplainResult:
    receipt_id: str
    run_name: str
    against: str
    mode: Mode
    explanation: Explanation | None  # None when refused
    refusal: str | None               # one line: why there is no explanation and what to do
    names: Mapping[str, str]          # run name of every receipt id mentioned
    unprofiled: tuple[str, ...] = ()  # baseline runs (names) the components could not use: no profile attached
    stragglers: tuple[int, ...] = ()  # ranks the candidate's own straggler analysis names
    formats: tuple[str, ...] = ()     # profile formats of the runs compared
    remedy: Remedy | None = None      # a refusal's way out: a profile to attach (to `remedy.receipt`, or each run)
    rules: RulesDifference | None = None  # the runs were categorised under different kernel-category rules
    clock: telemetry.ClockVerdict | None = None  # the candidate's GPUs at other clocks, and whether that is the change

    @property
    def exit_code(self) -> int:
        return EXIT_REFUSED if self.explanation is None else EXIT_OK


def explain_in_store(store: "Store", ref: str, *, against: str, last: int, levels: Sequence[str] | None = None
                     ) -> ExplainResult:
    """Explain run `ref` against `tag:T` (the lane's baseline) or against one run; `levels` to show (default all)."""
    from receipts.analysis.check import parse_against, run_check
    from receipts.analysis.explain import LEVELS

    levels = LEVELS if levels is None else levels
    bad = [lv for lv in levels if lv not in LEVELS]
    if bad:
        raise UsageError(f"{bad[0]!r}: expected one of {', '.join(LEVELS)}", option="level")
    rid = store.resolve(ref)
    if against.startswith(TAG_PREFIX):
        parse_against(against)
        check = run_check(store, [rid], against=against, last=last, profiled_only=True)
        if check.candidates[0].outcome == "no_baseline":  # tagged runs without a profile: say to attach one
            check = run_check(store, [rid], against=against, last=last)
        return for_check(store, check.candidates[0], against=against, levels=levels, read=check)
    comparison = compare_in_store(store, store.resolve(against), rid)
    result = for_comparison(store, comparison, against=against, levels=levels, refuse_unprofiled=True)
    assert result is not None  # refuse_unprofiled: a refusal, never None
    return result


def for_check(store: "Store", c: CandidateCheck, *, against: str, levels: Sequence[str] | None = None,
              read: CheckResult | None = None) -> ExplainResult:
    """The explanation of one of check's candidates against its baseline (check's result, not read again; `read`:
    the check whose profiles and telemetry, read with profiled_only, are not read again either)."""
    names = {c.receipt_id: c.run_name}
    if c.outcome != "judged" or c.verdict is None or c.baseline is None:
        return ExplainResult(c.receipt_id, c.run_name, against, "lane", None, c.message, names)
    used = [b.id for b in c.baseline.used]
    names |= {b.id: b.run_name for b in c.baseline.used}
    wanted = [c.receipt_id, *used]
    known = read.profiles if read is not None else None
    profiles = profiled(store, wanted) if known is None else {i: known[i] for i in wanted if i in known}
    base_format = _majority([profiles[i]["source_format"] for i in used if i in profiles])
    refusal = _own_profile(c.run_name, profiles.get(c.receipt_id), base_format)
    if refusal is None and not any(i in profiles for i in used):
        refusal = (f"{c.run_name}: none of its {len(used)} baseline run(s) ({', '.join(names[i] for i in used)}) has a "
                   f"profile attached: attach one to each ({_EITHER})")
    if refusal is not None:
        remedy = (Remedy("attach", c.run_name) if c.receipt_id not in profiles
                  else None if any(i in profiles for i in used) else Remedy("attach"))
        return ExplainResult(c.receipt_id, c.run_name, against, "lane", None, refusal, names, remedy=remedy)
    from receipts.analysis.explain import LEVELS, StepChange, explain
    from receipts.analysis.explain_noise import calibration_for

    base_ids = [i for i in used if i in profiles and profiles[i]["has_steps"]]
    runs, rules = _runs(store, [c.receipt_id, *base_ids], names, profiles, baseline=base_ids)
    step = StepChange(c.verdict.verdict, c.baseline.median_step_ms, c.median_step_ms, c.message)
    formats = tuple(sorted({profiles[i]["source_format"] for i in [c.receipt_id, *base_ids]}))
    result = explain([runs[i] for i in base_ids], [runs[c.receipt_id]], step=step, mode="lane", levels=levels or LEVELS,
                     calibration=calibration_for(formats), kinds=_kinds(profiles, [c.receipt_id, *base_ids], base_ids))
    return ExplainResult(c.receipt_id, c.run_name, against, "lane", result, None, names,
                         tuple(names[i] for i in used if i not in base_ids), _stragglers(store, c.receipt_id),
                         formats, rules=rules,
                         clock=_clock(store, base_ids, c.receipt_id, runs, read.telemetry if read is not None else None))


def for_comparison(store: "Store", c: Comparison, *, against: str, levels: Sequence[str] | None = None,
                   refuse_unprofiled: bool = False) -> ExplainResult | None:
    """The pairwise explanation of a comparable pair (B against A). Without a profile on both sides: a refusal
    when `refuse_unprofiled` (explain), else None (compare shows nothing then)."""
    names = {c.a.id: c.a.run_name, c.b.id: c.b.run_name}
    if not c.comparable:
        return ExplainResult(c.b.id, c.b.run_name, against, "pairwise", None, c.reason, names)
    profiles = profiled(store, [c.a.id, c.b.id])
    refusal = (_own_profile(c.b.run_name, profiles.get(c.b.id), _format(profiles.get(c.a.id)))
               or _own_profile(c.a.run_name, profiles.get(c.a.id), _format(profiles.get(c.b.id))))
    if refusal is not None:
        lacking = next((r.run_name for r in (c.b, c.a) if r.id not in profiles), None)
        return ExplainResult(c.b.id, c.b.run_name, against, "pairwise", None, refusal, names,
                             remedy=Remedy("attach", lacking) if lacking else None) if refuse_unprofiled \
            else None
    from receipts.analysis.explain import LEVELS, StepChange, explain
    from receipts.analysis.explain_noise import calibration_for

    runs, rules = _runs(store, [c.a.id, c.b.id], names, profiles, baseline=[c.a.id])
    why = c.detail.why if c.detail else c.reason
    step = StepChange(c.verdict or "inconclusive", c.a.step_ms.median if c.a.step_ms else None,
                      c.b.step_ms.median if c.b.step_ms else None, why)
    formats = tuple(sorted({profiles[i]["source_format"] for i in names}))
    result = explain([runs[c.a.id]], [runs[c.b.id]], step=step, mode="pairwise", levels=levels or LEVELS,
                     calibration=calibration_for(formats), kinds=_kinds(profiles, [c.a.id, c.b.id], [c.a.id]))
    # the ranks B's straggler report names, as the comparison read it (not read again), else read here
    stragglers = (tuple(int(rank) for rank in c.straggler["b_stragglers"]) if c.straggler is not None
                  else _stragglers(store, c.b.id))
    return ExplainResult(c.b.id, c.b.run_name, against, "pairwise", result, None, names, (), stragglers, formats,
                         rules=rules, clock=_clock(store, [c.a.id], c.b.id, runs))


def _clock(store: "Store", base_ids: Sequence[str], candidate: str, runs: Mapping[str, RunComponents],
           read: Mapping[str, tuple] | None = None) -> telemetry.ClockVerdict | None:
    """Whether the candidate's kernels are slower by its GPUs' SM clock ratio (analysis/telemetry.py). `read`: the
    runs' telemetry where already read (check's), else read here."""
    stored = read if read is not None else telemetry.load(store, [*base_ids, candidate])
    base = [t for i in base_ids if (t := telemetry.summarise(stored.get(i, ()))) is not None]
    return telemetry.clock_verdict(base, telemetry.summarise(stored.get(candidate, ())),
                                   [runs[i].values for i in base_ids], [runs[candidate].values])


def _format(profile: Mapping[str, Any] | None) -> str | None:
    return None if profile is None else profile["source_format"]


def _majority(formats: list[str]) -> str | None:
    return Counter(formats).most_common(1)[0][0] if formats else None


def _own_profile(run_name: str, profile: Mapping[str, Any] | None, like: str | None) -> str | None:
    """Why a run cannot be explained from its own profile, or None when it can."""
    if profile is None:
        what = _HOW[like] if like in _HOW else _EITHER
        return f"{run_name}: a log-only receipt (no profiler export attached): attach {what} to explain it"
    if not profile["has_steps"]:
        return (f"{run_name}: its {profile['source_format']} profile has no steady steps (no step markers, or every "
                f"step inside the warm-up): profile with step markers (receipts.capture's Recorder.step, or "
                f"ProfilerStep#N) past the warm-up")
    return None


def _runs(store: "Store", ids: list[str], names: Mapping[str, str], profiles: Mapping[str, Mapping[str, Any]], *,
          baseline: Sequence[str]) -> tuple[dict[str, RunComponents], RulesDifference | None]:
    """Each receipt's stored components; a profile stored before they existed is summarised from its anatomy rows
    on read (what `receipts db upgrade` stores), with the same numbers. Profiles categorised under different
    kernel-category rules are brought to the baseline's (analysis/recategorise.py); the note says so."""
    from receipts.analysis import explain_inputs as inputs
    from receipts.analysis.explain import RunComponents
    from receipts.analysis.recategorise import common_rules

    # each run's newest export as profiled() found it: every query below reads that one, not looked up again
    exports = {rid: profiles[rid]["source_sha256"] for rid in ids if rid in profiles}
    stored = inputs.stored_many(store, exports)
    for rid in ids:
        if rid not in stored:  # stored before components were: summarised from its anatomy rows (polars)
            from receipts.analysis import components as comp

            stored[rid] = comp.computed(store, rid).to_dicts()

    def from_raw(rid: str, rules: CategoryRules) -> pl.DataFrame | None:
        from receipts.analysis import components as comp

        p = profiles[rid]
        return comp.busy_from_raw(store, rid, p["source_sha256"], p.get("raw_events_path"), rules)

    stored, difference = common_rules(stored, {rid: profiles[rid].get("category_rules_json") for rid in ids},
                                      baseline, from_raw)
    # The step-to-step spread is read from the stored per-step rows, made under each run's own rules.
    spread = inputs.spread_many(store, exports)
    shapes = inputs.shapes_many(store, exports)  # evidence for pricing added calls, not components
    runs = {rid: RunComponents(rid, names.get(rid, rid), _values(stored[rid], spread.get(rid, {})),
                               shapes.get(rid, {})) for rid in ids}
    return runs, difference


def _kinds(profiles: Mapping[str, Mapping[str, Any]], ids: Sequence[str], baseline: Sequence[str]
           ) -> dict[str, str] | None:
    """Each kernel category's kind under the rules the runs are compared under (the baseline's, as _runs brings
    them to): what decides a category's noise class. Read from the kept rules' JSON, not the TOML; None when no
    run's rules were kept (the shipped rules')."""
    from receipts.analysis.recategorise import reference_text
    from receipts.schema.category_kinds import kinds_from_text

    text = reference_text({rid: profiles[rid].get("category_rules_json") for rid in ids}, baseline)
    return None if text is None else kinds_from_text(text)


def _values(rows: Sequence[Mapping[str, Any]], spread: Spread) -> dict[tuple[str, str], Value]:
    from receipts.analysis.explain import Value

    out = {}
    for r in rows:
        key = (r["level"], r["name"])
        var, steps = spread.get(key, (None, None))
        out[key] = Value(r["ms_per_step"], r["calls_per_step"], r["category"], var, steps, r["n_steps"])
    return out


def _stragglers(store: "Store", receipt_id: str) -> tuple[int, ...]:
    report = stored_report(store, receipt_id) or {}
    return tuple(int(s["rank"]) for s in report.get("stragglers") or [])


# ---------------------------------------------------------------------------------------- json
def to_json(r: ExplainResult) -> dict[str, Any]:
    """The stable `explain --json` contract (docs/cli.md)."""
    e = r.explanation
    out: dict[str, Any] = {"run": r.run_name, "id": r.receipt_id, "against": r.against, "mode": r.mode,
                           "refused": r.refusal, "remedy": asdict(r.remedy) if r.remedy else None}
    if e is None:
        return {**out, "verdict": None, "components": []}
    return {
        **out,
        "verdict": e.step.verdict, "why": e.step.why,
        "step": {"baseline_ms": e.step.baseline_ms, "candidate_ms": e.step.candidate_ms, "delta_ms": e.step.delta_ms},
        "noise": {"source": e.noise_source, "note": e.noise_note, "fdr": e.fdr, "min_effect_ms": e.min_effect_ms,
                  "confidence": e.confidence, "family": e.family},
        "baseline_runs": [r.names.get(i, i) for i in e.baseline_runs],
        "baseline_runs_without_profile": list(r.unprofiled),
        "candidate_runs": [r.names.get(i, i) for i in e.candidate_runs],
        "levels": list(e.levels), "profile_formats": list(r.formats), "stragglers": list(r.stragglers),
        "explained_ms_per_step": e.explained_ms, "residual_ms_per_step": e.residual_ms, "period_note": e.period_note,
        "category_rules": None if r.rules is None else {
            **asdict(r.rules), "moved_runs": [r.names.get(i, i) for i in r.rules.moved_runs],
            "unknown": [r.names.get(i, i) for i in r.rules.unknown], "note": r.rules.note(r.names)},
        "components": [_component_json(c) for c in e.components],
        "clock": asdict(r.clock) if r.clock else None,
    }


def _component_json(c) -> dict[str, Any]:
    out = asdict(c)
    out["noise_df"] = c.noise_df if math.isfinite(c.noise_df) else None  # JSON has no infinity
    if c.level == "gap":  # its calls are the share of steps with a gap there
        for key in ("more_calls_ms_per_step", "slower_calls_ms_per_step", "ms_per_added_call", "shapes"):
            out.pop(key)
    elif c.level != "kernel":
        for key in ("baseline_calls_per_step", "candidate_calls_per_step", "calls_delta_per_step",
                    "more_calls_ms_per_step", "slower_calls_ms_per_step", "ms_per_added_call", "shapes"):
            out.pop(key)
    else:
        out["shapes"] = [{**asdict(g), "calls_delta_per_step": g.calls_delta_per_step,
                          "delta_ms_per_step": g.delta_ms_per_step, "new": g.new} for g in c.shapes]
    return out
