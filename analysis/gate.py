"""The CI gate: each benchmark claim is accepted only when the receipts can actually support it.

Claims in (analysis.claims), typed results out. Everything here is pure; what it judges is read from a
Store by analysis/gate_inputs.py (`run_gate` reads, then calls `evaluate`). The refusal and drift rules are
compare()'s own building blocks (identity_differences, drift in analysis.compare); the verdict is
analysis.verdict.decide, the one rule compare, check and the dashboard use, over each run's moving-block
bootstrap interval (analysis.stats.median_interval) and the noise floor of the baseline's configuration, the
candidate left out (analysis/configuration.py, as compare takes it, one read per lane and tag set); nothing here
re-derives them. compare() itself is not called because
it bootstraps both step time and tokens/s, and a claim needs at most one of them (the bootstrap is most of
a claim's cost: benchmarks/bench_gate.py).

A claim's baseline names a receipt, or is `tag:T` (speed claims): the candidate lane's most recent runs
carrying the tag, chosen by analysis.check's rules (baseline_for: candidates left out, ended-early runs
and outliers excluded and named) and judged as `check` judges, by decide over all of them.

A claim is rejected, with one line per reason, when (in this order; docs/claims-format.md):
  unknown_receipt     a reference matches no receipt (or several)
  rumor               a receipt lacks host lineage, preset family or launch regime
  no_baseline         a tag baseline: the candidate's lane has no usable run carrying the tag
  identity            the canonical identities differ (each field named)
  recipe_drift        feature bundle / model shape differ: never acceptable
  undeclared_drift    runtime or infrastructure drift present but not in declared_drift
  ended_early         a run's log looks cut short (crash, kill, truncated copy), unless allow_ended_early
  too_few_steps       fewer steady-state steps than min_steps (speed claims)
  warmup_in_window    warm-up lies inside the steady window (rule WARMUP_RULE below; speed claims)
  noise               a run's CV of the claimed metric is above max_cv (speed claims)
  no_measurement      the metric is missing from a run
  effect_mismatch     the measured value's 95% CI misses the claimed value +- tolerance
  bound_exceeded      a memory claim's `at_most`: the candidate's bytes are above it
  not_significant     an effect (speedup != 1, change != 0) is claimed but the measurement does not show one
Nothing here catches an exception and turns it into a verdict: only ReceiptNotFound becomes a result
(unknown_receipt), everything else propagates and the CLI exits 2.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import numpy as np

from receipts.analysis.check import (Baseline, no_baseline_message, no_baseline_remedy, rumor_message,
                                     rumor_remedy)
from receipts.analysis.claims import Claim, ClaimsFile
from receipts.analysis.compare import Difference, drift, identity_differences
from receipts.analysis.lanes import Lane, lane_of
from receipts.analysis.noise import NoiseFloor, default_floor
from receipts.analysis.record import StoredReceipt
from receipts.analysis.stats import median_interval, summarize
from receipts.analysis.verdict import VerdictResult, decide
from receipts.analysis.window import WARMUP_PHASES
from receipts.errors import Remedy

# Rule `warmup-in-window-v1`. Warm-up lies inside the steady window when
#   1. the stored window starts at or before the last warm-up step (window_first_step <= warmup_last_step), or
#   2. a compile / warm-up phase marker overlaps [window_first_step, window_last_step], or
#   3. isolated steady-window steps take more than SPIKE_FACTOR x the window median: a recompile or a warm-up
#      the window rule missed (3x: steady steps jitter by percents, compile steps by multiples). "Isolated"
#      means at most SPIKE_MAX_SHARE of the window: steps that slow and that *regular* are the run's own
#      periodic work (SOAP's preconditioner update every 10th step in the 2024-10-09 modded-nanogpt record
#      is 5x the median on 10% of steps), which the noise rule (max_cv) judges instead. The 2025-09-10
#      Yarn record shows the case this rule is for: 7 steps of 1670 at 3.5-4.8x, one at each
#      attention-window change, i.e. torch.compile recompiling inside the steady window.
WARMUP_RULE = "warmup-in-window-v1"
SPIKE_FACTOR = 3.0
SPIKE_MAX_SHARE = 0.02
_MAX_LISTED = 3  # drift differences quoted per reason; the rest are counted


@dataclass(frozen=True)
class Evidence:
    """What the gate knows about one receipt."""
    receipt: StoredReceipt
    phases: tuple[tuple[str, int | None, int | None], ...]  # (name, first_step, last_step) markers
    memory: dict | None = None  # analysis.memory_geometry.geometry, read for memory_bucket claims


@dataclass(frozen=True)
class Unresolved:
    ref: str
    message: str


@dataclass(frozen=True)
class Reason:
    code: str      # stable key, see the module docstring
    message: str   # one line, starting with the claim name
    remedy: Remedy | None = None  # what would clear it, where the claims file alone cannot


@dataclass(frozen=True)
class Measured:
    metric: str
    unit: str                  # 'x' (speedup: baseline time / candidate time) | 'bytes' (candidate - baseline)
    value: float | None
    ci_low: float | None
    ci_high: float | None
    confidence: float | None
    note: str                  # how it was measured, or why there is no CI


@dataclass(frozen=True)
class ClaimResult:
    claim: Claim
    accepted: bool
    reasons: tuple[Reason, ...]
    measured: Measured | None
    baseline_id: str | None
    candidate_id: str | None
    windows: tuple[str, ...] = ()  # the steady windows the numbers come from (DESIGN rule 3)
    baseline_ids: tuple[str, ...] = ()       # a tag baseline: the runs used, oldest first
    baseline_excluded: tuple[str, ...] = ()  # a tag baseline: '<run>: <why it was left out>'


@dataclass(frozen=True)
class GateResult:
    path: str
    results: tuple[ClaimResult, ...]

    @property
    def accepted(self) -> bool:
        return all(r.accepted for r in self.results)


def evaluate(claims_file: ClaimsFile, evidence: Mapping[str, Evidence | Unresolved],
             floors: Mapping[Lane | str, NoiseFloor] | None = None,
             baselines: Mapping[str, Baseline | None] | None = None) -> GateResult:
    """`floors`: by claim name, the noise floor of its baseline's configuration (gate_inputs.claim_floors), or by
    lane; a claim without one is judged against the default floor. `baselines`: the tag baselines by claim name
    (tag_baselines), their runs in `evidence` by id."""
    floors, baselines = floors or {}, baselines or {}

    def floor_of(c: Claim, e: Evidence | Unresolved) -> NoiseFloor | None:
        if c.name in floors:
            return floors[c.name]
        lane = lane_of(e.receipt) if isinstance(e, Evidence) else None
        return floors.get(lane) if lane is not None else None

    def one(c: Claim) -> ClaimResult:
        if c.baseline_tag is not None:
            return evaluate_tag_claim(c, baselines.get(c.name), evidence, evidence[c.candidate])
        return evaluate_claim(c, evidence[c.baseline], evidence[c.candidate], floor_of(c, evidence[c.baseline]))

    return GateResult(claims_file.path, tuple(one(c) for c in claims_file.claims))


def evaluate_tag_claim(claim: Claim, baseline: Baseline | None, evidence: Mapping[str, Evidence | Unresolved],
                       candidate: Evidence | Unresolved) -> ClaimResult:
    """A claim whose baseline is `tag:T`: the candidate against the runs baseline_for chose, as `check` does."""
    def reason(code: str, text: str) -> Reason:
        return Reason(code, f"{claim.name}: {text}")

    if isinstance(candidate, Unresolved):
        return ClaimResult(claim, False, (reason("unknown_receipt", f"unknown receipt: candidate {candidate.message}"),),
                           None, None, None)
    b = candidate.receipt
    if baseline is None:
        rumor = replace(reason("rumor", rumor_message(b)), remedy=rumor_remedy(b))
        return ClaimResult(claim, False, (rumor,), None, None, b.id)
    excluded = tuple(f"{r.run_name}: {r.excluded}" for r in baseline.excluded)
    ids = tuple(r.id for r in baseline.used)
    if not ids:
        none = replace(reason("no_baseline", no_baseline_message(b, baseline)), remedy=no_baseline_remedy(baseline))
        return ClaimResult(claim, False, (none,), None, None, b.id,
                           baseline_excluded=excluded)
    runs = [e for rid in ids if isinstance(e := evidence[rid], Evidence)]  # tag_baselines loaded every one
    newest = runs[-1].receipt
    reasons = list(_drift_reasons(claim, drift(newest, b), reason))
    reasons += _ended_early_reasons(claim, newest, b, reason)
    measured, more = _speed(claim, runs, candidate, reason, baseline.floor,
                            what=f"median of {len(ids)} run(s) tagged {baseline.tag!r}")
    reasons += more
    # each baseline run's window, then the candidate's (_windows gives the pair: baseline, candidate)
    windows = tuple(_windows(e.receipt, b)[0] for e in runs) + (_windows(newest, b)[1],)
    return ClaimResult(claim, not reasons, tuple(reasons), measured, None, b.id, windows, ids, excluded)


def evaluate_claim(claim: Claim, baseline: Evidence | Unresolved, candidate: Evidence | Unresolved,
                   floor: NoiseFloor | None = None) -> ClaimResult:
    def reason(code: str, text: str) -> Reason:
        return Reason(code, f"{claim.name}: {text}")

    if isinstance(baseline, Unresolved) or isinstance(candidate, Unresolved):
        missing = [(role, e) for role, e in (("baseline", baseline), ("candidate", candidate))
                   if isinstance(e, Unresolved)]
        unknown = tuple(reason("unknown_receipt", f"unknown receipt: {role} {e.message}") for role, e in missing)
        ids = [None if isinstance(e, Unresolved) else e.receipt.id for e in (baseline, candidate)]
        return ClaimResult(claim, False, unknown, None, ids[0], ids[1])
    a, b = baseline.receipt, candidate.receipt
    # compare()'s refusal rules, in its order: a rumor first, then differing identity fields.
    if not (a.complete and b.complete):
        rumors = "; ".join(f"{role} {r.run_name} ({r.id[:12]}) lacks {', '.join(r.lane.missing)}"
                           for role, r in (("baseline", a), ("candidate", b)) if not r.complete)
        rs = (reason("rumor", f"incomplete identity (a rumor, not a comparison): {rumors}"),)
        return ClaimResult(claim, False, rs, None, a.id, b.id)
    differences = identity_differences(a, b)
    if differences:
        rs = (reason("identity", "identities differ: " + "; ".join(f"{d.field} {d.a!r} != {d.b!r}" for d in differences)),)
        return ClaimResult(claim, False, rs, None, a.id, b.id)

    reasons = list(_drift_reasons(claim, drift(a, b), reason))
    reasons += _ended_early_reasons(claim, a, b, reason)
    if claim.is_speed:
        measured, more = _speed(claim, [baseline], candidate, reason, floor or default_floor())
    else:
        measured, more = _memory(claim, baseline, candidate, reason)
    reasons += more
    return ClaimResult(claim, not reasons, tuple(reasons), measured, a.id, b.id, _windows(a, b))


def _windows(a: StoredReceipt, b: StoredReceipt) -> tuple[str, ...]:
    return tuple(f"{role} {r.run_name} ({r.id[:12]}): steady steps {r.window_first_step}..{r.window_last_step} "
                 f"(n={np.isfinite(r.step_series).sum()}), {r.warmup_steps} warm-up excluded [{r.window_rule}]"
                 for role, r in (("baseline", a), ("candidate", b)))


def _quote(diffs: tuple[Difference, ...]) -> str:
    shown = ", ".join(f"{d.field} {d.a!r} -> {d.b!r}" for d in diffs[:_MAX_LISTED])
    return shown + (f" and {len(diffs) - _MAX_LISTED} more" if len(diffs) > _MAX_LISTED else "")


def _drift_reasons(claim: Claim, found: dict[str, tuple[Difference, ...]], reason):
    if found.get("recipe"):
        yield reason("recipe_drift", f"recipe drift (never acceptable: a different experiment): {_quote(found['recipe'])}")
    for kind in ("runtime", "infrastructure"):
        if found.get(kind) and kind not in claim.declared_drift:
            yield reason("undeclared_drift", f"undeclared {kind} drift: {_quote(found[kind])} "
                                             f"(add declared_drift: [{kind}] if the claim is about it)")


def _ended_early_reasons(claim: Claim, a: StoredReceipt, b: StoredReceipt, reason) -> list[Reason]:
    # A crashed run's steps are real, but its window stops wherever the crash fell (often in a slow
    # phase: a checkpoint, a recompile) and its memory peak may be missing: evidence only on purpose.
    if claim.allow_ended_early:
        return []
    return [reason("ended_early", f"{role} {r.run_name} ended early: {r.ended_early} "
                                  "(add allow_ended_early: true if the claim may rest on a cut-short run)")
            for role, r in (("baseline", a), ("candidate", b)) if r.ended_early]


def warmup_problems(e: Evidence, *, spike_factor: float = SPIKE_FACTOR) -> list[str]:
    """Rule warmup-in-window-v1 (see above); empty when the steady window is clean."""
    r = e.receipt
    first, last = r.window_first_step, r.window_last_step
    out = []
    if first is not None and r.warmup_last_step is not None and first <= r.warmup_last_step:
        out.append(f"window starts at step {first} but warm-up runs through step {r.warmup_last_step}")
    for name, lo, hi in e.phases:
        lo, hi = (lo if lo is not None else hi), (hi if hi is not None else lo)
        if (name.lower() in WARMUP_PHASES and lo is not None and hi is not None and first is not None
                and last is not None and lo <= last and hi >= first):
            out.append(f"a '{name}' phase (steps {lo}..{hi}) overlaps the steady window {first}..{last}")
    x = r.step_series[np.isfinite(r.step_series)]
    if x.size:
        median = float(np.median(x))
        slow = x[x > spike_factor * median]
        if median > 0 and 0 < slow.size <= max(1, int(SPIKE_MAX_SHARE * x.size)):
            out.append(f"{slow.size} steady-window step(s) take over {spike_factor:g}x the window median "
                       f"{median:.2f} ms (slowest {slow.max() / median:.1f}x): compile/warm-up inside the window")
    return out


def _series(claim: Claim, r: StoredReceipt) -> np.ndarray:
    return r.step_series if claim.metric == "step_time" else r.tokens_series


def _verdict(claim: Claim, a: Sequence[StoredReceipt], b: StoredReceipt, floor: NoiseFloor) -> VerdictResult | None:
    """analysis.verdict.decide on the claimed metric: the baseline run(s) against the candidate, the lane's floor."""
    ia = [i for r in a if (i := median_interval(_series(claim, r))) is not None]
    ib = median_interval(_series(claim, b))
    if len(ia) < len(a) or ib is None:
        return None
    return decide(ia, [ib], floor, min_effect=claim.min_effect, lower_is_better=claim.metric == "step_time",
                  grow="both" if len(a) == 1 else "candidate")


def _speed(claim: Claim, baselines: Sequence[Evidence], candidate: Evidence, reason, floor: NoiseFloor, *,
           what: str = ""):
    out = []
    label = "step time" if claim.metric == "step_time" else "tokens/s"
    for role, e in [*(("baseline", b) for b in baselines), ("candidate", candidate)]:
        run = e.receipt
        summary = summarize(_series(claim, run))
        n = summary.n if summary else 0
        if n < claim.min_steps:
            out.append(reason("too_few_steps", f"{role} {run.run_name} has {n} steady-state steps with {label} "
                                               f"(min_steps {claim.min_steps})"))
        for problem in warmup_problems(e):
            out.append(reason("warmup_in_window", f"warm-up inside the steady window of {role} {run.run_name}: "
                                                  f"{problem} [{WARMUP_RULE}]"))
        if summary and summary.cv > claim.max_cv:
            out.append(reason("noise", f"{role} {run.run_name} is too noisy: CV of {label} {summary.cv:.1%} "
                                       f"> max_cv {claim.max_cv:.1%}"))
    v = _verdict(claim, [b.receipt for b in baselines], candidate.receipt, floor)
    if v is None:
        out.append(reason("no_measurement", f"no {label} ratio: a run has fewer than 2 steady-state steps with {label}"))
        return None, out
    if claim.metric == "step_time":  # speedup = baseline time / candidate time
        value, low, high = 1.0 / v.ratio, 1.0 / v.ci_high, 1.0 / v.ci_low
    else:                            # speedup = candidate tokens/s / baseline tokens/s
        value, low, high = v.ratio, v.ci_low, v.ci_high
    measured = Measured(claim.metric, "x", value, low, high, v.confidence,
                        f"speedup = baseline/candidate median {label if claim.metric == 'step_time' else 'time per token'}; "
                        f"{'baseline: ' + what + '; ' if what else ''}{v.method}; noise floor {v.floor.note}")
    s = claim.speedup
    assert s is not None  # a speed claim always states its speedup
    lo_ok, hi_ok = s * (1 - claim.tolerance), s * (1 + claim.tolerance)
    ci = f"{value:.3f}x [{low:.3f}, {high:.3f}] ({v.confidence:.0%} CI, run-to-run noise included)"
    if high < lo_ok or low > hi_ok:
        out.append(reason("effect_mismatch", f"measured speedup {ci} excludes the claimed {s:.3f}x "
                                             f"+- {claim.tolerance:.1%} [{lo_ok:.3f}, {hi_ok:.3f}]"))
    # asv: a claimed effect needs BOTH an interval that excludes no change AND at least min_effect; the
    # interval carries the lane's run-to-run noise (analysis.verdict.decide).
    verdict = v.verdict
    wanted = "faster" if s > 1 else "slower" if s < 1 else None
    if wanted and verdict != wanted:
        if low <= 1.0 <= high:
            why = "the CI includes no change (1.0)"
        elif verdict in ("faster", "slower"):
            why = f"the measurement says {verdict}"
        else:
            why = f"the effect {abs(value - 1):.2%} is below min_effect {claim.min_effect:.1%}"
        out.append(reason("not_significant", f"claims {wanted} ({s:.3f}x) but {why}: measured {ci}, "
                                             f"verdict '{verdict}' ({v.why})"))
    return measured, out


def _memory(claim: Claim, baseline: Evidence, candidate: Evidence, reason):
    if claim.metric == "memory_bucket":
        from receipts.analysis.memory_geometry import bucket_bytes

        assert claim.bucket is not None  # a memory_bucket claim always names its bucket
        pa, pb = (bucket_bytes(e.memory, claim.bucket) if e.memory else None for e in (baseline, candidate))
        what = f"{claim.bucket} bucket"
        how = ("no CI: one number per run, the memory geometry's measured side (the rank with the highest peak "
               "allocated)")
    else:
        attr = f"{claim.metric}_bytes"
        pa, pb = getattr(baseline.receipt, attr), getattr(candidate.receipt, attr)
        what, how = f"{claim.metric} peak", "no CI: a memory peak is one number per run (max over ranks)"
    absent = [role for role, p in (("baseline", pa), ("candidate", pb)) if p is None]
    if absent:
        return None, [reason("no_measurement", f"no {what} recorded for {' and '.join(absent)}")]
    assert pa is not None and pb is not None
    change, claimed = pb - pa, claim.change_bytes
    measured = Measured(claim.metric, "bytes", float(change), None, None, None,
                        f"{how}; baseline {_gib(pa)}, candidate {_gib(pb)}")
    out = []
    if claim.at_most_bytes is not None and pb > claim.at_most_bytes:
        out.append(reason("bound_exceeded", f"candidate {what} {_gib(pb)} exceeds the bound at_most "
                                            f"{_gib(claim.at_most_bytes)}"))
    if claimed is None:  # a bound alone
        return measured, out
    tol = claim.tolerance_bytes if claim.tolerance_bytes is not None else claim.tolerance * abs(claimed)
    tol_text = f"{_gib(claim.tolerance_bytes)} (tolerance_bytes)" if claim.tolerance_bytes is not None else f"{claim.tolerance:.1%}"
    if abs(change - claimed) > tol:
        out.append(reason("effect_mismatch", f"measured {what} change {_gib(change, signed=True)} is not the claimed "
                                             f"{_gib(claimed, signed=True)} +- {tol_text}"))
    if claimed != 0 and np.sign(change) != np.sign(claimed):
        out.append(reason("not_significant", f"claims a {'reduction' if claimed < 0 else 'increase'} of "
                                             f"{_gib(abs(claimed))} but the measured change is {_gib(change, signed=True)}"))
    return measured, out


def _gib(n: int | float | None, *, signed: bool = False) -> str:
    if n is None:
        return "-"
    return f"{n / 2**30:+.3f} GiB" if signed else f"{n / 2**30:.3f} GiB"
