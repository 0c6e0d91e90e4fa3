"""A lane's history: its current runs in run order, each with its median, its moving-block bootstrap
interval, its z-score against the lane's noise floor, and whether a change point starts there.

`history` is pure (the lane's run rows and each run's interval in, a LaneHistory out); `read_history` reads
them through sql/lane_runs.sql and the stored summaries (the step series only for a run without one);
`resolve_lane` turns what a user typed (a receipt reference, or a lane written 'HOST PRESET REGIME') into a Lane.

Run order: the run's own start time from its log or RECEIPT header (receipts.started_at) when it has
one, else the time it was ingested (to the microsecond), ties in the store's write order (ingest_seq); each run
says which (run_date_source 'header' | 'ingest') and the history says which for all (LaneHistory.order).
Change points: analysis.changepoint (E-divisive means with t-test confirmation, after Apache Otava)
over the series of run medians. z = log(median / lane center) / noise floor, the lane center being the
median of the run medians the floor was measured from: |z| > 2 is a run outside the lane's usual noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Mapping

import polars as pl

from receipts.analysis.commits import CommitRange, between
from receipts.analysis.changepoint import MAX_PVALUE, MIN_MAGNITUDE, ChangePoint, change_points
from receipts.analysis.lanes import Lane, floors_from_runs, lane_named, lane_of, lane_runs
from receipts.analysis.noise import FLOOR_WINDOW, NoiseFloor
from receipts.analysis import summary
from receipts.analysis.stats import RunInterval, median_interval
from receipts.analysis.straggler_reports import stored_report_many

if TYPE_CHECKING:
    from receipts.store import Store


@dataclass(frozen=True)
class HistoryRun:
    id: str
    run_name: str
    run_date: datetime | None       # UTC
    run_date_source: str            # 'header' (the run's own start) | 'ingest' (when it was ingested)
    n_steps: int                    # steady steps
    median_step_ms: float | None
    ci_low: float | None            # the median's moving-block bootstrap interval (ms)
    ci_high: float | None
    block_length: int | None        # steps per bootstrap block
    z: float | None                 # log(median / lane center) / noise floor
    change_point: bool              # a change point starts at this run
    change_pvalue: float | None     # its p-value (analysis/changepoint.py; change points only)
    change_pct: float | None        # mean after / mean before - 1, percent (change points only)
    git_rev: str | None
    tags: tuple[str, ...]
    # From the run's newest multi-rank export (analysis/stragglers.py); empty / None without one.
    straggler_ranks: tuple[int, ...] = ()
    straggler_impact_pct: float | None = None


@dataclass(frozen=True)
class LaneHistory:
    lane: Lane
    tag: str | None
    floor: NoiseFloor
    runs: tuple[HistoryRun, ...]
    change_points: tuple[ChangePoint, ...]  # indices into the runs that have a median
    method: str

    def commits(self, point: ChangePoint) -> CommitRange:
        """The last good and first bad runs around a change point, and the commits between them."""
        timed = [r for r in self.runs if r.median_step_ms]
        good, bad = timed[point.index - 1], timed[point.index]
        return between(good.run_name, good.git_rev, bad.run_name, bad.git_rev)

    @property
    def order(self) -> str:
        """Where the run order comes from: 'runs' (every run's own start), 'ingest' (none gave one: when each was
        ingested, then the store's write order) or 'mixed'."""
        return order_source(r.run_date_source for r in self.runs)


def order_source(sources) -> str:
    """'runs', 'ingest' or 'mixed' for the run_date_source of each run ('header' | 'ingest')."""
    seen = set(sources)
    return "ingest" if seen == {"ingest"} else "mixed" if "ingest" in seen else "runs"


def history(lane: Lane, rows: pl.DataFrame, intervals: Mapping[str, RunInterval | None], floor: NoiseFloor, *,
            tag: str | None = None, max_pvalue: float = MAX_PVALUE,
            min_magnitude: float = MIN_MAGNITUDE, stragglers: Mapping[str, dict] | None = None) -> LaneHistory:
    """rows: lane_runs rows of one lane in run order; intervals: each receipt's median_interval of its steady step
    times (steady_intervals); stragglers: stored straggler reports per receipt id (those with a multi-rank export)."""
    stragglers = stragglers or {}
    timed = [r for r in rows.iter_rows(named=True) if r["median_step_ms"] is not None and r["median_step_ms"] > 0]
    points = change_points([r["median_step_ms"] for r in timed], max_pvalue=max_pvalue, min_magnitude=min_magnitude)
    at = {timed[c.index]["receipt_id"]: c for c in points}
    center = floor.center_ms
    out = []
    for r in rows.iter_rows(named=True):
        rid, ms = r["receipt_id"], r["median_step_ms"]
        interval = intervals.get(rid)
        z = (math.log(ms / center) / floor.fraction if ms and center and floor.fraction > 0 else None)
        cp = at.get(rid)
        out.append(HistoryRun(
            rid, r["run_name"], r["run_date"], r["run_date_source"], int(r["n_steps"]), ms,
            interval.ci_low if interval else None, interval.ci_high if interval else None,
            interval.block_length if interval else None, z, cp is not None,
            cp.pvalue if cp else None, 100.0 * cp.rel_change if cp else None,
            r["git_rev"], tuple(r["tags"] or ()), *_straggler_fields(stragglers.get(rid))))
    method = (f"change points: E-divisive means split, t-test confirmation (pooled, and against the runs before the "
              f"cut; the smaller p doubled) p < {max_pvalue:g} and a change of at least {100 * min_magnitude:g}% "
              f"(Apache Otava's method) over the run medians; intervals: "
              f"moving-block bootstrap of each run's median; z against the noise floor ({floor.note})")
    return LaneHistory(lane, tag, floor, tuple(out), points, method)


def _straggler_fields(report: dict | None) -> tuple[tuple[int, ...], float | None]:
    named = (report or {}).get("stragglers") or []
    return tuple(s["rank"] for s in named), (sum(s["impact_pct"] for s in named) if named else None)


def read_history(store: "Store", lane: Lane, *, tag: str | None = None) -> LaneHistory:
    """The lane's current runs (carrying `tag` when given) and their step series, then `history`."""
    rows = lane_runs(store, [lane], tag=tag)
    floor = floors_from_runs(rows.tail(FLOOR_WINDOW), [lane])[lane]  # the floor everything else uses: last 20
    ids = rows["receipt_id"].to_list()
    return history(lane, rows, steady_intervals(store, ids), floor, tag=tag, stragglers=stored_report_many(store, ids))


def steady_intervals(store: "Store", ids: list[str]) -> dict[str, RunInterval | None]:
    """Each receipt's moving-block bootstrap interval of its steady median: the one stored with its summary at
    ingest, else computed from its steady step times (a receipt stored before summaries, or under an older rule).
    Over a lane of 278 runs the series took 1.1 s to read and bootstrap again."""
    stored = summary.stored_many(store, ids)
    out = {rid: summary.parts(s, "step_ms")[1] for rid, s in stored.items()}
    need = [i for i in ids if i not in stored]
    if need:
        steps = store.query("steady_steps_many", {"ids": need})
        for rid, (step_ms, _) in summary.series_by_receipt(steps, need).items():
            out[rid] = median_interval(step_ms)
    return out


def resolve_lane(store: "Store", ref: str) -> Lane:
    """A receipt reference (id, id prefix, run name) gives that receipt's lane; 'HOST PRESET REGIME'
    (separated by spaces or ' · ', as `list` and the dashboard write lanes) names a lane directly."""
    from receipts.errors import ReceiptNotFound, UsageError

    try:
        rid = store.resolve(ref)
    except ReceiptNotFound as err:
        named = lane_named(ref)
        if named is not None:
            return named
        raise UsageError(f"{err}; a lane is written 'HOST_LINEAGE PRESET_FAMILY LAUNCH_REGIME' "
                         f"(the canonical values `receipts list` shows)") from None
    from receipts.analysis.record import load

    r = load(store, rid)
    lane = lane_of(r)
    if lane is None:
        missing = ", ".join(Lane.of(r).missing)
        raise UsageError(f"{r.run_name} ({rid[:12]}) is a rumor (lacks {missing}): it belongs to no lane")
    return lane
