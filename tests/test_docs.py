"""Every command is documented: in the README, with help text and an example (like sqlite-utils)."""

from __future__ import annotations

from pathlib import Path

import click
import typer.main

from receipts.cli.main import COMMAND_MODULES, app

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def _commands():
    group = typer.main.get_command(app)
    ctx = click.Context(group)
    for name in group.list_commands(ctx):  # commands load lazily (cli/main.py): ask the group, not .commands
        command = group.get_command(ctx, name)
        yield name, command
        for sub_name, sub in getattr(command, "commands", {}).items():
            yield f"{name} {sub_name}", sub


def test_every_command_module_exists():
    import importlib

    for name in COMMAND_MODULES:
        importlib.import_module(f"receipts.cli.{name}")


def test_every_command_is_in_the_readme_with_help():
    names = dict(_commands())
    for required in ("ingest", "list", "show", "compare", "anatomy", "gate", "run", "preflight", "dashboard"):
        assert required in names, required
    for name, command in names.items():
        assert f"receipts {name.split()[0]}" in README, f"`receipts {name}` missing from README"
        assert (command.help or "").strip(), f"`receipts {name}` has no help text"


def test_every_leaf_command_carries_an_example():
    for name, command in _commands():
        if getattr(command, "commands", None):
            continue
        assert "Example:" in (command.help or ""), f"`receipts {name}` help has no 'Example:'"
