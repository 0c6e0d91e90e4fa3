"""`receipts preflight`: lint this node and the launch environment before a run (seed 003)."""

from __future__ import annotations

import os
from typing import List, Optional

import typer

from receipts.analysis.preflight import run_preflight
from receipts.launch.provenance import preflight_facts
from receipts.cli.context import console, handle_errors, print_json

_MARK = {"error": "[bold red]error[/]", "warning": "[yellow]warning[/]"}


def register(app: typer.Typer) -> None:
    app.command("preflight")(preflight)


@handle_errors
def preflight(
    regime: Optional[str] = typer.Option(None, "--regime", help='Launch regime, e.g. "fsdp2/regional-compile".'),
    compile_window_s: Optional[float] = typer.Option(None, "--compile-window-s",
                                                     help="Longest expected compile before the first collective, s."),
    expect_cuda: Optional[str] = typer.Option(None, "--expect-cuda", help="Expected torch CUDA suffix, e.g. cu132."),
    data_path: List[str] = typer.Option([], "--data-path", help="Training data directory (repeatable)."),
    python: Optional[str] = typer.Option(None, "--python", help="The training interpreter (default: this one)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Check topology (NV# between GPUs), NUMA balancing, env knobs and paths; exit 2 on errors.

    Example: receipts preflight --regime "fsdp2/regional-compile" --compile-window-s 1800 --expect-cuda cu132 --data-path /mnt/data
    """
    facts = preflight_facts(environ=dict(os.environ), regime=regime, compile_window_s=compile_window_s,
                            expect_cuda=expect_cuda, data_paths=tuple(data_path), python=python)
    report = run_preflight(facts)
    if as_json:
        print_json(report.to_dict())
    else:
        for f in report.findings:
            console.print(f"{_MARK[f.severity]} {f.rule}: {f.reason}", markup=True)
            console.print(f"    fix: {f.fix}", markup=False)
        unchecked = f"; not checked, nothing to read: {', '.join(report.unchecked)}" if report.unchecked else ""
        console.print(f"{len(report.errors)} error(s), {len(report.findings) - len(report.errors)} warning(s); "
                      f"{len(report.checked)} of {len(report.checked) + len(report.unchecked)} rules checked{unchecked}",
                      markup=False)
    if not report.ok:
        raise typer.Exit(2)
