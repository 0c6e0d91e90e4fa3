"""The command-line process leaves pandas out, and Typer's pydantic coercion where a value needs none.

DuckDB's Python client imports pandas, and pyarrow with it, before it binds any parameter (duckdb/duckdb#18658,
since 1.4), to recognise pandas' missing-value objects among the parameters. receipts binds str, int, float and
None, never a pandas object, and reads results through the Arrow C stream (duck.query_frame), so pandas did
nothing in a command but cost its import: 69 MiB of every ingest's peak RSS (248 -> 179 MiB for a short log)
and ~0.3 s of every command's start-up (benchmarks/bench_log_ingest.py's floor, benchmarks/bench_gate.py's
`list`). A finder first on sys.meta_path answers `import pandas` with ModuleNotFoundError, as if pandas were not
installed, which DuckDB, pyarrow and polars all take in their stride (a `None` in sys.modules is not enough:
Cython's import hands pyarrow the None). Only the command line does this: a notebook or a script importing
receipts keeps its pandas, and the dashboard, which Streamlit builds on pandas, runs in its own process.

Typer (0.29) checks every parameter's value through a pydantic TypeAdapter built on first use: importing pydantic
and building a command's adapters is ~0.1 s of CPU, as much as DuckDB's import and a third of `receipts show`'s
start-up, to hand back the `str` the shell gave or the default the command declared. `plain_values_first` gives
each parameter a coercion that returns such values as they are (a str for a str, a list of str for a list of
str, an int or float default for a number, in its bounds) and hands any other value to Typer's own, built then:
a path, a number typed on the command line, a choice, an environment variable's text (a value left out, None,
is answered as Typer answers it, () or None). What a command receives, and every error message, is Typer's; only
who is asked first changes. Typer has no public way to choose a parameter's coercion (a `parser=` is wrapped in a
TypeAdapter too; `click_type=` is gone with the vendored Click), so each parameter gets its own
`get_runtime_param`, the method Typer's `process_value` asks for the coercion: it answers with a _PlainFirst, which
hands what it cannot answer to the class's own method (Typer builds and caches its coercion then, in its own
slot). Nothing of Typer is imported, subclassed or written into; a Typer whose parameters have no such method, or
no `type_descriptor`, gets nothing changed: every value goes to its coercion, as before
(tests/test_lean_imports.py fails, saying so).
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, get_args, get_origin


class _LeavePandasOut(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname == "pandas" or fullname.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {fullname!r} (the receipts command line leaves pandas out: "
                                      "receipts/cli/lean_imports.py)", name=fullname)
        return None  # not ours: the next finder looks


def leave_pandas_out() -> bool:
    """From now on `import pandas` fails in this process; False when pandas is already imported (it stays)."""
    if "pandas" in sys.modules:
        return False
    if not pandas_left_out():
        sys.meta_path.insert(0, _LeavePandasOut())
    return True


def pandas_left_out() -> bool:
    """Whether this process leaves pandas out (a worker process it starts should too)."""
    return any(isinstance(finder, _LeavePandasOut) for finder in sys.meta_path)


class pandas_allowed:
    """`with pandas_allowed():` lets pandas be found for a while: torch._dynamo asks importlib whether pandas is
    installed (find_spec, which expects None rather than an error) when `receipts estimate --model` imports
    PyTorch's memory tracker."""

    def __enter__(self) -> None:
        self.removed = [f for f in sys.meta_path if isinstance(f, _LeavePandasOut)]
        for finder in self.removed:
            sys.meta_path.remove(finder)

    def __exit__(self, *exc: object) -> None:
        if "pandas" not in sys.modules:
            sys.meta_path[:0] = self.removed


def plain_values_first(command: Any) -> None:
    """Each parameter of `command` (and of its subcommands) returns plain values as they are, and hands other
    values to Typer's coercion (module docstring)."""
    import typer

    # --help too: its option is made on first use, with the command's context (and cached there)
    for param in [*command.params, command.get_help_option(typer.Context(command))]:
        desc = getattr(param, "type_descriptor", None)
        if desc is not None and callable(getattr(type(param), "get_runtime_param", None)) \
                and "get_runtime_param" not in vars(param):
            first = _PlainFirst(_plain(desc), get_origin(desc.annotation) is list, desc.parameter_info)
            param.get_runtime_param = lambda first=first: first
    for sub in getattr(command, "commands", {}).values():
        plain_values_first(sub)


def _plain(desc: Any) -> type | None:
    """The type whose values pass as they are (str, int, float; a list's item type), None when every value goes
    to Typer: a path, a choice, a file, a custom parser, a bool (a flag's True or False skips coercion already)."""
    if desc.is_choice or desc.is_file or desc.is_path or desc.parameter_info.parser is not None:
        return None
    kind = get_args(desc.annotation)[0] if get_origin(desc.annotation) is list else desc.annotation
    return kind if kind in (str, int, float) else None


@dataclass(frozen=True)
class _PlainFirst:
    """What a Typer parameter's `get_runtime_param` answers, asked to coerce a value: a value left out, and a plain
    one, answered here; any other value by Typer's own coercion (its class's get_runtime_param, built once)."""

    kind: type | None  # _plain's
    is_list: bool
    info: Any          # the parameter's ParameterInfo: its bounds

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None:  # Typer's own answer to a value left out, before it would coerce anything
            return () if param.multiple or param.nargs == -1 else None
        if self.is_list:
            if isinstance(value, (list, tuple)) and self.kind is not None and all(type(v) is self.kind for v in value):
                return list(value)  # what Typer's list coercion returns
        elif self.kind is not None and type(value) is self.kind and (self.kind is str or _in_bounds(value, self.info)):
            return value
        return type(param).get_runtime_param(param).coerce(value, param=param, ctx=ctx)


def _in_bounds(value: Any, info: Any) -> bool:
    return (info.min is None or value >= info.min) and (info.max is None or value <= info.max)
