"""How much one run's value of a component moves when nothing changes, and when a change needs no noise at all.

Two-level model. A component's value in run r is its per-step values' median (categories, ranks) or mean (kernels,
NVTX ranges) over the run's steady steps:

    value_r = mu + u_r + e_r      u_r ~ (0, tau^2): between runs      e_r ~ (0, w_r): within the run, from its steps

so the variance of one run's value is tau^2 + w. `w` is measured from each run's own steps (analysis/components.py
step_spread: pi/2 x (1.4826 MAD)^2 / n for a median), with as many degrees of freedom as there are steps; kernels
and NVTX ranges keep no per-step series, so their w is 0 and the between-run part carries all of it.

The between-run part is a moderated variance (Smyth 2004, limma's moderated t: thousands of features, a handful of
replicates): a prior with d0 degrees of freedom is pooled with the baseline runs' own sample variance (n_A - 1):

    sigma^2 = (d0 s0^2 + (n_A - 1) s^2) / (d0 + n_A - 1),  s0^2 = scale x (kappa_class x value)^2 + w

The prior is the baseline runs' own (lane_prior, empirical Bayes): the calibration's kappa gives its shape (which
class, which value is noisier), and Smyth's moment fit of the F distribution (fitFDist) over the lane's components
of at least 1% of the step gives its level (`scale`) and how far the components stray from that shape (d0); a
component's sigma then stands on d0 + n_A - 1 degrees of freedom (limma's: s^2 holds the steps' spread too). A quiet lane is judged by its own quietness, a
loud one by its loudness, and never by the runs judged (the ENVELOPE classes, CPU-side ranges whose warm-up can
jump in one run of many, keep the calibrated prior). With fewer than MIN_PRIOR_RUNS baseline runs (one degree of
freedom a component gives no fit) or MIN_PRIOR_COMPONENTS components, the prior is the calibration itself (scale 1,
its d0), the test's degrees of freedom Satterthwaite's over the parts of se(d)^2 (the calibration's d0, the
baseline runs' n_A - 1, the steps' sum of n - 1): there a noise that is mostly step-to-step spread is well known.

With one run a side (pairwise) s^2 does not exist and sigma^2 = s0^2: the calibration alone, its scale the mean of
the two sides' values (idle: their geometric mean, so a stall that multiplies it does not widen its own noise as
much) and the mean of their within-run variances, so A against B and B against A are the same test. Classes (kappa: the
relative between-run standard deviation of one run's value, percent; CALIBRATION):

  cpu      NVTX ranges: CPU-side time over the whole capture, warm-up included (+-60% between identical runs)
  wait     communication kernels and categories (the kind of their category's rule, not its name: the shipped
           nccl_* ones, a user's own), exposed and hidden communication, each rank's exposed wait: a collective's
           kernel time includes the wait for the slowest peer
  gap      idle: time the GPU waits inside its span
  host     host_gap (the step's range outside the GPU span) and between_steps (from one step's range to the next):
           kappa a share of the step (a host gap's value swings around 0)
  stall    idle_long: the GPU's idle held in gaps of 0.5 ms or more (schema/categories.py), near 0 when nothing
           stalls the host: kappa a share of the step, as the host class's
  place    a long gap's place (the gap level: idle_long by where its gaps lie): a share of the step; judged by its
           calibration in lane mode too, and left out of the lane's fit (most places are 0 in every run but one,
           whose pauses would set the level of every other component)
  busy     the other categories (gemm, attention, other, compute_only, copies): unions of many kernels
  compute  the other kernels (GEMM, attention, elementwise): one name, fewer calls, more spread

Structural evidence needs no noise: a kernel whose calls per step are the same in every baseline run and the same in
every candidate run, and differ between the sides, changed (`structural`). Appearing (0 calls in every baseline run)
and vanishing are the same fact. One run a side cannot show that its count is the same from run to run, so there
the counts must also be whole numbers per step on both sides. Its time cost is reported beside it, with the
interval of the timing model.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable, Literal, Mapping, Sequence

from receipts.analysis.polygamma import digamma, tetragamma, trigamma
from receipts.schema.step_parts import BETWEEN_STEPS, HOST_GAP, IDLE_LONG

# A component's values over a few runs, or a lane's few dozen variances: plain floats (a sequence of them; a NumPy
# array is one too), summed in order as NumPy sums fewer than 8, so judging a comparison imports no NumPy.
Floats = Sequence[float]


def _mean(x: Floats) -> float:
    return sum(x) / len(x)


def _var(x: Floats) -> float:
    """The sample variance (ddof 1), two-pass as numpy.var computes it."""
    m = _mean(x)
    return sum((v - m) * (v - m) for v in x) / (len(x) - 1)


@dataclass(frozen=True)
class Calibration:
    kappa_pct: Mapping[str, float]  # per class: relative between-run sd of one run's value, percent
    df: int                         # the prior's degrees of freedom
    source: str                     # what it was measured on


# Measured by benchmarks/calibrate_explain_noise.py: per class, the largest between-run sd (the runs' variance less
# what their own steps explain) among components of at least 1% of the step, relative to the value, rounded up.
# Two corpora (docs/statistics.md): tests/data/explain's six A/A runs (2 x H200, FSDP2, nsys): compute 2.7% (an
# elementwise kernel), wait 13.6% (rank 0's exposed wait), gap 3.3%, cpu 45%, busy and host 0% (kept at a stated
# least spread, since six runs measuring nothing is no proof of nothing); and the planted one-H200 corpus's A/A runs
# (tests/data/explain_corpus; `--corpus nsys`: 7 runs, `--corpus kineto`: 6): compute 0.6 / 0.7%, busy 0.2 / 0.5%,
# gap (idle) 20.8 / 33.8%, host 0.25 / 0.11% of the step, cpu 12.5 / 16%. The GPU-side classes (busy, compute, wait)
# are kernel timestamps, which the profiler does not change: both profilers take the larger of the two corpora. The
# host-side classes (gap, host, cpu) are the host's pace, which the profiler's own overhead sets (Kineto's makes
# stretches of the step launch-bound): each profiler its own, the larger of its measurements. The prior's degrees of
# freedom (d0) are the largest corpus's runs less one: 7 - 1 (nsys), 6 - 1 (Kineto). The stall class (idle_long)
# measured 0.00% of the step on all three (0 in every baseline's median step but kineto_base_6's, whose 1.26 ms the
# model gives to its own steps' spread): kept at 0.1% of the step, the floor every component has. The place class
# (a long gap's place, the gap level): 0.49% of the step on the Kineto corpus (kineto_base_1..6's pauses after the
# optimizer's multi_tensor_apply #1, in 0 to 9 of 15 steps a run), 0.5%; 0.00% under nsys (its A/A runs' only long
# gaps are single 0.50-0.52 ms ones after one copy, memcpy_d2d #15, in 0 to 3 steps a run): the 0.1% floor.
_GPU_SIDE = {"compute": 3.0, "busy": 1.0, "wait": 20.0}
CALIBRATIONS = {
    "nsys": Calibration({**_GPU_SIDE, "gap": 25.0, "host": 0.3, "stall": 0.1, "place": 0.1, "cpu": 50.0}, 6,
                        "Nsight Systems: 6 A/A runs of a 2xH200 FSDP2 lane (tests/data/explain) and 7 of a 1xH200 "
                        "one (tests/data/explain_corpus)"),
    "kineto": Calibration({**_GPU_SIDE, "gap": 35.0, "host": 0.25, "stall": 0.1, "place": 0.5, "cpu": 50.0}, 5,
                          "the PyTorch profiler: 6 A/A runs of a 1xH200 FSDP2 lane (tests/data/explain_corpus); its "
                          "GPU-side classes as Nsight Systems'"),
}
CALIBRATION = CALIBRATIONS["nsys"]


def calibration_for(formats: Iterable[str]) -> Calibration:
    """The calibration of the profiles compared: their profiler's; for runs of several profilers (or one without a
    calibration of its own), each class's largest over them (an nsys run against a Kineto run carries both noises)."""
    known = sorted({f for f in formats if f in CALIBRATIONS}) or ["nsys"]
    if len(known) == 1 and set(formats) <= set(known):
        return CALIBRATIONS[known[0]]
    chosen = [CALIBRATIONS[f] for f in known] + ([CALIBRATION] if not set(formats) <= set(known) else [])
    kappa = {k: max(c.kappa_pct[k] for c in chosen) for k in chosen[0].kappa_pct}
    return Calibration(kappa, min(c.df for c in chosen), "each class's largest of " + "; ".join(c.source for c in chosen))

_WAIT_PARTS = ("comm_hidden", "exposed_comm")
STEP_SCALED = ("host", "stall", "place")  # classes whose kappa is a share of the step, not of the component's value
PAIR_GEOMETRIC = ("gap",)  # pairwise: the scale is the two values' geometric mean (_pair_scale)
# Classes judged by the calibrated prior in lane mode too, and left out of the lane's fit: CPU-side ranges over the
# whole capture, warm-up included, jump between identical runs in a way no handful of baseline runs shows (on the
# 2 x H200 lane `ablock` is 27.1-29.4 ms in five runs and 66.5 ms in the sixth, whose warm-up was slow): their
# calibrated 50% is that envelope, and a prior fitted to five quiet runs named the sixth changed.
ENVELOPE = ("cpu",)
UNFITTED = (*ENVELOPE, "place")  # judged by the calibrated prior in lane mode and left out of the lane's fit


def component_class(level: str, name: str, category: str | None, kinds: Mapping[str, str]) -> str:
    """cpu / wait / gap / compute (module docstring). `kinds`: each kernel category's kind under the rules the runs
    were categorised under (schema/category_kinds.py); a category of kind communication waits, whatever its name."""
    if level == "nvtx":
        return "cpu"
    if level == "rank":
        return "wait"
    if level == "gap":
        return "place"
    if level == "category":
        if kinds.get(name) == "communication" or name in _WAIT_PARTS:
            return "wait"
        if name == IDLE_LONG:
            return "stall"
        return "host" if name in (HOST_GAP, BETWEEN_STEPS) else "gap" if name == "idle" else "busy"
    return "wait" if category is not None and kinds.get(category) == "communication" else "compute"


@dataclass(frozen=True)
class Prior:
    """The prior of every component's between-run variance: `scale` times the calibration's (kappa x value)^2 (its
    shape), on `df` degrees of freedom (inf: the shape alone, no component differs from it beyond sampling)."""
    scale: float
    df: float
    components: int                         # the components it was fitted to (0: the calibration's)
    source: Literal["lane", "calibrated"]   # fitted to the baseline runs | the calibration itself


MIN_PRIOR_RUNS = 3         # baseline runs before the lane's own prior: two give each component one df
MIN_PRIOR_COMPONENTS = 8   # components the fit needs (at least FIT_SHARE of the step, or step-scaled)
FIT_SHARE = 0.01           # smaller components are held by the floors and the minimum effect, not by their spread


def calibrated_prior(calibration: Calibration = CALIBRATION) -> Prior:
    """The calibration as the prior: its kappa, on its d0 (pairwise; fewer than MIN_PRIOR_RUNS baseline runs)."""
    return Prior(1.0, float(calibration.df), 0, "calibrated")


def fitted(x: Floats, d: float) -> tuple[float, float]:
    """Smyth's (2004) moment estimate of a scaled F distribution: (s0^2, d0) such that x ~ s0^2 F(d, d0), from the
    mean and variance of log x (limma's fitFDist without a covariate). d0 is inf when log x varies no more than
    sampling on d df alone makes it vary; then s0^2 is x's mean (the pooled variance, limma's choice there)."""
    x = _positive(x)
    e = _log_f(x, d)
    excess = _var(e) - trigamma(d / 2.0)
    if excess <= 0:
        return _mean(x), math.inf
    d0 = 2.0 * _trigamma_inverse(excess)
    return float(math.exp(_mean(e) + digamma(d0 / 2.0) - math.log(d0 / 2.0))), d0


def _positive(x: Floats) -> list[float]:
    x = [max(float(v), 0.0) for v in x]
    least = 1e-5 * (float(statistics.median(x)) or 1.0)  # an exactly zero variance has no log
    return [max(v, least) for v in x]


def _log_f(x: Floats, d: float) -> list[float]:
    """log x less the mean of log(chi^2_d / d): centred on the log of the F distribution's scale."""
    shift = digamma(d / 2.0)
    half = math.log(d / 2.0)
    return [math.log(v) - shift + half for v in x]


def _trigamma_inverse(x: float) -> float:
    """y with trigamma(y) = x: Newton's method from limma's start (trigammaInverse)."""
    if x > 1e7:
        return 1.0 / math.sqrt(x)
    if x < 1e-6:
        return 1.0 / x
    y = 0.5 + 1.0 / x
    for _ in range(50):
        tri = trigamma(y)
        step = tri * (1.0 - tri / x) / tetragamma(y)
        y += step
        if -step / y < 1e-8:
            break
    return y


def _root(f, lo: float, hi: float, *, xtol: float) -> float:
    """The root of a function falling from f(lo) > 0 to f(hi) < 0, by bisection to xtol (~35 halvings here: a few
    milliseconds, where SciPy's brentq would cost its import)."""
    while hi - lo > xtol:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) > 0.0 else (lo, mid)
    return 0.5 * (lo + hi)


def lane_prior(baseline: Iterable[tuple[Floats, Floats, str]], *, step_ms: float,
               calibration: Calibration = CALIBRATION) -> Prior:
    """The prior fitted to the baseline runs themselves (empirical Bayes, Smyth 2004): each component's sample
    variance over the baseline runs, s^2 on n_A - 1 df, is taken as (scale x b + w) F(n_A - 1, d0), b the
    calibration's (kappa_class x value)^2 and w the runs' mean within-run variance; `scale` is the one that makes
    the fitted F's own scale 1 (a root of its log), d0 the fit's at that scale. The calibration gives the shape
    (which classes, which values are noisier), the lane its level and how far its components stray from that
    shape. `baseline`: per component, the baseline runs' values, their within-run variances and its class. Fitted
    to the components of at least FIT_SHARE of the step whose calibrated between-run variance is at least their
    within-run one (of the others, s^2 says how well the steps' own spread predicts the runs', not the between-run
    level). The calibration itself (calibrated_prior) below MIN_PRIOR_RUNS runs or MIN_PRIOR_COMPONENTS components."""
    s2, b, w = [], [], []
    n_a = 0
    for values, within, klass in baseline:
        n_a = len(values)
        mean = _mean(values)
        step_scaled = klass in STEP_SCALED
        if n_a < MIN_PRIOR_RUNS or klass in UNFITTED or not (step_scaled or abs(mean) >= FIT_SHARE * step_ms):
            continue
        shape = (calibration.kappa_pct[klass] / 100.0 * (step_ms if step_scaled else abs(mean))) ** 2
        if shape < _mean(within):  # its own steps explain its spread: nothing of the between-run part
            continue
        s2.append(_var(values))
        b.append(shape)
        w.append(_mean(within))
    if n_a < MIN_PRIOR_RUNS or len(s2) < MIN_PRIOR_COMPONENTS:
        return calibrated_prior(calibration)
    d = float(n_a - 1)

    def scaled(scale: float) -> list[float]:  # each s^2 over its prior's variance at `scale`
        return [s / (scale * bi + wi) for s, bi, wi in zip(s2, b, w)]

    def excess(log_scale: float) -> float:  # log of the fitted F's scale: 0 at the prior's scale, falling in it
        return math.log(fitted(scaled(math.exp(log_scale)), d)[0])

    lo, hi = math.log(1e-8), math.log(1e4)
    if excess(lo) <= 0.0:  # the runs' own steps explain all of their spread
        scale = math.exp(lo)
    elif excess(hi) >= 0.0:
        scale = math.exp(hi)
    else:
        scale = math.exp(_root(excess, lo, hi, xtol=1e-6))
    # d0 is how far the components' true variances stray from the prior; the prior's level is itself estimated
    # from these G components (limma's thousands make that error nil, a lane's ~40 do not): the variance of its
    # log is var(e) / (G rho^2), rho the between-run share of the prior a component holds (a component whose
    # variance its own steps explain says nothing of the level). Both errors of the prior as an estimate of one
    # component's variance, on the log scale 2/d0 and 2/df_level, add: the prior's degrees of freedom.
    fit = scaled(scale)
    rho = _mean([scale * bi / (scale * bi + wi) for bi, wi in zip(b, w)])
    spread = _var(_log_f(_positive(fit), d))
    df_level = 2.0 * len(s2) * rho * rho / spread if spread > 0 else math.inf
    d0 = 1.0 / (1.0 / fitted(fit, d)[1] + 1.0 / df_level) if df_level > 0 else 0.0
    return Prior(scale, d0, len(s2), "lane")


@dataclass(frozen=True)
class Noise:
    sigma: float        # sd of one baseline run's value, ms
    se: float           # sd of the difference of the sides' means, ms
    df: float           # degrees of freedom of sigma (inf: none estimated)
    source: Literal["lane", "calibrated"]  # the baseline runs moderated by the calibration | the calibration alone


def noise(a: Floats, b: Floats, wa: Floats, wb: Floats, klass: str, *, floor_ms: float,
          step_ms: float = 0.0, within_df: float = math.inf, calibration: Calibration = CALIBRATION,
          prior: Prior | None = None) -> Noise:
    """The two-level moderated noise of one component (module docstring). `a`, `b`: the sides' run values; `wa`,
    `wb`: their within-run variances (0 where unknown); `within_df`: the steps those were measured from, less one a
    run. `floor_ms`: the least sigma; `step_ms`: the scale of the STEP_SCALED classes; `prior`: the between-run
    prior (lane_prior; None: the calibration's). The test's degrees of freedom: under a fitted prior d0 + n_A - 1
    (limma's); under the calibrated one Satterthwaite's over the parts of se(d)^2: the prior's (d0), the baseline
    runs' sample variance (n_A - 1) and the runs' own steps (within_df), so a noise that is mostly step-to-step
    spread is known well."""
    n_a, n_b = len(a), len(b)
    # one run: no lane to fit; an ENVELOPE class: its calibration is what a few runs cannot show
    prior = prior if prior is not None and n_a >= 2 and klass not in UNFITTED else calibrated_prior(calibration)
    fitted_prior = prior.source == "lane"
    w_a, w_b = _mean(wa), _mean(wb)
    kappa = calibration.kappa_pct[klass] / 100.0
    if n_a >= 2:
        scale, within = abs(_mean(a)), w_a
    else:  # one baseline run: a scale both sides give alike, so the test is symmetric
        scale, within = _pair_scale(a, b, geometric=klass in PAIR_GEOMETRIC), (w_a + w_b) / 2.0
    if klass in STEP_SCALED:
        scale = step_ms
    between = prior.scale * (kappa * scale) ** 2
    d0 = prior.df
    if fitted_prior and klass not in STEP_SCALED and scale > 0:
        # the prior's shape is scaled by the baseline runs' mean, itself an estimate: its square's relative variance,
        # 4 (between + w) / (n_A mean^2), as a chi-square's 2 / df (a CPU range at 50% over three runs: 6 df)
        d0 = 1.0 / (1.0 / d0 + 2.0 * (between + within) / (n_a * scale * scale)) if d0 > 0 else 0.0
    spread = 1.0 / n_a + 1.0 / n_b
    if n_a >= 2:
        # the prior's share and the sample's: d0 and n_A - 1 degrees of freedom (a prior on infinite df is all)
        own = 0.0 if math.isinf(d0) else (n_a - 1) / (d0 + n_a - 1)
        sample = _var(a)
        var = (1.0 - own) * (between + within) + own * sample
        # the candidate's own within-run variance replaces the baseline's (a stall makes steps jittery)
        var_b = var - within + w_b
        parts = [((1.0 - own) * between * spread, d0), (own * sample * spread, float(n_a - 1))]
        source: Literal["lane", "calibrated"] = "lane"
    else:
        var = var_b = between + within
        parts, source = [(between * spread, d0)], "calibrated"
    if fitted_prior:
        # a prior fitted to the lane: its d0 is how far the components' true variances stray from it, so the
        # moderated variance is one estimate on d0 + n_A - 1 df (Smyth 2004's moderated t). s^2 holds the runs'
        # within-run spread too; Satterthwaite would lend the whole the steps' many df exactly when a chance-low
        # s^2 (two or three df) makes w look the most of it, the s^2 that shrinks the test's se (a 3-run lane of
        # the measured one-GPU corpus named idle or the host gap in 6% of lanes so)
        df = d0 + n_a - 1
    else:
        se2 = var / n_a + var_b / n_b
        parts.append((max(0.0, se2 - sum(p for p, _ in parts)), within_df))
        df = _satterthwaite(parts)
    var, var_b = max(var, floor_ms ** 2), max(var_b, floor_ms ** 2)
    return Noise(math.sqrt(var), math.sqrt(var / n_a + var_b / n_b), df, source)


def _pair_scale(a: Floats, b: Floats, *, geometric: bool) -> float:
    """The scale of a relative spread with one run a side, the same either way round: the two values' mean; for the
    PAIR_GEOMETRIC classes their geometric mean (the pair's middle on the log scale), so a stall that multiplies idle
    eightfold widens its own noise by sqrt(8), not by the 4.5 of the mean. Not for a class as wide as the CPU ranges'
    (50%): two draws of the same range can be 0.2 and 1.6 of its value, and their geometric mean is no scale. The
    mean of the two sizes where one side lacks the component or their signs differ (a scale is a size: the mean of
    +0.9 and -0.8 is no scale of either)."""
    x, y = _mean(a), _mean(b)
    if geometric and x * y > 0:
        return math.sqrt(x * y)
    return (abs(x) + abs(y)) / 2.0


def _satterthwaite(parts: list[tuple[float, float]]) -> float:
    """Degrees of freedom of a sum of variance estimates (value, df each); d0 when there is nothing to weigh."""
    total = sum(v for v, _ in parts)
    weight = sum(v * v / df for v, df in parts if v > 0 and df > 0 and math.isfinite(df))
    if total <= 0:
        return float(parts[0][1])
    return float(total * total / weight) if weight > 0 else math.inf


def _constant(x: Floats) -> bool:
    return len(x) > 0 and max(x) - min(x) <= 1e-9 * max(1.0, max(abs(v) for v in x))


def _whole(x: Floats) -> bool:
    return all(abs(v - round(v)) <= 1e-6 for v in x)


def structural(calls_a: Floats | None, calls_b: Floats | None) -> bool:
    """A call count that is the same in every run of each side and differs between the sides (module docstring)."""
    if calls_a is None or calls_b is None or not _constant(calls_a) or not _constant(calls_b):
        return False
    if abs(float(calls_b[0]) - float(calls_a[0])) <= 1e-9 * max(1.0, float(calls_a[0])):
        return False
    return len(calls_a) >= 2 or (_whole(calls_a) and _whole(calls_b))


