"""`receipts export --format bmf|pytorch-v3`: a lane's steady-state measures for Bencher or PyTorch's
benchmark database (analysis/export.py builds them; this module parses the options and prints)."""

from __future__ import annotations

from datetime import datetime
from typing import Optional

import typer
from rich.markup import escape

from receipts.analysis.check import tag_hint
from receipts.analysis.export import exported_runs, lane_name, mixed_configurations, selection, to_bmf, to_pytorch_v3
from receipts.cli.context import err_console, handle_errors, print_json, settings
from receipts.errors import UsageError

EXPORT_FORMATS = ("bmf", "pytorch-v3")


def register(app: typer.Typer) -> None:
    app.command("export")(export)


@handle_errors
def export(
    ctx: typer.Context,
    fmt: str = typer.Option(..., "--format", metavar="bmf|pytorch-v3",
                            help="bmf: Bencher Metric Format, one benchmark per lane (its newest run); pytorch-v3: "
                                 "PyTorch's benchmark v3 records, one per lane and measure, a value per run."),
    lane: Optional[str] = typer.Option(None, "--lane", help="One lane, written 'HOST_LINEAGE PRESET_FAMILY "
                                                            "LAUNCH_REGIME'; or text the lanes' host lineage, preset or "
                                                            "regime contains."),
    tag: Optional[str] = typer.Option(None, "--tag", help="Only runs carrying this lineage tag (e.g. main), as check's "
                                                          "--against tag:T selects a baseline."),
    last: Optional[int] = typer.Option(None, "--last", min=1, help="Only each lane's N most recent selected runs."),
    since: Optional[str] = typer.Option(None, "--since", help="Only runs started (else ingested) at or after this "
                                                              "date or time (ISO 8601, e.g. 2026-11-20 or "
                                                              "2026-11-20T10:00:00Z; UTC when no zone)."),
) -> None:
    """Export steady-state step time, tokens/s, peak allocated memory and exposed communication, with the
    runs' intervals, as Bencher Metric Format or PyTorch benchmark v3 JSON; which runs each benchmark holds is
    said on stderr (v3 records keep a lane's runs of different tags apart).

    Example: receipts export --format bmf --tag main --since 2026-11-20 > results.json && bencher run --file results.json --adapter json
    """
    fmt = fmt.lower()
    if fmt not in EXPORT_FORMATS:
        raise UsageError(f"--format must be bmf or pytorch-v3 (got {fmt!r})")
    when = None
    if since is not None:
        try:
            when = datetime.fromisoformat(since.replace("Z", "+00:00"))
        except ValueError:
            raise UsageError(f"--since {since!r}: expected an ISO 8601 date or time, e.g. 2026-11-20 or "
                             "2026-11-20T10:00:00Z") from None
    with settings(ctx).read_store() as store:
        runs = exported_runs(store, lane=lane, since=when, tag=tag, last=last)
        hint = tag_hint(store, tag) if tag is not None and not runs else None
    if not runs:
        err_console.prose("no current receipt with a full identity matches (rumors have no lane and are not "
                          "exported)" + (f"; no current receipt carries the tag {tag!r}: {hint}" if hint else ""))
    for line in selection(runs, fmt):
        err_console.prose(f"exported {escape(line)}")
    for mixed, tags in mixed_configurations(runs).items():
        err_console.print(f"warning: lane {lane_name(mixed)} mixes runs tagged {'; '.join(tags)}: its values pool "
                          "configurations; --tag T exports one", markup=False, soft_wrap=True)
    print_json(to_bmf(runs) if fmt == "bmf" else to_pytorch_v3(runs))
