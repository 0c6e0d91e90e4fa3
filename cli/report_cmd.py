"""`receipts report --since 7d`: per lane, the period's new change points, regressions against the baseline tag and
lanes that stopped receiving runs, as markdown (an issue body) or JSON (analysis/period_report.py builds it)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Optional

import typer

from receipts.cli.context import handle_errors, print_json, settings
from receipts.errors import UsageError
from receipts.schema.lane import display

if TYPE_CHECKING:  # the report's statistics (numpy, polars) load when it is made, not for `report --help`
    from receipts.analysis.period_report import PeriodReport

MARKER = "<!-- receipts-report -->"  # a workflow finds its issue (or its last comment) by this line
ENV_DASHBOARD = "RECEIPTS_DASHBOARD_URL"


def register(app: typer.Typer) -> None:
    app.command("report")(report)


@handle_errors
def report(
    ctx: typer.Context,
    since: str = typer.Option("7d", "--since", help="The period's start: a span back from --until (24h, 7d, 2w) or "
                                                    "an ISO 8601 date or time (UTC when no zone)."),
    until: Optional[str] = typer.Option(None, "--until", help="The period's end (ISO 8601; default now)."),
    against: str = typer.Option("tag:main", "--against", help="Each lane's baseline: tag:NAME, as `check` takes it."),
    last: int = typer.Option(10, "--last", min=1, help="Baseline runs per checked run (the most recent)."),
    fmt: str = typer.Option("markdown", "--format", metavar="markdown|json", help="markdown (an issue body) or json."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output (--format json)."),
    dashboard_url: Optional[str] = typer.Option(None, "--dashboard-url", envvar=ENV_DASHBOARD,
                                                help="Where the team's dashboard is served: links become absolute "
                                                     "(default: dashboard queries, relative)."),
) -> None:
    """Per lane, for the period: new change points (with their commit range), runs slower than the lane's
    baseline tag, and lanes that stopped receiving runs; each with its dashboard link.

    Example: receipts report --since 7d --against tag:main --format markdown > report.md
    """
    from receipts.analysis.period_report import parse_since, period_report, to_json

    fmt = "json" if as_json else fmt.lower()
    if fmt not in ("markdown", "json"):
        raise UsageError(f"{fmt!r}: expected markdown or json", option="format")
    end = datetime.now(timezone.utc)
    if until is not None:
        try:
            end = datetime.fromisoformat(until.replace("Z", "+00:00"))
        except ValueError:
            raise UsageError(f"{until!r}: expected an ISO 8601 date or time, e.g. 2026-11-28", option="until") from None
        end = end if end.tzinfo else end.replace(tzinfo=timezone.utc)
    with settings(ctx).store(read_only=True) as store:
        result = period_report(store, since=parse_since(since, until=end), until=end, against=against, last=last)
    base = dashboard_url.rstrip("/") + "/" if dashboard_url else ""
    out = to_json(result)
    _absolute(out, base)
    if fmt == "json":
        print_json(out)
    else:
        typer.echo(to_markdown(result, out), nl=False)


def _absolute(out: dict[str, Any], base: str) -> None:
    for lane in out["lanes"]:
        lane["link"] = base + lane["link"]
        for item in (*lane["change_points"], *lane["regressions"]):
            item["link"] = base + item["link"]


def _md(text: object) -> str:
    return str(text).replace("|", "\\|").replace("<", "&lt;")


def to_markdown(result: PeriodReport, out: dict[str, Any]) -> str:
    """An issue body: the summary line, then per lane with news its change points, regressions and silence; the
    quiet lanes in one line at the end."""
    s = out["summary"]
    lines = [MARKER, f"### receipts report {out['since'][:10]} .. {out['until'][:10]}", "",
             f"{s['lanes']} lane(s) with runs in this period or the one before: {s['change_points']} new change "
             f"point(s), {s['regressions']} regression(s) against `{_md(result.against)}`, {s['stopped']} lane(s) "
             "stopped receiving runs.", ""]
    quiet = []
    for lane in out["lanes"]:
        name = display(lane["lane"].values())
        if not (lane["change_points"] or lane["regressions"] or lane["stopped"]):
            quiet.append(f"[{_md(name)}]({lane['link']}) ({lane['runs_in_period']} run(s))")
            continue
        lines.append(f"#### [{_md(name)}]({lane['link']})")
        lines.append(f"{lane['runs_in_period']} run(s) in the period; newest {_md(lane['last_run'])} "
                     f"({lane['last_run_date']})")
        if lane["stopped"]:
            lines.append(f"- **stopped receiving runs**: none in this period, the last {_md(lane['last_run'])} at "
                         f"{lane['last_run_date']} (missing data: is the nightly job running?)")
        for c in lane["change_points"]:
            lines.append(f"- **change point** at [{_md(c['run_name'])}]({c['link']}) ({c['run_date']}): "
                         f"{c['change_pct']:+.2f}% (p={c['pvalue']:.1g}); {_md(c['commits']['note'])}")
        for g in lane["regressions"]:
            commits = f"; {_md(g['commits']['note'])}" if g["commits"] else ""
            lines.append(f"- **slower** [{_md(g['run_name'])}]({g['link']}) ({g['run_date']}): "
                         f"{g['change_pct']:+.2f}% against `{_md(result.against)}`{commits}")
        if lane["baseline_note"]:
            lines.append(f"- not checked: {_md(lane['baseline_note'])}")
        lines.append("")
    if quiet:
        lines += ["Quiet lanes (runs, no change point, no regression): " + "; ".join(quiet), ""]
    lines.append(f"<sub>receipts report --since {_md(out['since'])} --until {_md(out['until'])} --against "
                 f"{_md(result.against)}: change points of each lane's history (E-divisive means with a t-test), "
                 "each run without the baseline tag checked as `receipts check` does.</sub>")
    return "\n".join(lines) + "\n"
