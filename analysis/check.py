"""`receipts check`: is a candidate run slower than its lane's recent baseline runs, beyond the noise?

No hand-written claim: the baseline is found, not named.

Baseline of a candidate: its own lane (the canonical identity triple), current receipts only, carrying
the tag of `--against tag:T`, the most recent `last` of them by run date, every candidate left out (a
run is never its own baseline). Baseline runs that ended early or have no steady state are left out and
named. So is an outlier: a run whose median lies more than OUTLIER_Z robust z-scores from the median of
the run medians (Iglewicz & Hoaglin's modified z-score, 0.6745 |x - median| / MAD > 3.5, i.e.
|x - median| > 3.5 x 1.4826 MAD, with the scale never below the lane's noise floor), judged once the
baseline has at least 3 runs: a throttled GPU or a noisy neighbour in one main run must not move the
baseline or widen its interval. The baseline's
centre is the median of the remaining runs' medians.

Verdict: analysis.verdict.decide(baseline runs, [candidate], the lane's noise floor), the rule compare
and the gate use. The floor is the lane's, measured on its runs carrying the tag (the most recent
FLOOR_WINDOW, candidates left out: a regressed candidate must not widen the floor it is judged by).

Outcome per candidate: `judged` (a verdict), `no_baseline` (the lane has no usable run with the tag:
the message says which lane and how to create one), `rumor` (incomplete identity: no lane at all) or
`unmeasured` (the candidate has fewer than 2 steady-state steps).

Pooled: a lane's judged candidates together (a PR's repeated runs), the same rule with every candidate run
on the candidate side: decide(baseline runs, candidate runs, floor). Exit code (CheckResult.exit_code):
1 when a lane's pooled verdict is `slower` (with `each`: when any candidate alone is); else 3 when any
candidate could not be judged; else 0.
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Iterable, Literal, Mapping, Sequence

from receipts.analysis import telemetry
from receipts.analysis.commits import CommitRange, between
from receipts.analysis.compare import Difference, drift, with_telemetry
from receipts.analysis.figures import RunInterval
from receipts.analysis.lanes import DEFAULT_BASELINE_LAST, TAG_PREFIX, Lane, lane_of, lane_run_rows
from receipts.analysis.noise import FLOOR_WINDOW, MAD_TO_SIGMA, MIN_FLOOR_PCT, NoiseFloor, noise_floor
from receipts.analysis.record import StoredReceipt, load_many
from receipts.analysis.verdict import VerdictResult, decide
from receipts.errors import Remedy, UsageError
from receipts.schema.lane import OPTION

if TYPE_CHECKING:
    from receipts.store import Store

DEFAULT_LAST = DEFAULT_BASELINE_LAST  # 10 baseline runs per candidate (analysis.lanes says why)
OUTLIER_Z = 3.5        # modified z-score above which a baseline run is an outlier (Iglewicz & Hoaglin 1993)
MIN_RUNS_FOR_OUTLIERS = 3  # with 2 runs nobody can say which one is the outlier

Outcome = Literal["judged", "no_baseline", "rumor", "unmeasured"]
EXIT_OK, EXIT_SLOWER, EXIT_NOT_JUDGED = 0, 1, 3


@dataclass(frozen=True)
class BaselineRun:
    id: str
    run_name: str
    run_date: str               # ISO, UTC: the run's start from its log, else its ingest time
    median_step_ms: float | None
    excluded: str | None = None  # why it was left out of the baseline; None when used
    git_rev: str | None = None   # the commit it ran (provenance), where recorded


@dataclass(frozen=True)
class Baseline:
    tag: str
    last: int
    runs: tuple[BaselineRun, ...]   # the `last` most recent tagged runs of the lane, oldest first, used or not
    median_step_ms: float | None     # median of the used runs' medians (ms)
    floor: NoiseFloor
    intervals: Mapping[str, RunInterval] = field(default_factory=dict, repr=False)  # step time, used runs

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
    message: str                     # one line: the verdict's why, or why there is no verdict
    median_step_ms: float | None = None
    baseline: Baseline | None = None
    verdict: VerdictResult | None = None
    drift: Mapping[str, tuple[Difference, ...]] = field(default_factory=dict)  # vs the newest used baseline run
    ended_early: str | None = None
    remedy: Remedy | None = None     # what would give it a verdict (a rumor's retag, a baseline's tag)
    git_rev: str | None = None       # the commit it ran (provenance), where recorded

    @property
    def commits(self) -> CommitRange | None:
        """The newest used baseline run and this run, and the commits between them (a judged run only)."""
        if self.baseline is None or not self.baseline.used:
            return None
        newest = self.baseline.used[-1]
        return between(newest.run_name, newest.git_rev, self.run_name, self.git_rev)

    @property
    def verdict_name(self) -> str | None:
        return self.verdict.verdict if self.verdict else None


@dataclass(frozen=True)
class PooledCheck:
    """A lane's candidates judged as one group: the median of their run medians against the baseline, each
    run one sample of the candidate side (so a PR's 3 repeats are judged on 3 runs, and one noisy repeat
    neither fails nor passes the PR alone)."""
    lane: Lane
    run_ids: tuple[str, ...]
    run_names: tuple[str, ...]
    median_step_ms: float            # median of the candidates' run medians
    baseline: Baseline
    verdict: VerdictResult

    @property
    def verdict_name(self) -> str:
        return self.verdict.verdict


# The overall verdict of several lanes' pools: the most cautious one (a slower lane fails the check).
_CAUTION = ("slower", "inconclusive", "no change", "faster")


@dataclass(frozen=True)
class CheckResult:
    against: str
    last: int
    candidates: tuple[CandidateCheck, ...]
    pooled: tuple[PooledCheck, ...] = ()   # one per lane with a judged candidate
    each: bool = False                      # judged run by run (--each): the pool does not decide the exit code
    # With profiled_only: the newest export of the candidates and their lanes' tagged runs (analysis/profiles.py
    # profiled), and the GPU telemetry read with them: what explaining a candidate reads again otherwise.
    profiles: Mapping[str, dict] | None = None  # None: not read (a check without profiled_only)
    telemetry: Mapping[str, tuple] | None = None

    @property
    def pooled_verdict(self) -> str | None:
        """The pooled verdict over every lane: the lane's own with one lane, else the most cautious."""
        names = {p.verdict_name for p in self.pooled}
        return next((v for v in _CAUTION if v in names), None)

    @property
    def passed(self) -> bool:
        if self.each:
            return not any(c.verdict_name == "slower" for c in self.candidates)
        return not any(p.verdict_name == "slower" for p in self.pooled)

    @property
    def exit_code(self) -> int:
        if not self.passed:
            return EXIT_SLOWER
        return EXIT_NOT_JUDGED if any(c.outcome != "judged" for c in self.candidates) else EXIT_OK


def tag_hint(store: "Store", tag: str) -> str | None:
    """'did you mean ...?' naming the current tags spelled like `tag` (difflib's ratio >= 0.6) when no current
    receipt carries it; None when one does, or none is close."""
    import difflib

    tags = [r["tag"] for r in store.query_rows("current_tags")]
    close = [] if tag in tags else difflib.get_close_matches(tag, tags, n=3, cutoff=0.6)
    return ("did you mean " + " or ".join(repr(t) for t in close) + "?") if close else None


def parse_against(against: str) -> str:
    """`tag:main` -> 'main'. Only tag baselines exist: a named receipt is `compare`'s job."""
    if not against.startswith(TAG_PREFIX) or not against[len(TAG_PREFIX):].strip():
        raise UsageError(f"{against!r}: expected tag:NAME, e.g. tag:main (to compare with one named receipt, use "
                         "`receipts compare`)", option="against")
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
                hint = tag_hint(store, tag)
                raise UsageError(f"no current receipt carries the tag {tag!r} (candidates {ref})"
                                 + (f"; {hint}" if hint else ""),
                                 remedy=None if hint else Remedy("tag_runs", values=(("tag", tag),)))
            out += [(ref, rid) for rid in rows["id"]]
        else:
            rid = resolved[ref]
            if isinstance(rid, Exception):  # ReceiptNotFound: a typo is an error (exit 2), not a verdict
                raise rid
            out.append((ref, rid))
    return list({rid: (ref, rid) for ref, rid in out}.values())  # a run named twice is checked once


@dataclass(frozen=True)
class LaneReads:
    """What one read of the candidates' lanes gives: per lane the picked baseline rows (lane_runs rows,
    oldest first) and the floor's (run id, median) pairs, and the picked runs' receipts."""
    picked: Mapping[Lane, list[dict]]
    floor_rows: Mapping[Lane, list[tuple[str, float]]]
    receipts: Mapping[str, StoredReceipt]
    tagged_candidates: Mapping[Lane, int] = field(default_factory=dict)  # candidates among the lane's tagged runs
    tag_hint: str | None = None      # no current receipt carries the tag, and some tag is spelled like it
    # GPU telemetry of the candidates and the picked runs (analysis/telemetry.py), for infrastructure drift
    telemetry: Mapping[str, tuple] = field(default_factory=dict)
    profiles: Mapping[str, dict] = field(default_factory=dict)  # profiled_only: profiled() of candidates and rows


def read_lanes(store: "Store", candidates: Mapping[str, StoredReceipt], *, tag: str, last: int,
               profiled_only: bool = False, series: bool = True) -> LaneReads:
    """The tagged runs of every candidate's lane in one query, and the baseline receipts in one load.
    `profiled_only`: the baseline is the `last` most recent tagged runs with a profile that has steady steps
    (explain's components need one), however far back they are; the floor still reads every tagged run.
    `series`: the baseline receipts with their step series (the gate's evidence reads them; check's verdicts need
    only the stored intervals)."""
    lanes = sorted({lane for r in candidates.values() if (lane := lane_of(r)) is not None}, key=str)
    rows: dict[Lane, list[dict]] = {lane: [] for lane in lanes}
    if lanes:
        for r in lane_run_rows(store, lanes, tag=tag,
                               last=None if profiled_only else max(last, FLOOR_WINDOW) + len(candidates)):
            rows[Lane.from_key(r["lane_key"])].append(r)
    eligible = rows
    found: dict[str, dict] = {}
    if profiled_only:
        from receipts.analysis.profiles import profiled

        found = profiled(store, list(dict.fromkeys([*candidates, *(r["receipt_id"] for lane_rows in rows.values()
                                                                   for r in lane_rows)])))
        eligible = {lane: [r for r in lane_rows if found.get(r["receipt_id"], {}).get("has_steps")]
                    for lane, lane_rows in rows.items()}
        rows = {lane: lane_rows[-(FLOOR_WINDOW + len(candidates)):] for lane, lane_rows in rows.items()}
    picked = {lane: pick_baseline(lane_rows, candidates.keys(), last) for lane, lane_rows in eligible.items()}
    ids = [r["receipt_id"] for chosen in picked.values() for r in chosen]
    own = {lane: sum(r["receipt_id"] in candidates for r in lane_rows) for lane, lane_rows in rows.items()}
    return LaneReads(picked, {lane: _floor_rows(lane_rows, candidates.keys()) for lane, lane_rows in rows.items()},
                     load_many(store, ids, series=series) if ids else {}, own,
                     tag_hint(store, tag) if not any(rows.values()) else None,
                     telemetry.load(store, [*candidates, *ids]), found)


def run_check(store: "Store", refs: Sequence[str], *, against: str, last: int = DEFAULT_LAST,
              each: bool = False, profiled_only: bool = False) -> CheckResult:
    """Resolve the candidates, read each lane's tagged runs and the baseline receipts, then judge each run and
    each lane's runs pooled. `each`: the exit code follows the runs one by one instead of the pool.
    `profiled_only`: the baseline is the most recent profiled tagged runs (read_lanes)."""
    tag = parse_against(against)
    if last < 1:
        raise UsageError(f"{last}: the baseline needs at least 1 run", option="last")
    pairs = resolve_candidates(store, refs)
    # A run's interval is the one stored with its summary (analysis/summary.py: median_interval over the same steady
    # series at ingest): no step series read, no bootstrap recomputed, no numpy.
    candidates = load_many(store, [rid for _, rid in pairs], series=False)
    reads = read_lanes(store, candidates, tag=tag, last=last, profiled_only=profiled_only, series=False)
    checks = tuple(judge(ref, candidates[rid], tag=tag, last=last, reads=reads) for ref, rid in pairs)
    return CheckResult(against, last, checks, pool(checks, candidates), each,
                       *((reads.profiles, reads.telemetry) if profiled_only else (None, None)))


# ---------------------------------------------------------------------------------------- pure
def pick_baseline(lane_rows: Sequence[dict], candidate_ids: Iterable[str], last: int) -> list[dict]:
    """The `last` most recent lane_runs rows that are not candidates, oldest first."""
    skip = set(candidate_ids)
    return [r for r in lane_rows if r["receipt_id"] not in skip][-last:]


def _floor_rows(lane_rows: Sequence[dict], candidate_ids: Iterable[str]) -> list[tuple[str, float]]:
    skip = set(candidate_ids)
    kept = [r for r in lane_rows if r["receipt_id"] not in skip][-FLOOR_WINDOW:]
    return [(r["receipt_id"], r["median_step_ms"]) for r in kept]


def outliers(medians: Mapping[str, float], floor: NoiseFloor) -> dict[str, float]:
    """Runs whose median is an outlier among `medians`, with their robust z-score (see the module doc).

    The scale is the baseline's own MAD, but never less than the lane's noise floor: five runs can agree
    by chance to 0.1%, and a run one floor away from them is ordinary noise, not an outlier."""
    if len(medians) < MIN_RUNS_FOR_OUTLIERS:
        return {}
    center = statistics.median(medians.values())
    sigma = max(MAD_TO_SIGMA * statistics.median(abs(m - center) for m in medians.values()), floor.fraction * center,
                MIN_FLOOR_PCT / 100.0 * center)
    return {rid: abs(m - center) / sigma for rid, m in medians.items() if abs(m - center) / sigma > OUTLIER_Z}


def baseline_for(candidate: StoredReceipt, *, tag: str, last: int, reads: LaneReads) -> Baseline | None:
    """The candidate's baseline by the rules above; None for a rumor (no lane)."""
    lane = lane_of(candidate)
    if lane is None:
        return None
    runs, intervals = [], {}
    for row in reads.picked.get(lane, []):
        r = reads.receipts[row["receipt_id"]]
        why = None
        if r.ended_early:
            why = f"ended early: {r.ended_early}"
        elif (interval := r.step_interval) is None:
            why = "fewer than 2 steady-state steps"
        else:
            intervals[r.id] = interval
        runs.append(BaselineRun(r.id, r.run_name, str(row["run_date"]), row["median_step_ms"], why,
                                r.provenance.get("git_rev")))
    floor = noise_floor(reads.floor_rows.get(lane, []))
    floor = replace(floor, basis=f"{floor.n_runs} run{'s' if floor.n_runs != 1 else ''} tagged {tag}")
    far = outliers({rid: i.median for rid, i in intervals.items()}, floor)
    kept = {rid: i for rid, i in intervals.items() if rid not in far}
    center = statistics.median(i.median for i in kept.values()) if kept else None
    runs = [replace(b, excluded=f"outlier: median {b.median_step_ms:.2f} ms is {far[b.id]:.1f} robust z-scores from "
                                 f"the baseline's {center:.2f} ms (> {OUTLIER_Z:g})") if b.id in far else b for b in runs]
    return Baseline(tag, last, tuple(runs), center, floor, kept)


def no_baseline_message(candidate: StoredReceipt, baseline: Baseline, *, tagged_candidates: int = 0,
                        tag_hint: str | None = None) -> str:
    """Why a candidate has no baseline: its lane's tagged runs cannot be used, or are all being checked themselves
    (`tagged_candidates`), or its lane has none; `tag_hint` when no current receipt anywhere carries the tag."""
    runs, tag = baseline.runs, baseline.tag
    if tag_hint is not None:
        return (f"{candidate.run_name}: no baseline in lane {lane_of(candidate)}: no current receipt carries the tag "
                f"{tag!r}; {tag_hint}")
    if not runs and tagged_candidates:
        return (f"{candidate.run_name}: no baseline in lane {lane_of(candidate)}: its {tagged_candidates} run(s) "
                f"tagged {tag!r} are all among the runs being checked, and a run is never its own baseline: check "
                f"the new runs only (by their own tag or name) against that tag")
    have = (f"its {len(runs)} most recent run(s) tagged {tag!r} cannot be used ("
            + "; ".join(f"{b.run_name}: {b.excluded}" for b in runs) + ")") if runs else \
        f"no current receipt in it carries the tag {tag!r}"
    return (f"{candidate.run_name}: no baseline in lane {lane_of(candidate)}: {have}. Create one by tagging runs of "
            f"this lane {tag!r}")


def rumor_message(candidate: StoredReceipt) -> str:
    missing = candidate.lane.missing
    return (f"{candidate.run_name}: incomplete identity (a rumor, not a comparison): lacks {', '.join(missing)}; "
            "without a lane there is no baseline (give it one with a retag)")


def rumor_remedy(candidate: StoredReceipt) -> Remedy:
    """The retag that gives a rumor the identity parts it lacks (their values the user's to fill in)."""
    return Remedy("retag", candidate.run_name,
                  tuple((OPTION[f], "...") for f in candidate.lane.missing))


def no_baseline_remedy(baseline: Baseline) -> Remedy:
    return Remedy("tag_runs", values=(("tag", baseline.tag),))


def judge(ref: str, candidate: StoredReceipt, *, tag: str, last: int, reads: LaneReads) -> CandidateCheck:
    """The verdict on one candidate against its baseline."""
    own = candidate.step_interval
    base = functools.partial(CandidateCheck, ref=ref, receipt_id=candidate.id, run_name=candidate.run_name,
                             lane=lane_of(candidate), median_step_ms=own.median if own else None,
                             ended_early=candidate.ended_early, git_rev=candidate.provenance.get("git_rev"))
    baseline = baseline_for(candidate, tag=tag, last=last, reads=reads)
    if baseline is None:
        return base(outcome="rumor", message=rumor_message(candidate), remedy=rumor_remedy(candidate))
    if own is None:
        return base(outcome="unmeasured", baseline=baseline, message=(
            f"{candidate.run_name}: fewer than 2 steady-state steps with a step time; nothing to compare"))
    if not baseline.used:
        lane = lane_of(candidate)  # a candidate with a baseline has a lane
        own_runs = reads.tagged_candidates.get(lane, 0) if lane else 0
        # a did-you-mean, or runs that are all candidates, are answered by the message, not by tagging more runs
        plain = reads.tag_hint is None and not (own_runs and not baseline.runs)
        return base(outcome="no_baseline", baseline=baseline, message=no_baseline_message(
            candidate, baseline, tagged_candidates=own_runs, tag_hint=reads.tag_hint),
            remedy=no_baseline_remedy(baseline) if plain else None)
    verdict = decide([baseline.intervals[b.id] for b in baseline.used], [own], baseline.floor, grow="candidate")
    if verdict is None:  # a side without a positive median step time
        return base(outcome="unmeasured", baseline=baseline, message=(
            f"{candidate.run_name}: no positive steady-state step time on one side; nothing to compare"))
    newest = reads.receipts[baseline.used[-1].id]
    found = with_telemetry(drift(newest, candidate), reads.telemetry.get(newest.id, ()),
                           reads.telemetry.get(candidate.id, ()))
    return base(outcome="judged", baseline=baseline, verdict=verdict, message=verdict.why,
                drift={k: v for k, v in found.items() if v})


def pool(checks: Sequence[CandidateCheck], candidates: Mapping[str, StoredReceipt]) -> tuple[PooledCheck, ...]:
    """Per lane, its judged candidates as one group against the lane's baseline: analysis.verdict.decide with
    every candidate run on the B side (the baseline excludes all candidates, so it is the same for each)."""
    lanes: dict[Lane, list[CandidateCheck]] = {}
    for c in checks:
        if c.outcome == "judged" and c.lane is not None and c.baseline is not None:
            lanes.setdefault(c.lane, []).append(c)
    out = []
    for lane, group in lanes.items():
        baseline = group[0].baseline
        assert baseline is not None
        own = [candidates[c.receipt_id].step_interval for c in group]
        verdict = decide([baseline.intervals[b.id] for b in baseline.used], [i for i in own if i is not None],
                         baseline.floor, grow="candidate")
        if verdict is None:
            continue
        out.append(PooledCheck(lane, tuple(c.receipt_id for c in group), tuple(c.run_name for c in group),
                               statistics.median(c.median_step_ms for c in group if c.median_step_ms is not None),
                               baseline, verdict))
    return tuple(out)
