"""Options every command shares (--db, --registry), and the single place errors become exit codes."""

from __future__ import annotations

import functools
import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import typer
from rich.console import Console
from rich.markup import escape

from receipts.errors import ReceiptsError
from receipts.schema.registry import Registry, load_registry
from receipts.store import Store, open_store

EXIT_OK, EXIT_REJECTED, EXIT_INPUT, EXIT_REFUSED = 0, 1, 2, 3

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


@dataclass
class Settings:
    db: str
    registry_path: Path | None

    def registry(self, *, strict: bool = False) -> Registry:
        """The merged registry; `strict` (the --strict flag) turns strict mode on over the files' setting."""
        registry = load_registry(self.registry_path)
        return replace(registry, strict=True) if strict else registry

    def store(self, *, read_only: bool = False) -> Store:
        return open_store(self.db, read_only=read_only)


def settings(ctx: typer.Context) -> Settings:
    return ctx.find_root().obj


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")


def handle_errors(fn: Callable) -> Callable:
    """Every user-facing error becomes one 'Error: ...' line and exit code 2; never a traceback."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ReceiptsError as exc:
            err_console.print(f"[bold red]Error:[/] {escape(str(exc))}")  # the message is text, never markup
            raise typer.Exit(exc.exit_code) from None
    return wrapper
