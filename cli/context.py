"""Options every command shares (--db, --registry, --debug), and the single place errors become exit codes."""

from __future__ import annotations

import functools
import os
import sys
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import typer
from rich.console import Console
from rich.markup import escape

from receipts.cli.termination import interrupted_exit_code, interruption
from receipts.errors import ReceiptsError
from receipts.store import Store, open_store

if TYPE_CHECKING:
    from receipts.schema.registry import Registry

EXIT_OK, EXIT_REJECTED, EXIT_INPUT, EXIT_REFUSED = 0, 1, 2, 3

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader went away


def quiet_broken_pipe() -> None:
    """The reader of our output went away (`receipts list | head`): stop quietly with 141, as a process killed by
    SIGPIPE would. Not rich's and Python's documented default of exit 1, which here means 'the gate rejected'."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # the interpreter's last flush must not fail again
    raise SystemExit(EXIT_BROKEN_PIPE)


class _Console(Console):
    def on_broken_pipe(self) -> None:
        self.quiet = True
        quiet_broken_pipe()

    def prose(self, markup: str) -> None:
        """A line of a report's prose, wrapped at the width (a pipe's 80 columns included), its continuation lines
        indented two more than its first (`  noise floor: ...` stays under its heading); words break only when
        longer than a line. Not for errors (one line each, whatever the width) nor for lines a script reads
        (`ingested X -> receipt ID`): those print whole."""
        from rich.text import Text

        text = Text.from_markup(markup)
        if text.cell_len <= self.width or self.width < 40:
            self.print(text)
            return
        indent = len(text.plain) - len(text.plain.lstrip(" "))
        lines = text[indent:].wrap(self, self.width - indent - 2, overflow="fold")
        for n, line in enumerate(lines):
            line.rstrip()
            self.print(Text(" " * (indent + (2 if n else 0))) + line)


def colour_settings(environ: Any = os.environ) -> dict[str, Any]:
    """Console settings from the colour conventions: NO_COLOR (any value) turns colour off (https://no-color.org),
    CLICOLOR=0 too; CLICOLOR_FORCE (any value but 0) keeps it in a pipe or a file (https://bixense.com/clicolors).
    Otherwise colour only on a terminal. rich reads NO_COLOR and FORCE_COLOR itself; CLICOLOR* are ours."""
    if environ.get("NO_COLOR", "") != "" or (environ.get("CLICOLOR") == "0" and not environ.get("CLICOLOR_FORCE")):
        return {"no_color": True}
    if environ.get("CLICOLOR_FORCE", "0") not in ("", "0"):
        return {"force_terminal": True}
    return {}


console = _Console(highlight=False, soft_wrap=True, **colour_settings())
err_console = _Console(stderr=True, highlight=False, soft_wrap=True, **colour_settings())


@dataclass
class Settings:
    db: str
    registry_path: Path | None
    debug: bool = False

    def registry(self, *, strict: bool = False) -> Registry:
        """The merged registry; `strict` (the --strict flag) turns strict mode on over the files' setting. Read
        by the commands that resolve identities, not at every start-up."""
        from receipts.schema.registry import load_registry

        registry = load_registry(self.registry_path)
        return replace(registry, strict=True) if strict else registry

    def store(self, *, read_only: bool = False) -> Store:
        """The store for a command that writes: created (file and schema) when absent."""
        return self.read_store() if read_only else open_store(self.db)

    def read_store(self) -> Store:
        """The store for a command that only reads: never creates a file, a schema or a table."""
        return open_store(self.db, read_only=True)

    def existing_store(self) -> Store:
        """The store for a command that changes what is already stored (retag): written to, never created;
        a missing store is the same one-line error a reader gets."""
        self.read_store().close()
        return open_store(self.db)


def settings(ctx: typer.Context) -> Settings:
    return ctx.find_root().obj


def _json_default(value: Any) -> Any:
    """What orjson cannot write natively, said explicitly: anything else is a bug, not a string."""
    import decimal

    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (set, frozenset)):
        return list(value)
    if isinstance(value, decimal.Decimal):  # a SQL sum of integers: the number it is
        return int(value) if value == value.to_integral_value() else float(value)
    raise TypeError(f"--json cannot encode {type(value).__name__}: {value!r}")


def print_json(value: Any) -> None:
    """The one JSON encoder of every `--json`: dataclasses as objects, dates as ISO 8601, numpy scalars as
    numbers; NaN/inf (not JSON) as null; an unknown type is an error rather than its repr as a string.
    orjson, not the standard encoder: indented output from `json` runs in pure Python, 0.9 s of the 1.5 s
    `list --json` took over 10,000 receipts (benchmarks/bench_gate.py); orjson writes it in ~0.05 s."""
    import orjson

    options = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
    try:
        text = orjson.dumps(value, default=_json_default, option=options)
    except orjson.JSONEncodeError as exc:  # orjson's own words name only the type; ours, kept as its cause, say more
        raise TypeError(str(exc.__cause__ or exc)) from exc
    sys.stdout.buffer.write(text + b"\n")
    sys.stdout.flush()


def print_jsonl(values: list[Any]) -> None:
    """JSON Lines: one compact object per line (the same encoder as print_json)."""
    import orjson

    options = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
    try:
        lines = [orjson.dumps(v, default=_json_default, option=options) for v in values]
    except orjson.JSONEncodeError as exc:
        raise TypeError(str(exc.__cause__ or exc)) from exc
    sys.stdout.buffer.write(b"".join(line + b"\n" for line in lines))
    sys.stdout.flush()


def wants_json(kwargs: dict[str, Any]) -> bool:
    """Whether a command's arguments (--json, or --format json/jsonl) ask for JSON: its error is JSON too."""
    fmt = kwargs.get("fmt")
    return bool(kwargs.get("as_json")) or (isinstance(fmt, str) and fmt.lower() in ("json", "jsonl"))


def json_error(exc: BaseException, exit_code: int) -> None:
    """Under --json (or --format json/jsonl), an error is also a JSON object on stdout, so a script that parses
    the output reads it instead of failing on empty input: {"error": {"message", "type", "exit_code"}}."""
    import orjson

    body = {"error": {"message": " ".join(str(exc).split()) or type(exc).__name__, "type": type(exc).__name__,
                      "exit_code": exit_code}}
    sys.stdout.buffer.write(orjson.dumps(body, option=orjson.OPT_INDENT_2) + b"\n")
    sys.stdout.flush()


def one_line(exc: BaseException) -> str:
    """An exception as one line: '<message>' for ours, '<Type>: <message>' for anything else.

    Multi-line messages (SQLite, DuckDB) are folded: the contract is one line per error."""
    if isinstance(exc, ReceiptsError):
        from receipts.cli.words import error_text  # the error path's words: not loaded by a command that succeeds

        return " ".join(error_text(exc).split())
    text = " ".join(str(exc).split())
    kind = type(exc).__name__ if type(exc).__module__ == "builtins" else f"{type(exc).__module__}.{type(exc).__name__}"
    return f"{kind}: {text}" if text else kind


def report_error(exc: BaseException, *, debug: bool = False, prefix: str = "", label: str | None = None) -> None:
    """One line on stderr (markup in the message is printed as text), after the traceback when `debug`.

    Ours read 'Error: <message>'; anything else 'error: <Type>: <message> (run with --debug ...)'."""
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    ours = isinstance(exc, ReceiptsError)
    label = label or ("Error:" if ours else "error:")
    hint = "" if ours or debug else " (run with --debug for the traceback)"
    err_console.print(f"[bold red]{escape(label)}[/] {escape(prefix + one_line(exc))}{hint}")


def _debug(args: tuple, kwargs: dict) -> bool:
    """--debug from the command's own typer.Context argument (every command takes one)."""
    # Duck-typed: typer hands commands its vendored click's Context, not always a typer.Context.
    ctx = kwargs.get("ctx") or next((a for a in args if hasattr(a, "find_root")), None)
    return ctx is not None and bool(getattr(ctx.find_root().obj, "debug", False))


def handle_errors(fn: Callable) -> Callable:
    """Every error becomes one line on stderr and exit code 2, never a traceback (--debug shows one).

    Exit 1 is kept for 'the gate rejected a claim' and 3 for 'comparison refused', so an unexpected
    exception must never surface as Python's default exit 1."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, typer.TyperException):  # typer's own way out: exit codes, usage errors
            raise
        except ReceiptsError as exc:
            report_error(exc, debug=_debug(args, kwargs))
            if wants_json(kwargs):
                json_error(exc, exc.exit_code)
            raise typer.Exit(exc.exit_code) from None
        except BrokenPipeError:
            quiet_broken_pipe()
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM / SIGHUP (cli/termination.py)
            err_console.print(interruption())
            raise typer.Exit(interrupted_exit_code()) from None
        except Exception as exc:  # noqa: BLE001 - the one place every unexpected error becomes exit 2
            report_error(exc, debug=_debug(args, kwargs))
            if wants_json(kwargs):
                json_error(exc, EXIT_INPUT)
            raise typer.Exit(EXIT_INPUT) from None
    setattr(wrapper, "handles_errors", True)  # tests/test_ingest_hygiene.py checks every command carries it
    return wrapper
