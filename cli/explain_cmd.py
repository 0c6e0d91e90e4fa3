"""`receipts explain RUN --against tag:T | RUN`: why a run differs from its baseline, component by component."""

from __future__ import annotations

from dataclasses import replace
from typing import List, Optional

import typer

from receipts.analysis.check import DEFAULT_LAST
from receipts.analysis.explain import LEVELS
from receipts.analysis.explain_run import explain_in_store, to_json
from receipts.cli.context import handle_errors, print_json, print_jsonl, settings
from receipts.cli.explain_render import echo, text_lines
from receipts.cli.output import Column, chosen_format, emit, format_option
from receipts.cli.words import with_remedy

# TSV / CSV: one row per component (the --json contract's fields)
COMPONENT_COLUMNS = [Column(k) for k in ("level", "name", "category", "baseline_ms_per_step", "candidate_ms_per_step",
                                         "delta_ms_per_step", "share", "verdict", "evidence", "presence", "noise_ms",
                                         "q_value", "runs_needed", "calls_delta_per_step")]


def register(app: typer.Typer) -> None:
    app.command("explain")(explain)


@handle_errors
def explain(
    ctx: typer.Context,
    run: str = typer.Argument(..., help="Candidate receipt (id, id prefix or run name); it needs a profile attached."),
    against: str = typer.Option(..., "--against", help="Baseline: tag:NAME (the lane's most recent profiled runs "
                                                       "carrying the tag, as `check` picks them) or one receipt "
                                                       "(pairwise)."),
    last: int = typer.Option(DEFAULT_LAST, "--last", min=1, help="Baseline runs for tag:NAME: the most recent with a "
                                                                 "profile attached."),
    level: Optional[List[str]] = typer.Option(None, "--level", help=f"Levels to show, repeatable: "
                                                                    f"{', '.join(LEVELS)} (default: all). Every "
                                                                    f"level is tested either way: one verdict per "
                                                                    f"component."),
    show_all: bool = typer.Option(False, "--all", help="List every component, not only the changed ones."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output (--format json)."),
    fmt: Optional[str] = format_option(piped="table"),
) -> None:
    """Explain a run's step time against its baseline: the step-time verdict as `check` gives it, then the
    components (categories, kernels, NVTX ranges, ranks) that moved beyond their own run-to-run noise, largest
    first, and what they leave unexplained. Exit 3 when refused (no profile, no baseline, not the same lane).

    Example: receipts explain run_42 --against tag:main --last 10

    Text on a terminal and in a pipe (80 columns); --format tsv or csv gives one row per component.
    """
    fmt = chosen_format(fmt, as_json=as_json, piped="table")
    with settings(ctx).read_store() as store:
        result = explain_in_store(store, run, against=against, last=last, levels=tuple(level or LEVELS))
    if result.refusal:  # its way out said as this command line's command
        result = replace(result, refusal=with_remedy(result.refusal, result.remedy))
    report = to_json(result)
    if fmt == "json":
        print_json(report)
    elif fmt == "jsonl":
        print_jsonl([report])
    elif fmt in ("tsv", "csv"):
        emit(report["components"], COMPONENT_COLUMNS, fmt)
    else:
        echo(text_lines(result, show_all=show_all))
    raise typer.Exit(result.exit_code)
