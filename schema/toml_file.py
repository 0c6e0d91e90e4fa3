"""Reading the user's TOML files (./receipts.toml, --registry, receipt.toml, category rules) and checking
the type of every value taken from them.

A user file can be wrong in more ways than tomllib reports: unreadable, not UTF-8, nested past
Python's recursion limit, or valid TOML with a number where a list of names belongs. Each is one
InputError naming the file and the key (`hosts.h200.patterns`), never a TypeError later.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from receipts.errors import InputError


def read_toml(path: Path, what: str = "TOML file") -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():  # a FIFO would block the read forever; a folder or a typo is named as such
        raise InputError(path, f"{what} {'is not a regular file' if path.exists() else 'does not exist'}")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, f"{what} is not UTF-8 text (byte {exc.start}: {exc.object[exc.start:exc.start + 1]!r})") from exc
    except OSError as exc:
        raise InputError(path, f"cannot read {what}: {exc.strerror or exc}") from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(path, f"not valid TOML: {exc}") from exc
    except RecursionError as exc:
        raise InputError(path, "not valid TOML: nested deeper than this reader allows") from exc


def _kind(value: Any) -> str:
    return {str: "a string", bool: "a boolean", int: "an integer", float: "a number", list: "an array",
            dict: "a table"}.get(type(value), type(value).__name__)


def table(value: Any, path: Path, key: str) -> dict[str, Any]:
    """A TOML table (absent -> empty)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(path, f"key {key} must be a table, found {_kind(value)}")
    return value


def text(value: Any, path: Path, key: str) -> str | None:
    """A string (absent -> None)."""
    if value is None or isinstance(value, str):
        return value
    raise InputError(path, f"key {key} must be a string, found {_kind(value)}")


def strings(value: Any, path: Path, key: str) -> tuple[str, ...]:
    """An array of strings (absent -> empty). A bare string is refused, not split into characters."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InputError(path, f"key {key} must be an array of strings, found {_kind(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise InputError(path, f"key {key}[{i}] must be a string, found {_kind(item)}")
    return tuple(value)
