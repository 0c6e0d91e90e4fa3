"""The small family of user-facing errors. The CLI maps each to one line and an exit code.

A refused comparison or a rejected claim is a *result*, never one of these.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class ReceiptsError(Exception):
    """Base of every error the CLI turns into one 'Error: ...' line and exit code 2."""

    exit_code = 2


@dataclass
class InputError(ReceiptsError):
    """A file could not be read as what it claims to be. Names the file, the line or table, and
    what was expected."""

    path: str | Path
    message: str
    line: int | None = None
    table: str | None = None

    def __str__(self) -> str:
        where = str(self.path)
        if self.line is not None:
            where += f":{self.line}"
        if self.table is not None:
            where += f" (table {self.table})"
        return f"{where}: {self.message}"


@dataclass
class UnsupportedVersion(ReceiptsError):
    """A stored or exchanged format carries a version this build does not know."""

    what: str
    version: str
    supported: str

    def __str__(self) -> str:
        return f"{self.what} version {self.version!r} is not supported (this build reads {self.supported})"


@dataclass
class ReceiptNotFound(ReceiptsError):
    ref: str
    candidates: tuple[str, ...] = ()
    close: tuple[str, ...] = ()  # run names spelled like `ref` (a typo's likely meaning)

    def __str__(self) -> str:
        if self.candidates:
            shown = ", ".join(self.candidates[:5])
            return f"receipt reference {self.ref!r} is ambiguous: it matches {shown}"
        guess = f"; did you mean {' or '.join(repr(c) for c in self.close)}?" if self.close else ""
        return (f"no receipt matches {self.ref!r}{guess} (use an id, a unique id prefix, or a run name; see "
                "`receipts list`)")


@dataclass
class StoreError(ReceiptsError):
    url: str
    message: str

    def __str__(self) -> str:
        return f"store {self.url}: {self.message}"


@dataclass
class ScratchFull(ReceiptsError):
    """The disk under an ingest's scratch folder (receipts/scratch.py) filled while it staged work there."""
    folder: Path

    def __str__(self) -> str:
        return (f"no space left on the disk of {self.folder} (the temp dir) for this ingest's scratch files, where "
                "a long log's step rows and an unpacked export are staged; free space there or point TMPDIR at a "
                "larger disk")


@dataclass
class UsageError(ReceiptsError):
    message: str

    def __str__(self) -> str:
        return self.message
