"""The small family of user-facing errors. The CLI maps each to one line and an exit code.

A refused comparison or a rejected claim is a *result*, never one of these. An error states facts in the
library's words: the parameter it is about (`option`, a keyword argument's name) and what would get past it
(`remedy`); the CLI words those as its flags and command lines (cli/words.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Remedy:
    """What would get past an error, a refusal or a warning, as facts. `kind`, one of REMEDIES; `receipt`: the
    receipt it applies to; `values`: (parameter name, value) pairs it needs, in the library's names (the lane's
    parameters, schema/lane.py OPTION; run_name, tag)."""

    kind: str
    receipt: str | None = None
    values: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in REMEDIES:
            raise ValueError(f"unknown remedy {self.kind!r}")


REMEDIES = {
    "retag": "retag `receipt` with `values`, saying why",
    "tag_runs": "tag runs of the lane with `values` tag, at ingest or by a retag",
    "attach": "attach a profiler export to `receipt`",
    "attach_to": "name the receipt this file's facts belong to",
    "force": "attach anyway, forced (the contradiction is recorded with the source)",
    "format": "name the log's format",
    "not_strict": "add the value to the registry, or keep it as given outside strict mode",
    "other_run_name": "give another run name, tag the run to say the name is shared on purpose, or rename `receipt`",
    "fewer_workers": "read the ranks with fewer worker processes, or in this one",
    "without_dask": "read the ranks in worker processes on this machine",
    "recursive": "read the folder's sub-folders too",
}


class ReceiptsError(Exception):
    """Base of every error the CLI turns into one 'Error: ...' line and exit code 2."""

    exit_code = 2
    option: str | None = None    # the parameter the error is about (its keyword name), when it is about one
    remedy: Remedy | None = None


def _about(option: str | None, message: str) -> str:
    return f"{option} {message}" if option else message


@dataclass
class InputError(ReceiptsError):
    """A file could not be read as what it claims to be. Names the file, the line or table, and
    what was expected."""

    path: str | Path
    message: str
    line: int | None = None
    table: str | None = None
    option: str | None = None
    remedy: Remedy | None = None

    @property
    def where(self) -> str:
        where = str(self.path)
        if self.line is not None:
            where += f":{self.line}"
        if self.table is not None:
            where += f" (table {self.table})"
        return where

    def __str__(self) -> str:
        return f"{self.where}: {_about(self.option, self.message)}"


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
class RegistryError(ReceiptsError):
    """A module one of receipts' own registries names (a log format's parser, a command, a schema revision) cannot
    be imported, or lacks what its registry needs: the installation is broken, not the input. Never taken for
    "no parser claims this file"."""

    registry: str   # 'log format' | 'command' | 'schema revision'
    entry: str      # the entry's name in its registry ('megatron', 'gate', '12')
    module: str     # the module that failed, dotted
    reason: str     # what went wrong, from the import's exception or the check

    def __str__(self) -> str:
        return (f"{self.registry} {self.entry!r}: module {self.module} {self.reason} (this installation of "
                "receipts is broken: reinstall it; --debug shows the traceback)")


@dataclass
class UsageError(ReceiptsError):
    message: str
    option: str | None = None
    remedy: Remedy | None = None

    def __str__(self) -> str:
        return _about(self.option, self.message)
