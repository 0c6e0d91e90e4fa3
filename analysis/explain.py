"""Why B differs from A: the components that moved beyond their own run-to-run noise, largest first.

Pure functions over per-run component summaries (analysis/components.py): each run gives, per component (a
category, a kernel, an NVTX range, a rank's exposed wait), its ms per steady step. `explain` compares the
baseline runs' values with the candidate runs' for every component at once.

Per component c, with a_1..a_nA the baseline runs' values and b_1..b_nB the candidate runs' (a run without the
component counts 0):
  delta      d = mean(b) - mean(a), ms per step; share = d / the step-time change (null unless the step verdict
             is faster or slower: a share of a change within the noise says nothing)
  noise      analysis/explain_noise.py: a two-level model, each run's within-run variance from its own steps plus
             a between-run variance moderated by a prior (lane: the baseline runs' sample variance pooled with a
             prior fitted to the baseline runs' components, the calibration its shape, from 3 runs; pairwise: the
             calibration alone, on both sides' scale, so the test is symmetric); floors MIN_FLOOR_PCT of the value
             and MIN_FLOOR_STEP_PCT of the step.
  test       t = d / se(d) against Student's t with the moderated degrees of freedom; two-sided p.
  structure  a kernel whose calls per step are the same in every run of each side and differ between the sides
             changed, p = 0 (explain_noise.structural): appeared and vanished are that fact too. A long gap's
             place alike: a gap there in every steady step of every run of one side and in none of the other's
             (its share of steps 1 and 0), each run holding at least MIN_GAP_STEPS steady steps.
  many       Benjamini-Hochberg over every component of every level at once (bh_adjusted), whatever `levels`
             shows: a component's verdict never depends on what is displayed.
  verdict    changed       structural, or BH-adjusted p <= fdr AND |d| >= min_effect (MIN_EFFECT_STEP of the step)
             no change     the interval d +- t_crit x se lies inside +-max(min_effect, sigma)
             inconclusive  anything else, with how many more profiled runs of each side would settle it if the
                           difference and the noise held (None when no number would)
  kernels    calls per step; the same calls: the change is slower (faster) calls; more calls: split by launch shape
             where the profiles record it (analysis/explain_shapes.py): a shape whose calls changed is more calls,
             its added calls priced at its own change per added call (a new shape: its own mean), a shape that kept
             its calls is slower calls; without shapes, the kernel is one group: d per added call, never the old
             calls' mean (_calls). Shapes are evidence in the kernel's explanation, not components.
  period     the time between steps (from one step range's end to the next's start) is a component too: a
             wait outside the step the step time never holds; when it changed, period_note says the step-to-step
             period moved beside (or without) the step range.
  residual   the step-time change minus the deltas of the changed parts of the step (compute only, communication
             hidden, exposed communication, memcpy only, idle in short gaps, idle in long ones: they partition the
             GPU span; the host gap: the step's range outside it), whether or not the category level is shown.

Kernel keys: the demangled name in one spelling for every profiler (schema/kernel_names.py), without its argument
list where no run compared holds two kernels under that (kernel_keys); the full name where one would.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Iterable, Literal, Mapping, Sequence

from receipts.analysis.explain_noise import (CALIBRATION, MIN_PRIOR_RUNS, Calibration, Floats, Prior,
                                             component_class, lane_prior, noise, structural)
from receipts.analysis.explain_shapes import PerRun, ShapeChange, ShapeRows, shape_table, split
from receipts.analysis.figures import CONFIDENCE
from receipts.analysis.student_t import normal_cdf, normal_quantile, t_cdf, t_quantile
from receipts.schema.step_parts import BETWEEN_STEPS, DECOMPOSITION, IDLE_LONG, STEP_PARTS
from receipts.schema.kernel_names import canonical_kernel_name

Level = Literal["category", "kernel", "gap", "nvtx", "rank"]
LEVELS: tuple[Level, ...] = ("category", "kernel", "gap", "nvtx", "rank")
ComponentVerdict = Literal["changed", "no change", "inconclusive"]
Mode = Literal["lane", "pairwise"]
NoiseSource = Literal["lane", "calibrated"]

FDR = 0.05                # Benjamini-Hochberg false discovery rate over the components of one explanation
MIN_EFFECT_STEP = 0.005   # a component must move by 0.5% of the baseline step to be named (half the step verdict's)
MIN_FLOOR_PCT = 0.1       # percent of the component's value: the least measured sigma
MIN_FLOOR_STEP_PCT = 0.1  # percent of the baseline step: the least sigma of any component
_MAX_RUNS_NEEDED = 100


@dataclass(frozen=True)
class Value:
    """One component in one run."""
    ms_per_step: float
    calls_per_step: float | None = None   # kernel calls / NVTX ranges per rank-step
    category: str | None = None           # a kernel's category
    step_var: float | None = None         # within-run variance of the value from the run's steps, ms² (None: unknown)
    n_steps: int | None = None            # the steps step_var was measured from
    steady_steps: int | None = None       # the run's steady steps (per rank) the value is over


@dataclass(frozen=True)
class RunComponents:
    """One profiled run's component summaries, keyed by (level, name as stored)."""
    receipt_id: str
    run_name: str
    values: Mapping[tuple[str, str], Value]
    shapes: ShapeRows = field(default_factory=dict)  # kernel name -> launch shape -> (calls, ms) per rank-step


@dataclass(frozen=True)
class StepChange:
    """The step-time verdict the explanation hangs from (check's or compare's, analysis/verdict.py)."""
    verdict: str                 # faster / slower / no change / inconclusive
    baseline_ms: float | None    # centre of the baseline runs' steady medians
    candidate_ms: float | None
    why: str

    @property
    def delta_ms(self) -> float | None:
        if self.baseline_ms is None or self.candidate_ms is None:
            return None
        return self.candidate_ms - self.baseline_ms


@dataclass(frozen=True)
class ComponentDelta:
    level: str
    name: str                      # the stable key (kernels: kernel_keys)
    short_name: str                # for 80 columns: template arguments elided where that stays unique
    category: str | None
    baseline_ms_per_step: float    # mean over the baseline runs
    candidate_ms_per_step: float
    delta_ms_per_step: float
    share: float | None            # of the step-time change (null unless the step verdict is faster / slower)
    verdict: ComponentVerdict
    presence: str | None           # 'appeared' | 'vanished' | None
    noise_ms: float                # sigma of one run's value
    noise_source: NoiseSource
    ci_low_ms: float               # interval for the delta at `confidence`, unadjusted for multiplicity
    ci_high_ms: float
    p_value: float
    q_value: float                 # Benjamini-Hochberg adjusted
    runs_needed: int | None        # inconclusive only
    baseline_calls_per_step: float | None = None
    candidate_calls_per_step: float | None = None
    calls_delta_per_step: float | None = None
    more_calls_ms_per_step: float | None = None   # the added calls at their own duration (_calls); 0 if no more
    slower_calls_ms_per_step: float | None = None  # the same calls, slower: None when no call (shape) kept its calls
    ms_per_added_call: float | None = None         # more calls: their change over the calls added
    shapes: tuple[ShapeChange, ...] = ()           # the split by launch shape (explain_shapes.py); () unrecorded
    evidence: str = "timing"                       # 'structural': a call count that changed (certain); 'timing'
    noise_df: float = math.inf                     # degrees of freedom of noise_ms

    @property
    def partition(self) -> bool:
        """A part of the step: the GPU span's decomposition and the host gap (they sum to the step's range)."""
        return self.level == "category" and self.name in STEP_PARTS


@dataclass(frozen=True)
class Explanation:
    step: StepChange
    mode: Mode
    noise_source: NoiseSource       # where the components' sigma came from (the same for all of them)
    noise_note: str                 # one line: how
    baseline_runs: tuple[str, ...]  # receipt ids of the profiled baseline runs used
    candidate_runs: tuple[str, ...]
    levels: tuple[str, ...]
    fdr: float
    min_effect_ms: float
    confidence: float
    components: tuple[ComponentDelta, ...] = field(repr=False)  # changed, inconclusive, no change; |delta| desc
    family: int = 0                 # components tested together (every level, whatever `levels` shows)
    parts_explained_ms: float = 0.0  # sum of the changed step parts' deltas (shown or not)
    period_note: str | None = None   # the time between steps changed: the step-to-step period moved (_period_note)

    @property
    def changed(self) -> tuple[ComponentDelta, ...]:
        return tuple(c for c in self.components if c.verdict == "changed")

    def named(self, level: str) -> tuple[ComponentDelta, ...]:
        """The changed components of one level, largest first (the level's answer to 'why')."""
        return tuple(c for c in self.changed if c.level == level)

    @property
    def explained_ms(self) -> float:
        """Sum of the changed step parts' deltas (the GPU span's parts and the host gap)."""
        return self.parts_explained_ms

    @property
    def residual_ms(self) -> float | None:
        """What the named components do not explain: the step-time change minus explained_ms."""
        d = self.step.delta_ms
        return None if d is None else d - self.explained_ms


# ---------------------------------------------------------------------------------------- kernel keys
def strip_arguments(name: str) -> str:
    """A demangled kernel name without its argument list (and without a leading `void `): the final (...) group
    outside template brackets. 'void k<(int)4>(float*, int)' -> 'k<(int)4>'; a name without one is kept."""
    text = name.strip()
    if text.startswith("void "):
        text = text[5:]
    if not text.endswith(")"):
        return text
    angle = paren = 0
    start = None
    for i, ch in enumerate(text):
        if ch == "<" and paren == 0:
            angle += 1
        elif ch == ">" and paren == 0 and angle:
            angle -= 1
        elif ch == "(":
            if paren == 0 and angle == 0:
                start = i
            paren += 1
        elif ch == ")":
            paren = max(0, paren - 1)
    return text[:start].rstrip() if start else text


def _elide_templates(key: str) -> str:
    out, depth = [], 0
    for ch in key:
        if ch == "<":
            if depth == 0:
                out.append("<...>")
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def kernel_keys(runs: Sequence[Iterable[str]]) -> dict[str, tuple[str, str]]:
    """(key, short name) of each kernel name of each run. The key is the name's profiler-independent spelling
    (schema/kernel_names.py), without its argument list where no run holds two kernels under that (so one kernel
    matches across an nsys and a Kineto run even where EDG spells its parameters `T2 **` and GNU
    `c10::BFloat16**`), else in full; the short name elides template arguments where that too stays unique."""
    canon = {n: canonical_kernel_name(n) for names in runs for n in names}
    stripped = {f: strip_arguments(f) for f in set(canon.values())}
    most: Counter[str] = Counter()
    for names in runs:
        for s, k in Counter(stripped[f] for f in {canon[n] for n in names}).items():
            most[s] = max(most[s], k)
    keys = {f: stripped[f] if most[stripped[f]] == 1 else f for f in stripped}
    short = {k: _elide_templates(k) for k in set(keys.values())}
    shared = Counter(short.values())
    return {n: (keys[f], short[keys[f]] if shared[short[keys[f]]] == 1 else keys[f]) for n, f in canon.items()}


# ---------------------------------------------------------------------------------------- statistics
def _spread(n_a: int, n_b: int) -> float:
    """se(d) / sigma."""
    return math.sqrt(1.0 / n_a + 1.0 / n_b)


@functools.lru_cache(maxsize=256)
def _critical(confidence: float, df: float | None) -> float:
    """The two-sided critical value at `confidence`: Student's t with df degrees of freedom, the normal for None."""
    q = 0.5 + confidence / 2.0
    return normal_quantile(q) if df is None or not math.isfinite(df) else t_quantile(q, df)


def _p_values(z: Floats, df: Floats) -> list[float]:
    """Two-sided p of each z against Student's t with its df (inf: the normal; analysis/student_t.py)."""
    return [2.0 * (t_cdf(-abs(zi), di) if math.isfinite(di) else normal_cdf(-abs(zi)))
            for zi, di in zip(map(float, z), map(float, df))]


def bh_adjusted(p: Floats) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (what scipy.stats.false_discovery_control(p, method='bh') returns,
    tests/test_explain.py checks it): scipy.special's distribution functions cost this command 0.8 s of import on
    a loaded 2-core box where scipy.stats cost 2.8, for a dozen lines. A tie's adjusted values are equal whatever
    order it is ranked in."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out = [0.0] * m
    least = 1.0
    for rank in range(m, 0, -1):  # the running minimum from the largest p down
        i = order[rank - 1]
        least = min(least, float(p[i]) * m / rank)
        out[i] = least
    return out


def _decided(d: float, half: float, sigma: float, min_effect: float, significant: bool) -> ComponentVerdict:
    if significant and abs(d) >= min_effect:
        return "changed"
    if abs(d) + half < max(min_effect, sigma):
        return "no change"
    return "inconclusive"


def _runs_needed(d: float, sigma: float, n_a: int, n_b: int, prior_df: float, min_effect: float, confidence: float,
                 alpha: float) -> int | None:
    """Fewest extra profiled runs of each side after which the same d and sigma would be decided (at the
    unadjusted level `alpha`: the adjustment for many components depends on the others). Decided at k runs stays
    decided at more (se and both critical values only shrink as k grows), so the fewest is found by bisection:
    ~7 Student's t quantiles where walking k up one at a time took one per run up to the answer."""

    def decided(k: int) -> bool:
        na, nb = n_a + k, n_b + k
        grown = float(prior_df + na - 1)
        se = sigma * _spread(na, nb)
        significant = abs(d) / se >= _critical(1.0 - alpha, grown)
        return _decided(d, _critical(confidence, grown) * se, sigma, min_effect, significant) != "inconclusive"

    if decided(1):
        return 1
    if not decided(_MAX_RUNS_NEEDED):
        return None
    lo, hi = 1, _MAX_RUNS_NEEDED  # undecided at lo, decided at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if decided(mid) else (mid, hi)
    return hi


def explain(baseline: Sequence[RunComponents], candidate: Sequence[RunComponents], *, step: StepChange,
            mode: Mode = "lane", levels: Sequence[str] = LEVELS, fdr: float = FDR,
            min_effect_step: float = MIN_EFFECT_STEP, confidence: float = CONFIDENCE,
            calibration: Calibration = CALIBRATION, kinds: Mapping[str, str] | None = None) -> Explanation:
    """Every component of every level in the runs compared, judged against its own run-to-run noise (module
    docstring; the noise model: analysis/explain_noise.py), all levels one Benjamini-Hochberg family whatever
    `levels` shows: a component's verdict never depends on what else is displayed. `mode` 'pairwise': one run each
    side, the calibrated noise, a symmetric test. `kinds`: each kernel category's kind under the rules the runs are
    compared under (schema/category_kinds.py), which decides whether a category's components wait; None: the
    shipped rules' (what a run whose rules were not kept was categorised under)."""
    if not baseline or not candidate:
        raise ValueError("explain needs at least one profiled run on each side")
    runs = _one_idle([*baseline, *candidate])
    baseline, candidate = runs[:len(baseline)], runs[len(baseline):]
    n_a, n_b = len(baseline), len(candidate)
    if mode == "pairwise":  # symmetric: the scale is both sides'
        step_ms = _mean([x for x in (step.baseline_ms, step.candidate_ms) if x] or [_span(r) for r in runs])
    else:
        step_ms = step.baseline_ms or _mean([_span(r) for r in baseline])
    min_effect = min_effect_step * step_ms
    floor_ms = MIN_FLOOR_STEP_PCT / 100.0 * step_ms
    keys = kernel_keys([[n for (lv, n) in r.values if lv == "kernel"] for r in runs])
    table = _by_component(runs, keys)
    run_steps = [_steady_steps(r) for r in runs]
    shaped = shape_table([r.shapes for r in runs], keys)
    if kinds is None:
        from receipts.schema.categories import SHIPPED_KINDS

        kinds = SHIPPED_KINDS
    classes = {k: component_class(k[0], k[1], row[1], kinds) for k, row in table.items()}
    # the prior of the between-run variance from the baseline runs alone, never the candidates' (lane_prior); in
    # the components' order, so that where the runs were read from (stored rows, anatomy) cannot move its last digit
    prior = lane_prior(((row[2][:n_a], row[4][:n_a], classes[k]) for k, row in sorted(table.items(), key=lambda kv: kv[0])),
                       step_ms=step_ms, calibration=calibration)
    judged = []
    for (level, key), (short, category, ms, calls, within, steps) in table.items():
        a, b = ms[:n_a], ms[n_a:]
        klass = classes[(level, key)]
        nz = noise(a, b, within[:n_a], within[n_a:], klass, floor_ms=max(floor_ms, MIN_FLOOR_PCT / 100.0 * _mean(
            [abs(x) for x in (a if n_a >= 2 else ms)])), step_ms=step_ms,
            within_df=float(sum(max(s - 1.0, 0.0) for s in steps)), calibration=calibration, prior=prior)
        counted = (structural(calls[:n_a], calls[n_a:]) if calls is not None and level == "kernel" else
                   _gap_moved(calls, run_steps, n_a) if calls is not None and level == "gap" else False)
        judged.append((level, key, short, category, a, b, calls, _mean(b) - _mean(a), nz, counted))
    p = _p_values([j[7] / j[8].se for j in judged], [j[8].df for j in judged])
    p = [0.0 if j[9] else p_i for j, p_i in zip(judged, p)]  # a changed call count (a gap's place) is certain
    q = bh_adjusted(p)
    step_delta = step.delta_ms
    moved = step.verdict in ("faster", "slower")  # a share of a change within the noise says nothing
    out = []
    for (level, key, short, category, a, b, calls, d, nz, counted), p_i, q_i in zip(judged, p, q):
        half = _critical(confidence, nz.df) * nz.se
        verdict = "changed" if counted else _decided(d, half, nz.sigma, min_effect, bool(q_i <= fdr))
        needed = (_runs_needed(d, nz.sigma, n_a, n_b, prior.df, min_effect, confidence, fdr)
                  if verdict == "inconclusive" else None)
        out.append(ComponentDelta(
            level=level, name=key, short_name=short, category=category, baseline_ms_per_step=_mean(a),
            candidate_ms_per_step=_mean(b), delta_ms_per_step=d,
            share=d / step_delta if moved and step_delta else None, verdict=verdict,
            presence=_presence(a, b, calls, n_a), noise_ms=nz.sigma, noise_source=nz.source, ci_low_ms=d - half,
            ci_high_ms=d + half, p_value=float(p_i), q_value=float(q_i), runs_needed=needed,
            evidence="structural" if counted else "timing", noise_df=nz.df,
            **_calls(a, b, calls, n_a, level, None if shaped is None else shaped.get(key, {}))))
    rank = {"changed": 0, "inconclusive": 1, "no change": 2}
    out.sort(key=lambda c: (rank[c.verdict], -abs(c.delta_ms_per_step), c.level, c.name))
    explained = float(sum(c.delta_ms_per_step for c in out if c.verdict == "changed" and c.partition))
    if not any(c.verdict == "changed" and (c.level, c.name) == _IDLE_LONG for c in out):
        # the places of idle_long's gaps are its parts: named where idle_long as a whole is not, they explain
        explained += float(sum(c.delta_ms_per_step for c in out if c.verdict == "changed" and c.level == "gap"))
    source: NoiseSource = "lane" if n_a >= 2 else "calibrated"
    shown = tuple(c for c in out if c.level in levels)
    return Explanation(step, mode, source, _noise_note(source, n_a, mode, calibration, prior),
                       tuple(r.receipt_id for r in baseline), tuple(r.receipt_id for r in candidate), tuple(levels),
                       fdr, min_effect, confidence, shown, family=len(out), parts_explained_ms=explained,
                       period_note=_period_note(out, step))


def _period_note(out: Sequence[ComponentDelta], step: StepChange) -> str | None:
    """One line when the time between steps changed: the step's range (what a recorder or log times as the step)
    does not hold it, so the step-to-step period moved by more than the step verdict says."""
    between = next((c for c in out if c.level == "category" and c.name == BETWEEN_STEPS and c.verdict == "changed"),
                   None)
    if between is None:
        return None
    d = between.delta_ms_per_step
    held = (f"while the step range did not ({step.verdict})" if step.verdict not in ("faster", "slower")
            else f"besides the step range's own change ({step.verdict})")
    return (f"the step-to-step period moved {d:+.2f} ms per step {held}: the time between one step's range and "
            f"the next's went {between.baseline_ms_per_step:.2f} -> {between.candidate_ms_per_step:.2f} ms (host "
            f"work outside the step: a data loader, logging, a checkpoint)")


_IDLE, _IDLE_LONG = ("category", "idle"), ("category", IDLE_LONG)
# Steady steps each run needs before a gap's place at every step of one side and none of the other is a fact: a
# profiler's pause that recurs at one place (the most recurrent in the one-H200 Kineto corpus: 9 of 15 steps) is at
# all of 8 steps by chance about once in 60 runs, and then only if the other side never paused there.
MIN_GAP_STEPS = 8


def _gap_moved(share: Floats, steps: Sequence[int], n_a: int) -> bool:
    """A long gap's place in every steady step of every run of one side and in none of the other's, each run with
    at least MIN_GAP_STEPS steady steps (`share`: each run's share of steps with a gap there; `steps`: each run's
    steps the share was measured over, 0 where unknown)."""
    a, b = share[:n_a], share[n_a:]
    if not all(n >= MIN_GAP_STEPS for n in steps):
        return False
    return ((all(x == 0.0 for x in a) and all(x == 1.0 for x in b))
            or (all(x == 1.0 for x in a) and all(x == 0.0 for x in b)))


def _one_idle(runs: Sequence[RunComponents]) -> list[RunComponents]:
    """The runs with one definition of idle. A profile stored before idle was split by gap length has its whole
    idle under `idle` and no `idle_long`; beside one, every run's two parts are compared as their sum, `idle` (the
    within-run variances added: the parts' covariance is unknown), rather than a split against a whole."""
    if all(_IDLE_LONG in r.values for r in runs if _IDLE in r.values) or not any(_IDLE_LONG in r.values for r in runs):
        return list(runs)
    out = []
    for r in runs:
        values = dict(r.values)
        long = values.pop(_IDLE_LONG, None)
        if long is not None:
            short = values.get(_IDLE, Value(0.0))
            var = None if short.step_var is None and long.step_var is None else (short.step_var or 0.0) + (
                long.step_var or 0.0)
            values[_IDLE] = replace(short, ms_per_step=short.ms_per_step + long.ms_per_step, step_var=var,
                                    n_steps=short.n_steps or long.n_steps)
        out.append(replace(r, values=values))
    return out


def _steady_steps(run: RunComponents) -> int:
    """A run's steady steps (per rank): what its category values are medians over (0: unknown)."""
    return max((v.steady_steps or 0 for (level, _), v in run.values.items() if level == "category"), default=0)


def _mean(x: Floats) -> float:
    """A few runs' mean: summed in order, as NumPy sums fewer than 8 values."""
    return float(sum(x) / len(x))


def _span(run: RunComponents) -> float:
    """A run's GPU span per step: the sum of its decomposition parts."""
    return sum(v.ms_per_step for (level, name), v in run.values.items() if level == "category" and name in DECOMPOSITION)


_Row = tuple[str, str | None, PerRun, PerRun | None, PerRun, PerRun]


def _by_component(runs: Sequence[RunComponents], keys: Mapping[str, tuple[str, str]]) -> dict[tuple[str, str], _Row]:
    """Per (level, key): short name, category, ms per step of each run (0 when absent), calls (kernels, NVTX), each
    run's within-run variance of its value (0 when unknown) and the steps that was measured from (0: none)."""
    table: dict[tuple[str, str], _Row] = {}
    for i, run in enumerate(runs):
        for (level, name), v in run.values.items():
            key, short = keys[name] if level == "kernel" else gap_key(name) if level == "gap" else (name, name)
            if (level, key) not in table:
                counted = v.calls_per_step is not None
                n = len(runs)
                table[(level, key)] = (short, v.category, [0.0] * n, [0.0] * n if counted else None, [0.0] * n,
                                       [0.0] * n)
            _, _, ms, calls, within, steps = table[(level, key)]
            ms[i] += v.ms_per_step
            if v.step_var is not None:
                within[i], steps[i] = within[i] + v.step_var, max(steps[i], float(v.n_steps or 0))
            if calls is not None and v.calls_per_step is not None:
                calls[i] += v.calls_per_step
    return table


def _presence(a: PerRun, b: PerRun, calls: PerRun | None, n_a: int) -> str | None:
    seen = calls if calls is not None else [*a, *b]
    in_a, in_b = [x > 0 for x in seen[:n_a]], [x > 0 for x in seen[n_a:]]
    if not any(in_a) and all(in_b):
        return "appeared"
    if not any(in_b) and all(in_a):
        return "vanished"
    return None


def gap_key(name: str) -> tuple[str, str]:
    """(key, short name) of a gap's place 'NAME #CALL' (analysis/components.py): its kernel name in one spelling for
    every profiler without its argument list, and with template arguments elided for 80 columns."""
    kernel, sep, call = name.rpartition(" #")
    if not sep:
        return name, name
    key = strip_arguments(canonical_kernel_name(kernel))
    return f"{key} #{call}", f"{_elide_templates(key).rsplit('::', 1)[-1]} #{call}"


def _calls(a: PerRun, b: PerRun, calls: PerRun | None, n_a: int, level: str,
           groups: Mapping[str, tuple[PerRun, PerRun]] | None) -> dict:
    """Calls per step and the change's split. Same calls in every shape: all of it is slower (or faster) calls.
    Otherwise one kernel name can cover several shapes (a GEMM of another size): the change splits over its launch
    shapes (`groups`, explain_shapes.split; None: no shapes recorded, the kernel one group), a shape whose calls
    changed priced at its own change per added call, never at the old calls' mean."""
    if calls is None or level not in ("kernel", "gap"):
        return {}
    ca, cb = _mean(calls[:n_a]), _mean(calls[n_a:])
    out: dict = {"baseline_calls_per_step": ca, "candidate_calls_per_step": cb, "calls_delta_per_step": cb - ca}
    if level == "gap":  # the share of steps with a gap there: no calls to price
        return out
    if ca > 0 and cb > 0:
        parts = split(a, b, calls, n_a, groups)
        out["shapes"] = parts.groups if groups else ()
        if not parts.changed:
            out["more_calls_ms_per_step"], out["slower_calls_ms_per_step"] = 0.0, _mean(b) - _mean(a)
        else:
            added = sum(g.calls_delta_per_step for g in parts.changed)
            out["more_calls_ms_per_step"], out["slower_calls_ms_per_step"] = parts.more_calls_ms, parts.slower_calls_ms
            out["ms_per_added_call"] = parts.more_calls_ms / added if abs(added) > 1e-12 else None
    return out


def _noise_note(source: NoiseSource, n_a: int, mode: Mode, calibration: Calibration, prior: Prior) -> str:
    if source == "lane":
        df = "inf" if math.isinf(prior.df) else f"{prior.df:.1f}"
        total = "the normal" if math.isinf(prior.df) else f"t with {prior.df + n_a - 1:.1f} df"
        how = (f"a prior fitted to their {prior.components} components ({prior.scale:.2g} x the calibrated "
               f"between-run variance, {df} df; the calibration's shape from {calibration.source})"
               if prior.source == "lane" else
               f"its class's calibrated noise ({df} df, from {calibration.source}; too few "
               f"{'runs' if n_a < MIN_PRIOR_RUNS else 'components'} to fit a prior)")
        return (f"each component's run-to-run noise from {n_a} profiled baseline runs pooled with {how}, plus each "
                f"run's step-to-step spread; {total}")
    what = "pairwise: one run each side" if mode == "pairwise" else f"{n_a} profiled baseline run"
    return (f"{what}, no run-to-run spread measured: each component's calibrated between-run noise "
            f"({calibration.df} df, from {calibration.source}) plus both runs' step-to-step spread, the same test "
            f"either way round")
