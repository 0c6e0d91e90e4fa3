"""`receipts run`: launch a training command with a RECEIPT header/footer, then ingest the run."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape

from receipts.cli.claim_options import claim_options
from receipts.launch.launcher import run as launch
from receipts.schema.lane import IdentityClaim
from receipts.cli.context import err_console, handle_errors, settings
from receipts.cli.ingest_cmd import _say as say_outcome, _say_registry_warnings as say_registry_warnings


def register(app: typer.Typer) -> None:
    app.command("run", context_settings={"allow_interspersed_args": False})(run)


@handle_errors
@claim_options("Host lineage (registry name or alias).", "Preset name or alias.",
               'Launch regime, e.g. "fsdp2/no-compile".')
def run(
    ctx: typer.Context,
    command: List[str] = typer.Argument(..., metavar="-- COMMAND...", help="The command to launch, after `--`."),
    claim: IdentityClaim = IdentityClaim(),  # --host-lineage, --preset, --regime: cli/claim_options.py
    run_name: Optional[str] = typer.Option(None, "--run-name", help="Receipt name (default: the run directory's name)."),
    tag: List[str] = typer.Option([], "--tag", help="Lineage tag (repeatable). A tag, never identity."),
    run_dir: Optional[Path] = typer.Option(None, "--run-dir", help="Where run.log goes (default ./runs/<name>)."),
    no_ingest: bool = typer.Option(False, "--no-ingest", help="Only write run.log; do not ingest it."),
    quiet: bool = typer.Option(False, "--quiet", help="Do not echo the child's output (run.log still gets it)."),
    telemetry_interval: float = typer.Option(1.0, "--telemetry-interval", min=0.05, metavar="SECONDS",
                                             help="Seconds between GPU telemetry samples (NVML: clocks, power, "
                                                  "temperature, throttle reasons, ECC, Xid), taken beside the run."),
    no_telemetry: bool = typer.Option(False, "--no-telemetry", help="Sample no GPU telemetry."),
    telemetry_series: bool = typer.Option(False, "--telemetry-series",
                                          help="Keep every telemetry sample in RUN_DIR/telemetry.csv (the footer "
                                               "always carries the per-rank summary)."),
) -> None:
    """Run COMMAND with provenance, env overlay and topology written to run.log before it starts;
    tee its stdout and stderr (kept apart); forward INT/TERM/HUP/QUIT/USR1/USR2; exit with its exit
    code (127 when the command is not found). A third-party script's own step lines (nanochat,
    Megatron, torchtitan, modded-nanogpt) become the receipt's steps.

    Example: receipts run --host-lineage h200-device-x2 --preset toy_fsdp2_v1 --regime "fsdp2/no-compile" -- torchrun --standalone --nproc_per_node=2 train.py
    """
    cfg = settings(ctx)
    result = launch(command=list(command), run_dir=run_dir, claim=claim,
                    run_name=run_name, tags=tuple(tag), ingest=not no_ingest, db_url=cfg.db,
                    registry_path=cfg.registry_path, echo=None if quiet else sys.stdout.buffer,
                    echo_err=None if quiet else sys.stderr.buffer,
                    telemetry_interval_s=None if no_telemetry else telemetry_interval, telemetry_series=telemetry_series)
    how = f"signal {result.signal_name}" if result.signal_name else f"exit code {result.exit_code}"
    err_console.print(f"run finished ({how}); log: {escape(str(result.log_path))}")
    if result.launch_error:
        err_console.print(f"[bold red]Error:[/] {escape(result.launch_error)} (run.log kept, nothing ingested)")
    said: dict[str, list[str]] = {}
    for outcome in result.ingested:
        say_outcome(outcome, debug=False, registry_warnings=said)  # the same lines and warnings as `receipts ingest RUN_DIR`
    say_registry_warnings(said)
    if result.ingest_error:
        # The run's own outcome is the exit code; a failed ingest is said here, on stderr, and the
        # run directory can be ingested later with `receipts ingest`.
        err_console.print(f"[bold red]Error:[/] ingest failed, the store is unchanged: {escape(result.ingest_error)}; "
                          f"ingest it later with `receipts ingest {escape(str(result.run_dir))}`")
    raise typer.Exit(result.exit_code)
