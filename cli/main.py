"""`receipts`: ingest training logs and profiler exports, compare only like with like, gate claims.

Commands load lazily: `receipts --help` and `receipts --version` import typer and nothing else (no
polars, DuckDB, SciPy or SQLAlchemy), so a CI step or a shell completion starts in a fraction of the
time; `receipts gate ...` imports only the gate's module and what it needs. The top-level help lists
each command with the first paragraph of its docstring, read from the module's source with `ast`
(milliseconds) rather than by importing it; tests/test_packaging.py checks that this is the same text
the loaded command shows.
"""

from __future__ import annotations

import gc
import os
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any, NamedTuple, Optional, get_args

import typer
from typer.core import TyperCommand, TyperGroup

from receipts import __version__
from receipts.errors import RegistryError
from receipts.cli.allocator import return_freed_memory_at_once
from receipts.cli.termination import interrupted_exit_code, stop_like_ctrl_c
from receipts.cli.lean_imports import leave_pandas_out, plain_values_first

class Command(NamedTuple):
    """One command: the module under receipts.cli whose register(app) adds it, and the function or Typer app
    that implements it (its docstring, or the app's help=, is the command's summary in `receipts --help`)."""

    module: str
    attr: str


# Every command, in the order `receipts --help` shows them. Listed here so the layout shows every command; the
# help text itself stays in the command's docstring (read without importing: _summary). A command's module is
# imported when that command runs; one that cannot be imported, or registers other commands than listed here,
# is a RegistryError naming it.
COMMANDS: dict[str, Command] = {
    "ingest": Command("ingest_cmd", "ingest"),
    "list": Command("read_cmds", "list_receipts"),
    "show": Command("read_cmds", "show"),
    "retag": Command("retag_cmd", "retag"),
    "compare": Command("compare_cmd", "compare"),
    "explain": Command("explain_cmd", "explain"),
    "history": Command("history_cmd", "history"),
    "anatomy": Command("anatomy_cmd", "anatomy"),
    "stragglers": Command("stragglers_cmd", "stragglers"),
    "gate": Command("gate_cmd", "gate"),
    "check": Command("check_cmd", "check"),
    "export": Command("export_cmd", "export"),
    "report": Command("report_cmd", "report"),
    "run": Command("run_cmd", "run"),
    "preflight": Command("preflight_cmd", "preflight"),
    "estimate": Command("estimate_cmd", "estimate"),
    "dashboard": Command("dashboard_cmd", "dashboard"),
    "push": Command("db_cmds", "push"),
    "db": Command("db_cmds", "db_app"),
}
COMMAND_MODULES = tuple(dict.fromkeys(command.module for command in COMMANDS.values()))


class LazyGroup(TyperGroup):
    """A Typer group that imports a command's module only when that command runs (or shows its help).

    Typer's own classes only, never `click`: recent Typer vendors click, so a slim install has no click
    package to import (tests/test_packaging.py runs the CLI with click absent). `ctx` is typer's Context."""

    _listing = False  # True while the top-level help lists the commands: summaries, no imports
    _loaded: frozenset[str] = frozenset()
    _freezing = False  # main() froze the start-up's objects (gc.get_freeze_count() walks them all: ~2 ms)

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in COMMANDS and cmd_name not in self.commands:
            if self._listing:
                summary = _summary(*COMMANDS[cmd_name])
                return TyperCommand(cmd_name, help=summary, short_help=summary, rich_markup_mode=None)
            self._load(COMMANDS[cmd_name].module)
        return self.commands.get(cmd_name)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        """As typer's, and a mistyped command is answered with the commands spelled like it."""
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            import difflib  # the error path only: start-up stays as it was

            close = difflib.get_close_matches(name, self.list_commands(ctx), n=2, cutoff=0.7)
            if close:
                ctx.fail(f"No such command {name!r}; did you mean {' or '.join(repr(c) for c in close)}?")
        return super().resolve_command(ctx, args)

    def _load(self, module: str) -> None:
        if module in self._loaded:
            return
        dotted = f"receipts.cli.{module}"
        listed = {name for name, command in COMMANDS.items() if command.module == module}
        entry = ", ".join(sorted(listed))
        try:
            register = getattr(importlib.import_module(dotted), "register", None)
        except ImportError as exc:
            raise RegistryError("command", entry, dotted, f"cannot be imported ({type(exc).__name__}: {exc})") from exc
        if not callable(register):
            raise RegistryError("command", entry, dotted, "has no register(app)")
        if self._freezing:  # the command line's process (main()): the command's modules join what it froze
            gc.freeze()
        sub = typer.Typer()
        register(sub)
        registered = typer.main.get_group(sub).commands
        if set(registered) != listed:
            raise RegistryError("command", entry, dotted, f"registers {', '.join(sorted(registered)) or 'nothing'}, "
                                                         f"where cli/main.py COMMANDS lists {entry}")
        for name, command in registered.items():
            _plain_placeholders(command)
            plain_values_first(command)  # Typer's pydantic only for a value that needs it (cli/lean_imports.py)
            self.commands.setdefault(name, command)
        self._loaded = self._loaded | {module}

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """As typer's, but a usage error is one line on stderr (click's is a usage box of three or four)."""
        plain_values_first(self)  # --db and the other options of the root
        kwargs["standalone_mode"], standalone = False, kwargs.get("standalone_mode", True)
        if not standalone:
            return super().main(*args, **kwargs)
        try:
            rv = super().main(*args, **kwargs)
        except typer.Abort:
            typer.echo("Aborted!", err=True)
            sys.exit(1)
        except typer.TyperException as exc:  # click's exceptions, as Typer vendors them (not public: told by shape)
            ctx = getattr(exc, "ctx", None)
            if ctx is None or type(exc).__name__ == "NoArgsIsHelpError":
                getattr(exc, "show")()  # not a usage error, or `receipts` / a group alone: its help, as before
            else:
                hint = "; a path that begins with '-' goes after `--`" if hasattr(exc, "possibilities") else ""
                typer.echo(f"Error: {exc.format_message()} (see `{ctx.command_path} --help`{hint})", err=True)
            sys.exit(exc.exit_code)
        sys.exit(rv if isinstance(rv, int) else 0)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


_TYPE_WORDS = {"integer": "int"}


def _plain_placeholders(command: Any) -> None:
    """Flags in a command's help read `--json`, not typer's `--json <bool>`: a flag takes no value, so its
    metavar is empty (typer shows a set metavar instead of the type). A repeatable option reads `--tag <str>`,
    not `<list[str]>`, and a bounded number `<int>` (its bounds are printed beside it). Also for --help and
    subcommands."""
    command.get_help_option(typer.Context(command))  # created once and cached: its metavar sticks
    for param in [*command.params, getattr(command, "_help_option", None)]:
        if param is None or (param.metavar is not None and param.param_type_name == "option"):
            continue
        if getattr(param, "is_flag", False):
            param.metavar = ""
        elif (desc := getattr(param, "type_descriptor", None)) is None:
            continue
        elif desc.is_list and not desc.is_choice:
            label = f"<{param._bare_type(get_args(desc.annotation)[0]).lower()}>"
            if param.param_type_name == "option":
                param.metavar = label
            else:  # an argument's name is its metavar ("paths..."): only its type column changes
                param.display_type_rich = lambda ctx, label=label: label
        elif desc.is_ranged and param.param_type_name == "option":
            param.metavar = f"<{_TYPE_WORDS.get(desc.ranged_type_name, desc.ranged_type_name)}>"
    for sub in getattr(command, "commands", {}).values():
        _plain_placeholders(sub)


def _summary(module: str, attr: str) -> str:
    """The first paragraph of a command's help, read from its module's source without importing it: the
    docstring of function `attr`, or the help= of the Typer app assigned to `attr` (a command group)."""
    import ast  # the command list's help only

    spec = importlib.util.find_spec(f"receipts.cli.{module}")
    if spec is None or spec.origin is None:
        raise RegistryError("command", attr, f"receipts.cli.{module}", "is not found")
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    text = ""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == attr:
            text = ast.get_docstring(node) or ""
        elif (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
              and any(isinstance(t, ast.Name) and t.id == attr for t in node.targets)):
            text = next((k.value.value for k in node.value.keywords
                         if k.arg == "help" and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)), "")
    return " ".join(text.split("\n\n")[0].split())


app = typer.Typer(
    name="receipts",
    cls=LazyGroup,
    help="A warehouse for GPU training-run receipts. Exit codes: 0 ok, 1 gate rejected, 2 usage/input error, "
         "3 comparison refused, 130 interrupted (129 SIGHUP, 143 SIGTERM), 141 output closed.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
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
    debug: bool = typer.Option(False, "--debug", envvar="RECEIPTS_DEBUG",
                               help="On an unexpected error, print the Python traceback too."),
) -> None:
    from receipts.cli.context import Settings
    from receipts.store import default_url

    ctx.obj = Settings(db=db or default_url(), registry_path=registry, debug=debug)


def prepare_process() -> None:
    """What the command line's process sets up before a command runs (main(); benchmarks/bench_startup.py's warm
    process too). What is loaded by now (Typer, the command list), and the command's modules once imported
    (LazyGroup._load), live as long as the process: frozen out of the collector's way (gc.freeze), each collection
    while a command imports and reads walks only what came after, not every module object again: on
    benchmarks/bench_startup.py's small store, 15-22 ms of CPU less per command (`show`, `compare`, `explain`;
    paired medians of 11). A library caller or a test (no main()) keeps the collector as it was
    (tests/test_cli_gc.py)."""
    gc.freeze()
    LazyGroup._freezing = True
    return_freed_memory_at_once()  # before any command imports polars (cli/allocator.py)
    leave_pandas_out()  # DuckDB would import it to bind a parameter (cli/lean_imports.py)
    stop_like_ctrl_c()  # SIGINT, SIGTERM and SIGHUP stop a command alike, none lost in DuckDB (cli/termination.py)


def main() -> None:
    prepare_process()
    try:
        app()
    except SystemExit as done:
        if done.code == interrupted_exit_code():
            # Interrupted: everything is written and said. Leave without interpreter teardown, where DuckDB's
            # worker threads of an interrupted query could abort the process ('terminate called without an
            # active exception', exit -6 instead of 130, about 1 Ctrl-C in 30 during `ingest FOLDER`).
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(done.code)
        raise
    except Exception as exc:  # noqa: BLE001 - outside any command (start-up): still one line and exit 2
        from receipts.cli.context import EXIT_INPUT, report_error

        report_error(exc)
        raise SystemExit(EXIT_INPUT) from None


if __name__ == "__main__":
    main()
