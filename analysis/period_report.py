"""`receipts report --since 7d`: what a team running nightly benchmarks reads each morning, per lane.

For the period (since .. until):
- new change points: those of the lane's history (analysis/history.py) whose first bad run ran in the period,
  with the commits between the last good and the first bad run (analysis/commits.py);
- regressions against the baseline tag: each run of the period that does not carry the tag, checked against the
  lane's tagged runs as `receipts check RUN --against tag:T` does (analysis/check.py), the slower ones listed
  (a lane whose tag has no run says so);
- lanes that stopped receiving runs: runs in the period of the same length before this one, none in this one
  (missing data: a broken nightly job looks like a quiet lane otherwise).
Each item carries the dashboard query that shows it (`receipts dashboard`, then the query).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from receipts.analysis.check import parse_against, run_check
from receipts.analysis.commits import CommitRange
from receipts.analysis.commits import to_json as commits_json
from receipts.analysis.history import LaneHistory, read_history
from receipts.analysis.lanes import Lane
from receipts.analysis.listing import receipt_list
from receipts.errors import UsageError

if TYPE_CHECKING:
    from receipts.store import Store

_SPAN = re.compile(r"^\s*(\d+)\s*([hdw])\s*$")
_UNIT = {"h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: str, *, until: datetime) -> datetime:
    """`7d`, `24h`, `2w` before `until`, or an ISO 8601 date or time (UTC when it names no zone)."""
    m = _SPAN.match(text)
    if m:
        return until - timedelta(**{_UNIT[m.group(2)]: int(m.group(1))})
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"{text!r}: expected a span (7d, 24h, 2w) or an ISO 8601 date or time, e.g. 2026-11-20",
                         option="since") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


@dataclass(frozen=True)
class ChangeItem:
    run_name: str
    receipt_id: str
    run_date: str
    change_pct: float
    pvalue: float
    commits: CommitRange
    link: str


@dataclass(frozen=True)
class RegressionItem:
    run_name: str
    receipt_id: str
    run_date: str
    change_pct: float
    why: str
    commits: CommitRange | None
    link: str


@dataclass(frozen=True)
class LaneReport:
    lane: Lane
    runs_in_period: int
    last_run: str | None              # run name of the lane's newest run
    last_run_date: str | None
    change_points: tuple[ChangeItem, ...] = ()
    regressions: tuple[RegressionItem, ...] = ()
    checked: int = 0                  # runs of the period checked against the baseline tag
    baseline_note: str | None = None  # why the period's runs could not be checked (no run carries the tag)
    stopped: bool = False             # runs in the previous period, none in this one
    link: str = ""

    @property
    def news(self) -> bool:
        return bool(self.change_points or self.regressions or self.stopped)


@dataclass(frozen=True)
class PeriodReport:
    since: datetime
    until: datetime
    against: str
    lanes: tuple[LaneReport, ...] = field(default_factory=tuple)


def _as_utc(value: datetime) -> datetime:
    """A stored run date (UTC, naive) or a given time (any zone) as an aware UTC time."""
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


def _utc(value: datetime | None) -> datetime | None:
    return None if value is None else _as_utc(value)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else _utc(value).isoformat().replace("+00:00", "Z")  # type: ignore[union-attr]


def dashboard_query(view: str, **params: str) -> str:
    return "?" + urlencode({"view": view, **params})


def lane_link(lane: Lane) -> str:
    return dashboard_query("history", **{k: v for k, v in lane.url_params().items() if v is not None})


def period_report(store: "Store", *, since: datetime, until: datetime, against: str = "tag:main",
                  last: int = 10) -> PeriodReport:
    """Every lane with a run in this period or the one of the same length before it, as described above."""
    tag = parse_against(against)
    since, until = _as_utc(since), _as_utc(until)
    if since >= until:
        raise UsageError(f"{_iso(since)} is not before the period's end {_iso(until)}: the period is empty",
                         option="since")
    before = since - (until - since)
    lanes = sorted({Lane.of(r) for r in receipt_list(store) if r["identity_complete"]}, key=str)
    reports: list[LaneReport] = []
    candidates: dict[str, tuple[Lane, str]] = {}  # receipt id -> its lane and run date
    for lane in lanes:
        h = read_history(store, lane)
        dated = [(r, _utc(r.run_date)) for r in h.runs]
        now = [r for r, d in dated if d is not None and since <= d < until]
        earlier = [r for r, d in dated if d is not None and before <= d < since]
        if not now and not earlier:
            continue
        newest = h.runs[-1]
        for r in now:
            if tag not in r.tags:
                candidates[r.id] = (lane, _iso(r.run_date) or "")
        reports.append(LaneReport(lane, len(now), newest.run_name, _iso(newest.run_date),
                                  _change_points(h, since, until) if now else (), stopped=not now,
                                  link=lane_link(lane)))
    regressions, notes, checked = _regressions(store, candidates, against=against, last=last)
    out = [replace(r, regressions=regressions.get(r.lane, ()), checked=checked.get(r.lane, 0),
                   baseline_note=notes.get(r.lane)) for r in reports]
    return PeriodReport(since, until, against, tuple(out))


def _change_points(h: LaneHistory, since: datetime, until: datetime) -> tuple[ChangeItem, ...]:
    """The lane's change points whose first bad run ran in the period."""
    timed = [r for r in h.runs if r.median_step_ms]
    out = []
    for c in h.change_points:
        bad = timed[c.index]
        when = _utc(bad.run_date)
        if when is None or not (since <= when < until):
            continue
        good = timed[c.index - 1]
        out.append(ChangeItem(bad.run_name, bad.id, _iso(when) or "", 100.0 * c.rel_change, c.pvalue, h.commits(c),
                              dashboard_query("compare", a=good.id, b=bad.id)))
    return tuple(out)


def _regressions(store: "Store", candidates: dict[str, tuple[Lane, str]], *, against: str, last: int
                 ) -> tuple[dict[Lane, tuple[RegressionItem, ...]], dict[Lane, str], dict[Lane, int]]:
    """The period's runs without the baseline tag, checked run by run against it: the slower ones per lane, why a
    lane's runs could not be checked, and how many were."""
    if not candidates:
        return {}, {}, {}
    result = run_check(store, list(candidates), against=against, last=last, each=True)
    found: dict[Lane, list[RegressionItem]] = {}
    notes: dict[Lane, str] = {}
    checked: dict[Lane, int] = {}
    for c in result.candidates:
        lane, when = candidates[c.receipt_id]
        if c.outcome != "judged":
            notes.setdefault(lane, c.message)
            continue
        checked[lane] = checked.get(lane, 0) + 1
        if c.verdict_name == "slower" and c.verdict is not None and c.baseline is not None:
            newest = c.baseline.used[-1]
            found.setdefault(lane, []).append(RegressionItem(
                c.run_name, c.receipt_id, when, 100.0 * (c.verdict.ratio - 1.0), c.message, c.commits,
                dashboard_query("compare", a=newest.id, b=c.receipt_id, against=against)))
    return {k: tuple(v) for k, v in found.items()}, notes, checked


def to_json(report: PeriodReport) -> dict[str, Any]:
    def lane(r: LaneReport) -> dict[str, Any]:
        return {
            "lane": r.lane.as_dict(), "runs_in_period": r.runs_in_period, "last_run": r.last_run,
            "last_run_date": r.last_run_date, "stopped": r.stopped, "link": r.link,
            "change_points": [{"run_name": c.run_name, "id": c.receipt_id, "run_date": c.run_date,
                               "change_pct": c.change_pct, "pvalue": c.pvalue, "commits": commits_json(c.commits),
                               "link": c.link} for c in r.change_points],
            "regressions": [{"run_name": g.run_name, "id": g.receipt_id, "run_date": g.run_date,
                             "change_pct": g.change_pct, "why": g.why,
                             "commits": commits_json(g.commits) if g.commits else None, "link": g.link}
                            for g in r.regressions],
            "checked": r.checked, "baseline_note": r.baseline_note,
        }

    lanes = [lane(r) for r in report.lanes]
    return {"since": _iso(report.since), "until": _iso(report.until), "against": report.against,
            "summary": {"lanes": len(lanes), "change_points": sum(len(x["change_points"]) for x in lanes),
                        "regressions": sum(len(x["regressions"]) for x in lanes),
                        "stopped": sum(1 for x in lanes if x["stopped"])},
            "lanes": lanes}
