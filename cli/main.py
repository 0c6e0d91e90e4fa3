"""`receipts`: ingest training logs and profiler exports, compare only like with like, gate claims.

Commands load lazily: `receipts --help` and `receipts --version` import typer and nothing else (no
polars, DuckDB, SciPy or SQLAlchemy), so a CI step or a shell completion starts in a fraction of the
time; `receipts gate ...` imports only the gate's module and what it needs. The top-level help lists
each command with the summary in COMMANDS; tests/test_packaging.py checks each summary against the
first line of the command's own docstring, so the two cannot drift apart.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Optional

import click
import typer
from typer.core import TyperGroup

from receipts import __version__

# command -> (module under receipts.cli with a register(app) function, one-line summary for `--help`).
# Listed here so the layout shows every command, in the order `receipts --help` shows them.
COMMANDS: dict[str, tuple[str, str]] = {
    "ingest": ("ingest_cmd", "Ingest files; each becomes one receipt (or anatomy attached to one). Idempotent."),
    "list": ("read_cmds", "List receipts with identity and steady-state step time; rumors (incomplete identity) are "
                          "marked."),
    "show": ("read_cmds", "Show one receipt: identity with alias resolution, window, steady state, memory, env, "
                          "sources."),
    "retag": ("retag_cmd", "Change a receipt's claimed identity; raw values are re-resolved through the registry, "
                           "and the old identity is kept (who, when, why) in an append-only history that `show` "
                           "prints."),
    "compare": ("compare_cmd", "Compare B against A: faster / slower / no change / inconclusive against the lane's "
                               "noise floor. Exit 3 when refused (identity incomplete or not the same lane)."),
    "anatomy": ("anatomy_cmd", "Step-time anatomy by category (GEMM, attention, MoE, NCCL, memcpy, idle, exposed "
                               "comm)."),
    "gate": ("gate_cmd", "Check benchmark claims against stored receipts. Exit 1 when any claim is rejected."),
    "check": ("check_cmd", "Check runs against their lane's recent baseline (e.g. tag:main). Exit 1 when any run is "
                           "slower beyond the noise, 3 when a run has no comparable baseline."),
    "run": ("run_cmd", "Run COMMAND with provenance, env overlay and topology written to run.log before it starts; "
                       "tee its output; forward SIGINT/SIGTERM; exit with its exit code."),
    "preflight": ("preflight_cmd", "Check topology (NV# between GPUs), NUMA balancing, env knobs and paths; exit 2 "
                                   "on errors."),
    "dashboard": ("dashboard_cmd", "Serve the Streamlit dashboard: lanes, receipt, anatomy, compare, lane history."),
    "push": ("db_cmds", "Copy receipts (and attached anatomy) from --db to the shared store; ones already there are "
                        "skipped."),
    "db": ("db_cmds", "Create, upgrade and inspect a store's schema (DuckDB file or PostgreSQL)."),
}
# Command modules, each with register(app). Listed here so the layout shows every command.
COMMAND_MODULES = ("ingest_cmd", "read_cmds", "retag_cmd", "compare_cmd", "anatomy_cmd", "gate_cmd", "check_cmd",
                   "run_cmd", "preflight_cmd", "dashboard_cmd", "db_cmds")
# A module listed in COMMAND_MODULES without a COMMANDS entry is imported whenever the command list is
# needed: it works, only start-up pays for it (tests/test_packaging.py fails until the entry is added).


class LazyGroup(TyperGroup):
    """A Typer group that imports a command's module only when that command runs (or shows its help)."""

    _listing = False  # True while the top-level help lists the commands: summaries, no imports
    _loaded: frozenset[str] = frozenset()

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._load_unlisted()
        return list(dict.fromkeys([*COMMANDS, *self.commands]))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            self._load_unlisted()
        elif cmd_name not in self.commands:
            if self._listing:
                return click.Command(cmd_name, help=COMMANDS[cmd_name][1], short_help=COMMANDS[cmd_name][1])
            self._load(COMMANDS[cmd_name][0])
        return self.commands.get(cmd_name)

    def _load_unlisted(self) -> None:
        listed = {module for module, _ in COMMANDS.values()}
        for module in COMMAND_MODULES:
            if module not in listed:
                self._load(module)

    def _load(self, module: str) -> None:
        if module in self._loaded:
            return
        self._loaded = self._loaded | {module}
        sub = typer.Typer()
        importlib.import_module(f"receipts.cli.{module}").register(sub)
        for name, command in typer.main.get_group(sub).commands.items():
            self.commands.setdefault(name, command)

    def format_help(self, ctx: click.Context, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    name="receipts",
    cls=LazyGroup,
    help="A warehouse for GPU training-run receipts. Exit codes: 0 ok, 1 gate rejected, 2 usage/input error, "
         "3 comparison refused.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's plain help for the command list: rendering it with rich doubles start-up
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"receipts {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    db: str = typer.Option(None, "--db", envvar="RECEIPTS_DB", show_envvar=True,
                           help="Store: a DuckDB file path (default ./receipts.duckdb) or postgresql://user@host/db."),
    registry: Optional[Path] = typer.Option(None, "--registry", help="Extra registry TOML merged over the shipped one "
                                                                     "and ./receipts.toml."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    from receipts.cli.context import Settings
    from receipts.store import default_url

    ctx.obj = Settings(db=db or default_url(), registry_path=registry)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
