"""`receipts`: ingest training logs and profiler exports, compare only like with like, gate claims."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Optional

import typer

from receipts import __version__
from receipts.cli.context import Settings
from receipts.store import default_url

app = typer.Typer(
    name="receipts",
    help="A warehouse for GPU training-run receipts. Exit codes: 0 ok, 1 gate rejected, 2 usage/input error, "
         "3 comparison refused.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Command modules, each with register(app). Listed here so the layout shows every command.
COMMAND_MODULES = ("ingest_cmd", "read_cmds", "retag_cmd", "compare_cmd", "anatomy_cmd", "gate_cmd", "run_cmd",
                   "preflight_cmd", "dashboard_cmd", "db_cmds")


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
    ctx.obj = Settings(db=db or default_url(), registry_path=registry)


for _name in COMMAND_MODULES:
    importlib.import_module(f"receipts.cli.{_name}").register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
