"""`receipts check`: is a candidate run slower than its lane's recent baseline runs, beyond the noise?

No hand-written claim: the baseline is found, not named.

Baseline of a candidate: its own lane (the canonical identity triple), current receipts only, carrying
the tag of `--against tag:T`, the most recent `last` of them by run date, every candidate left out (a
run is never its own baseline). Baseline runs that ended early or have no steady state are left out and
named. So is an outlier: a run whose median lies more than OUTLIER_Z robust z-scores from the median of
the run medians (Iglewicz & Hoaglin's modified z-score, 0.6745 |x - median| / MAD > 3.5, i.e.
|x - median| > 3.5 x 1.4826 MAD), judged once the baseline has at least 3 runs: a throttled GPU or a
noisy neighbour in one main run must not move the baseline or widen its interval. The baseline's
centre is the median of the remaining runs' medians.

Verdict: analysis.verdict.decide(baseline runs, [candidate], the lane's noise floor), the rule compare
and the gate use. The floor is the lane's, measured on its runs carrying the tag (the most recent
FLOOR_WINDOW, candidates left out: a regressed candidate must not widen the floor it is judged by).

Outcome per candidate: `judged` (a verdict), `no_baseline` (the lane has no usable run with the tag:
the message says which lane and how to create one), `rumor` (incomplete identity: no lane at all) or
`unmeasured` (the candidate has fewer than 2 steady-state steps). Exit code (CheckResult.exit_code):
1 when any candidate is `slower`; else 3 when any candidate could not be judged; else 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Literal, Mapping, Sequence

import numpy as np

from receipts.analysis.compare import IDENTITY_FIELDS, Difference, drift
from receipts.analysis.lanes import Lane, lane_of, lane_runs
from receipts.analysis.noise import FLOOR_WINDOW, MAD_TO_SIGMA, MIN_FLOOR_PCT, NoiseFloor, noise_floor
from receipts.analysis.record import StoredReceipt, load_many
from receipts.analysis.stats import median_interval
from receipts.analysis.verdict import VerdictResult, decide
from receipts.errors import UsageError

if TYPE_CHECKING:
    from receipts.store import Store

DEFAULT_LAST = 5       # baseline runs per candidate: enough for a robust centre and an outlier test
OUTLIER_Z = 3.5        # modified z-score above which a baseline run is an outlier (Iglewicz & Hoaglin 1993)
MIN_RUNS_FOR_OUTLIERS = 3  # with 2 runs nobody can say which one is the outlier
TAG_PREFIX = "tag:"
_RETAG_FLAG = {"host_lineage": "--host-lineage", "preset_family": "--preset", "launch_regime": "--regime"}

Outcome = Literal["judged", "no_baseline", "rumor", "unmeasured"]
EXIT_OK, EXIT_SLOWER, EXIT_NOT_JUDGED = 0, 1, 3


@dataclass(frozen=True)
class BaselineRun:
    id: str
    run_name: str
    run_date: str               # ISO, UTC: the run's start from its log, else its ingest time
    median_step_ms: float | None
    excluded: str | None = None  # why it was left out of the baseline; None when used


@dataclass(frozen=True)
class Baseline:
    tag: str
    last: int
    runs: tuple[BaselineRun, ...]   # the `last` most recent tagged runs of the lane, oldest first, used or not
    median_step_ms: float | None     # median of the used runs' medians (ms)
    floor: NoiseFloor

    @property
    def used(self) -> tuple[BaselineRun, ...]:
        return tuple(r for r in self.runs if r.excluded is None)

    @property
    def excluded(self) -> tuple[BaselineRun, ...]:
        return tuple(r for r in self.runs if r.excluded is not None)


@dataclass(frozen=True)
class CandidateCheck:
    ref: str                         # as the user named it (or the tag that selected it)
    receipt_id: str
    run_name: str
    lane: Lane | None
    outcome: Outcome
    message: str                     # one line: the verdict's why, or why there is no verdict and what to do
    median_step_ms: float | None = None
    baseline: Baseline | None = None
    verdict: VerdictResult | None = None
    drift: Mapping[str, tuple[Difference, ...]] = field(default_factory=dict)  # vs the newest used baseline run
    ended_early: str | None = None

    @property
    def verdict_name(self) -> str | None:
        return self.verdict.verdict if self.verdict else None


@dataclass(frozen=True)
class CheckResult:
    against: str
    last: int
    candidates: tuple[CandidateCheck, ...]

    @property
    def passed(self) -> bool:
        return not any(c.verdict_name == "slower" for c in self.candidates)

    @property
    def exit_code(self) -> int:
        if not self.passed:
            return EXIT_SLOWER
        return EXIT_NOT_JUDGED if any(c.outcome != "judged" for c in self.candidates) else EXIT_OK


def parse_against(against: str) -> str:
    """`tag:main` -> 'main'. Only tag baselines exist: a named receipt is `compare`'s job."""
    if not against.startswith(TAG_PREFIX) or not against[len(TAG_PREFIX):].strip():
        raise UsageError(f"--against {against!r}: expected tag:NAME, e.g. --against tag:main "
                         "(to compare with one named receipt, use `receipts compare`)")
    return against[len(TAG_PREFIX):].strip()


# ---------------------------------------------------------------------------------------- reading
def resolve_candidates(store: "Store", refs: Sequence[str]) -> list[tuple[str, str]]:
    """(ref, receipt id) for each candidate; `tag:T` stands for every current receipt carrying T."""
    out: list[tuple[str, str]] = []
    named = [r for r in refs if not r.startswith(TAG_PREFIX)]
    resolved = store.resolve_many(named) if named else {}
    for ref in refs:
        if ref.startswith(TAG_PREFIX):
            tag = parse_against(ref)
            rows = store.query("tagged_receipts", {"tag": tag})
            if rows.height == 0:
                raise UsageError(f"no current receipt carries the tag {tag!r} (candidates {ref}); "
                                 f"tag runs at ingest: receipts ingest run.log --tag {tag}")
            out += [(ref, rid) for rid in rows["id"]]
        else:
            rid = resolved[ref]
            if isinstance(rid, Exception):  # ReceiptNotFound: a typo is an error (exit 2), not a verdict
                raise rid
            out.append((ref, rid))
    return list({rid: (ref, rid) for ref, rid in out}.values())  # a run named twice is checked once


def run_check(store: "Store", refs: Sequence[str], *, against: str, last: int = DEFAULT_LAST) -> CheckResult:
    """Resolve the candidates, read each lane's tagged runs and the baseline receipts, then judge."""
    tag = parse_against(against)
    if last < 1:
        raise UsageError(f"--last {last}: the baseline needs at least 1 run")
    pairs = resolve_candidates(store, refs)
    candidates = load_many(store, [rid for _, rid in pairs])
    lanes = sorted({lane_of(r) for r in candidates.values()} - {None}, key=str)
    rows: dict[Lane, list[dict]] = {lane: [] for lane in lanes}
    if lanes:
        frame = lane_runs(store, lanes, tag=tag, last=max(last, FLOOR_WINDOW) + len(candidates))
        for r in frame.iter_rows(named=True):
            rows[Lane(r["host_lineage"], r["preset_family"], r["launch_regime"])].append(r)
    chosen = {lane: pick_baseline(lane_rows, candidates.keys(), last) for lane, lane_rows in rows.items()}
    baseline_ids = [r["receipt_id"] for picked in chosen.values() for r in picked]
    baselines = load_many(store, baseline_ids) if baseline_ids else {}
    results = []
    for ref, rid in pairs:
        c = candidates[rid]
        lane = lane_of(c)
        results.append(judge(ref, c, tag=tag, last=last, picked=chosen.get(lane, []),
                             floor_rows=_floor_rows(rows.get(lane, []), candidates.keys()), receipts=baselines))
    return CheckResult(against, last, tuple(results))


# ---------------------------------------------------------------------------------------- pure
def pick_baseline(lane_rows: Sequence[dict], candidate_ids: Iterable[str], last: int) -> list[dict]:
    """The `last` most recent lane_runs rows that are not candidates, oldest first."""
    skip = set(candidate_ids)
    return [r for r in lane_rows if r["receipt_id"] not in skip][-last:]


def _floor_rows(lane_rows: Sequence[dict], candidate_ids: Iterable[str]) -> list[tuple[str, float]]:
    skip = set(candidate_ids)
    kept = [r for r in lane_rows if r["receipt_id"] not in skip][-FLOOR_WINDOW:]
    return [(r["receipt_id"], r["median_step_ms"]) for r in kept]


def outliers(medians: Mapping[str, float]) -> dict[str, float]:
    """Runs whose median is an outlier among `medians`, with their modified z-score (see the module doc)."""
    if len(medians) < MIN_RUNS_FOR_OUTLIERS:
        return {}
    x = np.array(list(medians.values()))
    center = float(np.median(x))
    sigma = max(MAD_TO_SIGMA * float(np.median(np.abs(x - center))), MIN_FLOOR_PCT / 100.0 * center)
    return {rid: abs(m - center) / sigma for rid, m in medians.items() if abs(m - center) / sigma > OUTLIER_Z}


def judge(ref: str, candidate: StoredReceipt, *, tag: str, last: int, picked: Sequence[dict],
          floor_rows: Sequence[tuple[str, float]], receipts: Mapping[str, StoredReceipt]) -> CandidateCheck:
    """The verdict on one candidate against its picked baseline rows (lane_runs rows, oldest first)."""
    lane = lane_of(candidate)
    own = median_interval(candidate.steady_step_ms)
    base = dict(ref=ref, receipt_id=candidate.id, run_name=candidate.run_name, lane=lane,
                median_step_ms=own.median if own else None, ended_early=candidate.ended_early)
    if lane is None:
        missing = [f for f in IDENTITY_FIELDS if not getattr(candidate, f)]
        return CandidateCheck(**base, outcome="rumor", message=(
            f"{candidate.run_name}: incomplete identity (a rumor, not a comparison): lacks {', '.join(missing)}; "
            f"without a lane there is no baseline (give it one: receipts retag {candidate.run_name} "
            + " ".join(f"{_RETAG_FLAG[f]} ..." for f in missing) + " --why ...)"))
    if own is None:
        return CandidateCheck(**base, outcome="unmeasured", message=(
            f"{candidate.run_name}: fewer than 2 steady-state steps with a step time; nothing to compare"))
    runs, intervals, medians = [], {}, {}
    for row in picked:
        r = receipts[row["receipt_id"]]
        why = None
        if r.ended_early:
            why = f"ended early: {r.ended_early}"
        elif (interval := median_interval(r.steady_step_ms)) is None:
            why = "fewer than 2 steady-state steps"
        else:
            intervals[r.id], medians[r.id] = interval, interval.median
        runs.append(BaselineRun(r.id, r.run_name, str(row["run_date"]), row["median_step_ms"], why))
    far = outliers(medians)
    center = float(np.median([m for rid, m in medians.items() if rid not in far])) if medians else None
    runs = [BaselineRun(b.id, b.run_name, b.run_date, b.median_step_ms,
                        f"outlier: median {b.median_step_ms:.2f} ms is {far[b.id]:.1f} robust z-scores from the "
                        f"baseline's {center:.2f} ms (> {OUTLIER_Z:g})") if b.id in far else b for b in runs]
    floor = noise_floor(floor_rows)
    baseline = Baseline(tag, last, tuple(runs), center, floor)
    used = [intervals[b.id] for b in baseline.used]
    if not used:
        have = (f"its {len(runs)} most recent run(s) tagged {tag!r} cannot be used ("
                + "; ".join(f"{b.run_name}: {b.excluded}" for b in runs) + ")") if runs else \
            f"no current receipt in it carries the tag {tag!r}"
        return CandidateCheck(**base, outcome="no_baseline", baseline=baseline, message=(
            f"{candidate.run_name}: no baseline in lane {lane}: {have}. Create one by ingesting runs of this "
            f"lane with the tag: receipts ingest run.log --tag {tag} (or receipts retag RUN --tag {tag} --why ...)"))
    verdict = decide(used, [own], floor, grow="candidate")
    newest = receipts[baseline.used[-1].id]
    return CandidateCheck(**base, outcome="judged", baseline=baseline, verdict=verdict, message=verdict.why,
                          drift={k: v for k, v in drift(newest, candidate).items() if v})
