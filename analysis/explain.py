"""Why B differs from A: the components that moved beyond their own run-to-run noise, largest first.

Pure functions over per-run component summaries (analysis/components.py): each run gives, per component (a
category, a kernel, an NVTX range, a rank's exposed wait), its ms per steady step. `explain` compares the
baseline runs' values with the candidate runs' for every component at once.

Per component c, with a_1..a_nA the baseline runs' values and b_1..b_nB the candidate runs' (a run without the
component counts 0):
  delta      d = mean(b) - mean(a), ms per step; share = d / the step-time change (null unless the step verdict
             is faster or slower: a share of a change within the noise says nothing)
  noise      sigma = the spread of ONE run's value when nothing changes, per component, in ms: the standard
             deviation of the baseline runs' values, from MIN_RUNS profiled baseline runs up ('lane'). NCCL kernels
             include the wait for the slowest peer and spread widely from run to run: they get their own, wide,
             noise like any other component. The least sigma: MIN_FLOOR_PCT of the value and MIN_FLOOR_STEP_PCT of
             the baseline step (a component absent from every baseline run, or whose runs agree to the microsecond,
             is not infinitely precise). With fewer profiled baseline runs ('default'), or one run against one
             ('pairwise': no component noise exists), sigma is the stated fixed floor DEFAULT_FLOOR_PCT of the
             component's baseline value.
             Why a standard deviation where the step verdict's floor is a MAD (analysis/noise.py): the MAD is worth
             about 37% of the degrees of freedom at 3-10 runs, which a test of ~100 components at once cannot
             afford (with it, 5 baseline runs could not call a 200-sigma attention-kernel swap once
             Benjamini-Hochberg had its say); with the standard deviation the interval for a new run is exact
             under normal noise (A/A false alarms 5.0% per component before the correction, tests/test_explain.py),
             and an outlier baseline run widens sigma, making a component harder to call, never easier.
  test       se(d) = sigma sqrt(1/nA + 1/nB); t = d / se against Student's t with nA - 1 degrees of freedom for a
             measured sigma, the normal for a fixed floor; two-sided p.
  many       Benjamini-Hochberg over every component judged at once (bh_adjusted): at most `fdr` of the
             components called changed are expected to be false alarms.
  verdict    changed       BH-adjusted p <= fdr AND |d| >= min_effect (MIN_EFFECT_STEP of the baseline step)
             no change     the interval d +- t_crit x se lies inside +-max(min_effect, sigma)
             inconclusive  anything else, with how many more profiled runs of each side would settle it if the
                           difference and the noise held (None when no number would)
  kernels    calls per step and mean ms per call; the change splits exactly into more calls and slower calls:
             d = (calls_B - calls_A) mean_A + calls_B (mean_B - mean_A), at the sides' means (mean = ms / calls);
             a component absent from every run of one side is said to appear or vanish instead.
  residual   the step-time change minus the deltas of the changed parts of the step's decomposition (compute
             only, communication hidden, exposed communication, memcpy only, idle: they partition the GPU span,
             the other components overlap them and one another): what the named components do not explain,
             including time outside the GPU span (launch gaps between steps).

Kernel keys: the demangled name in one spelling for every profiler (schema/kernel_names.py), without its argument
list where no run compared holds two kernels under that (kernel_keys); the full name where one would.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Literal, Mapping, Sequence

import numpy as np

from receipts.analysis.noise import MIN_RUNS
from receipts.analysis.stats import CONFIDENCE
from receipts.schema.categories import DECOMPOSITION
from receipts.schema.kernel_names import canonical_kernel_name

Level = Literal["category", "kernel", "nvtx", "rank"]
LEVELS: tuple[Level, ...] = ("category", "kernel", "nvtx", "rank")
ComponentVerdict = Literal["changed", "no change", "inconclusive"]
Mode = Literal["lane", "pairwise"]
NoiseSource = Literal["lane", "default", "pairwise"]

FDR = 0.05                # Benjamini-Hochberg false discovery rate over the components of one explanation
MIN_EFFECT_STEP = 0.005   # a component must move by 0.5% of the baseline step to be named (half the step verdict's)
DEFAULT_FLOOR_PCT = 10.0  # sigma of one run's component value, percent of it, when the lane cannot measure it
MIN_FLOOR_PCT = 0.1       # percent of the component's value: the least measured sigma
MIN_FLOOR_STEP_PCT = 0.1  # percent of the baseline step: the least sigma of any component
_MAX_RUNS_NEEDED = 100


@dataclass(frozen=True)
class Value:
    """One component in one run."""
    ms_per_step: float
    calls_per_step: float | None = None   # kernel calls / NVTX ranges per rank-step
    category: str | None = None           # a kernel's category


@dataclass(frozen=True)
class RunComponents:
    """One profiled run's component summaries, keyed by (level, name as stored)."""
    receipt_id: str
    run_name: str
    values: Mapping[tuple[str, str], Value]


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
    more_calls_ms_per_step: float | None = None   # (calls_B - calls_A) x mean_A
    slower_calls_ms_per_step: float | None = None  # calls_B x (mean_B - mean_A)

    @property
    def partition(self) -> bool:
        """A part of the step's decomposition (the parts sum to the GPU span)."""
        return self.level == "category" and self.name in DECOMPOSITION


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

    @property
    def changed(self) -> tuple[ComponentDelta, ...]:
        return tuple(c for c in self.components if c.verdict == "changed")

    def named(self, level: str) -> tuple[ComponentDelta, ...]:
        """The changed components of one level, largest first (the level's answer to 'why')."""
        return tuple(c for c in self.changed if c.level == level)

    @property
    def explained_ms(self) -> float:
        """Sum of the changed decomposition parts' deltas."""
        return float(sum(c.delta_ms_per_step for c in self.changed if c.partition))

    @property
    def residual_ms(self) -> float | None:
        """What the named components do not explain: the step-time change minus explained_ms (None without the
        category level, whose decomposition it is measured against)."""
        d = self.step.delta_ms
        return None if d is None or "category" not in self.levels else d - self.explained_ms


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
def component_noise(values: np.ndarray, *, mode: Mode, step_ms: float) -> tuple[float, NoiseSource, int | None]:
    """(sigma of one run's value in ms, where it came from, degrees of freedom or None) from the baseline runs'
    values of one component (see the module docstring)."""
    center = float(np.mean(values)) if values.size else 0.0
    least = max(MIN_FLOOR_STEP_PCT / 100.0 * step_ms, 0.0)
    if mode == "lane" and values.size >= MIN_RUNS:
        sigma = max(float(np.std(values, ddof=1)), MIN_FLOOR_PCT / 100.0 * abs(center), least)
        return sigma, "lane", values.size - 1
    return max(DEFAULT_FLOOR_PCT / 100.0 * abs(center), least), ("pairwise" if mode == "pairwise" else "default"), None


def _spread(n_a: int, n_b: int) -> float:
    """se(d) / sigma."""
    return math.sqrt(1.0 / n_a + 1.0 / n_b)


@functools.lru_cache(maxsize=256)
def _critical(confidence: float, df: int | None) -> float:
    """The two-sided critical value at `confidence`: Student's t with df degrees of freedom, the normal for None."""
    from scipy import special

    q = 0.5 + confidence / 2.0
    return float(special.ndtri(q) if df is None else special.stdtrit(df, q))


def _p_values(z: np.ndarray, df: np.ndarray) -> np.ndarray:
    """Two-sided p of each z against Student's t with its df (inf: the normal)."""
    from scipy import special

    tail = np.abs(z)
    finite = np.isfinite(df)
    return 2.0 * np.where(finite, special.stdtr(np.where(finite, df, 1.0), -tail), special.ndtr(-tail))


def bh_adjusted(p: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (what scipy.stats.false_discovery_control(p, method='bh') returns,
    tests/test_explain.py checks it): scipy.special's distribution functions cost this command 0.8 s of import on
    a loaded 2-core box where scipy.stats cost 2.8, for a dozen lines."""
    m = p.size
    if m == 0:
        return p
    order = np.argsort(p)
    ranked = p[order] * m / np.arange(1, m + 1)
    adjusted = np.minimum.accumulate(ranked[::-1])[::-1]
    out = np.empty(m)
    out[order] = np.minimum(adjusted, 1.0)
    return out


def _decided(d: float, half: float, sigma: float, min_effect: float, significant: bool) -> ComponentVerdict:
    if significant and abs(d) >= min_effect:
        return "changed"
    if abs(d) + half < max(min_effect, sigma):
        return "no change"
    return "inconclusive"


def _runs_needed(d: float, sigma: float, n_a: int, n_b: int, df: int | None, source: NoiseSource,
                 min_effect: float, confidence: float, alpha: float) -> int | None:
    """Fewest extra profiled runs of each side after which the same d and sigma would be decided (at the
    unadjusted level `alpha`: the adjustment for many components depends on the others)."""
    for k in range(1, _MAX_RUNS_NEEDED + 1):
        na, nb = n_a + k, n_b + k
        grown = na - 1 if source == "lane" or (source == "default" and na >= MIN_RUNS) else df
        se = sigma * _spread(na, nb)
        significant = abs(d) / se >= _critical(1.0 - alpha, grown)
        if _decided(d, _critical(confidence, grown) * se, sigma, min_effect, significant) != "inconclusive":
            return k
    return None


def explain(baseline: Sequence[RunComponents], candidate: Sequence[RunComponents], *, step: StepChange,
            mode: Mode = "lane", levels: Sequence[str] = LEVELS, fdr: float = FDR,
            min_effect_step: float = MIN_EFFECT_STEP, confidence: float = CONFIDENCE) -> Explanation:
    """Every component of `levels` in the runs compared, judged against its own run-to-run noise (module
    docstring). `mode` 'pairwise': one run each side, no component noise: the fixed floor."""
    if not baseline or not candidate:
        raise ValueError("explain needs at least one profiled run on each side")
    runs = [*baseline, *candidate]
    step_ms = step.baseline_ms or float(np.mean([_span(r) for r in baseline]))
    min_effect = min_effect_step * step_ms
    keys = kernel_keys([[n for (lv, n) in r.values if lv == "kernel"] for r in runs])
    table = _by_component(runs, keys, levels)
    n_a, n_b = len(baseline), len(candidate)
    spread = _spread(n_a, n_b)
    judged = []
    for (level, key), (short, category, ms, calls) in table.items():
        a, b = ms[:n_a], ms[n_a:]
        sigma, source, df = component_noise(a, mode=mode, step_ms=step_ms)
        judged.append((level, key, short, category, a, b, calls, float(np.mean(b) - np.mean(a)), sigma * spread,
                       sigma, source, df))
    z = np.array([j[7] / j[8] for j in judged])
    p = _p_values(z, np.array([np.inf if j[11] is None else j[11] for j in judged], dtype=float))
    q = bh_adjusted(p)
    step_delta = step.delta_ms
    moved = step.verdict in ("faster", "slower")  # a share of a change within the noise says nothing
    out = []
    for (level, key, short, category, a, b, calls, d, se, sigma, source, df), p_i, q_i in zip(judged, p, q):
        half = _critical(confidence, df) * se
        verdict = _decided(d, half, sigma, min_effect, bool(q_i <= fdr))
        needed = (_runs_needed(d, sigma, n_a, n_b, df, source, min_effect, confidence, fdr)
                  if verdict == "inconclusive" else None)
        share = d / step_delta if moved and step_delta else None
        out.append(ComponentDelta(
            level, key, short, category, float(np.mean(a)), float(np.mean(b)), d, share, verdict,
            _presence(a, b, calls, n_a), sigma, source, d - half, d + half, float(p_i), float(q_i), needed,
            **_calls(a, b, calls, n_a, level)))
    rank = {"changed": 0, "inconclusive": 1, "no change": 2}
    out.sort(key=lambda c: (rank[c.verdict], -abs(c.delta_ms_per_step), c.level, c.name))
    source = out[0].noise_source if out else ("pairwise" if mode == "pairwise" else "default")
    return Explanation(step, mode, source, _noise_note(source, n_a, mode), tuple(r.receipt_id for r in baseline),
                       tuple(r.receipt_id for r in candidate), tuple(levels), fdr, min_effect, confidence, tuple(out))


def _span(run: RunComponents) -> float:
    """A run's GPU span per step: the sum of its decomposition parts."""
    return sum(v.ms_per_step for (level, name), v in run.values.items() if level == "category" and name in DECOMPOSITION)


def _by_component(runs: Sequence[RunComponents], keys: Mapping[str, tuple[str, str]], levels: Sequence[str]
                  ) -> dict[tuple[str, str], tuple[str, str | None, np.ndarray, np.ndarray | None]]:
    """Per (level, key): short name, category, ms per step of each run (0 when absent) and calls (kernels, NVTX)."""
    table: dict[tuple[str, str], tuple[str, str | None, np.ndarray, np.ndarray | None]] = {}
    for i, run in enumerate(runs):
        for (level, name), v in run.values.items():
            if level not in levels:
                continue
            key, short = keys[name] if level == "kernel" else (name, name)
            if (level, key) not in table:
                counted = v.calls_per_step is not None
                table[(level, key)] = (short, v.category, np.zeros(len(runs)),
                                       np.zeros(len(runs)) if counted else None)
            _, _, ms, calls = table[(level, key)]
            ms[i] += v.ms_per_step
            if calls is not None and v.calls_per_step is not None:
                calls[i] += v.calls_per_step
    return table


def _presence(a: np.ndarray, b: np.ndarray, calls: np.ndarray | None, n_a: int) -> str | None:
    seen = calls if calls is not None else np.r_[a, b]
    in_a, in_b = seen[:n_a] > 0, seen[n_a:] > 0
    if not in_a.any() and in_b.all():
        return "appeared"
    if not in_b.any() and in_a.all():
        return "vanished"
    return None


def _calls(a: np.ndarray, b: np.ndarray, calls: np.ndarray | None, n_a: int, level: str) -> dict[str, float | None]:
    if calls is None or level != "kernel":
        return {}
    ca, cb = float(np.mean(calls[:n_a])), float(np.mean(calls[n_a:]))
    out: dict[str, float | None] = {"baseline_calls_per_step": ca, "candidate_calls_per_step": cb,
                                    "calls_delta_per_step": cb - ca}
    if ca > 0 and cb > 0:
        mean_a, mean_b = float(np.mean(a)) / ca, float(np.mean(b)) / cb
        out["more_calls_ms_per_step"] = (cb - ca) * mean_a
        out["slower_calls_ms_per_step"] = cb * (mean_b - mean_a)
    return out


def _noise_note(source: NoiseSource, n_a: int, mode: Mode) -> str:
    if source == "lane":
        return (f"each component's own run-to-run noise, measured from {n_a} profiled baseline runs "
                f"(the standard deviation of their values; t with {n_a - 1} df)")
    if mode == "pairwise":
        return (f"pairwise: one run each side, so no component noise exists; a fixed floor of "
                f"{DEFAULT_FLOOR_PCT:g}% of each component's baseline value is used instead")
    return (f"the lane has {n_a} profiled baseline run(s), fewer than the {MIN_RUNS} that measure a component's "
            f"noise: a fixed floor of {DEFAULT_FLOOR_PCT:g}% of each component's baseline value is used "
            f"({MIN_RUNS - n_a} more profiled run(s) give it a measured one)")
