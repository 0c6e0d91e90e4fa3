"""The training-log formats receipts reads: one typed entry per format, naming the module that parses it.

Sniffing asks every format, so a log is sniffed against the whole registry, resolved at once: each module
imported and checked for what its entry promises (FORMAT, detect, parse; parse_chunks where the entry streams).
A module that cannot be imported (a missing dependency, or one the command line leaves out:
cli/lean_imports.py) or lacks a function is a RegistryError naming it. It is never a format that quietly claims
no log, which would turn every log of that format into "unknown log format". The modules load when a log is
first read, not when this registry is imported: a command that reads no log imports no parser.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, cast

from receipts.errors import RegistryError
from receipts.ingest.textlog import LogChunk, LogText
from receipts.schema.model import ParsedRun


class LogParser(Protocol):
    """What a log format's module provides."""

    FORMAT: str  # the source_format its receipts carry

    def detect(self, head: list[str]) -> bool: ...

    def parse(self, log: LogText) -> ParsedRun: ...


class StreamedLogParser(LogParser, Protocol):
    """A format whose parser also reads a log chunk by chunk: its memory is one chunk plus the numbers kept,
    whatever the log's length."""

    def parse_chunks(self, path: Path, chunks: Iterable[LogChunk], spill: Path | None = None) -> ParsedRun: ...


@dataclass(frozen=True)
class LogFormat:
    name: str                 # its module under receipts.ingest, and the name sniffing answers
    aliases: tuple[str, ...]  # what users pass to --format for it
    streamed: bool = False    # its module is a StreamedLogParser

    @property
    def module(self) -> str:
        return f"receipts.ingest.{self.name}"

    def parser(self) -> LogParser:
        """The module, imported and checked; a RegistryError naming it when it cannot serve."""
        try:
            module = importlib.import_module(self.module)
        except ImportError as exc:
            raise RegistryError("log format", self.name, self.module,
                                f"cannot be imported ({type(exc).__name__}: {exc})") from exc
        needs = ("detect", "parse", "parse_chunks") if self.streamed else ("detect", "parse")
        missing = [f for f in needs if not callable(getattr(module, f, None))]
        if not isinstance(getattr(module, "FORMAT", None), str):
            missing.insert(0, "FORMAT")
        if missing:
            raise RegistryError("log format", self.name, self.module, f"has no {', '.join(missing)}")
        return cast(LogParser, module)


# Most specific first: sniffing answers the first format whose detect() claims a log's lines. The RECEIPT
# format comes first, and a `receipts run` log's child output is sniffed among the others (CHILD_FORMATS).
LOG_FORMATS: tuple[LogFormat, ...] = (
    LogFormat("native", ("receipt", "native")),
    LogFormat("megatron", ("megatron", "nemo", "megatron-deepspeed"), streamed=True),
    LogFormat("nanochat", ("nanochat",), streamed=True),
    LogFormat("torchtitan", ("torchtitan",)),
    LogFormat("modded_nanogpt", ("modded-nanogpt", "modded_nanogpt"), streamed=True),
    LogFormat("mllog", ("mllog", "mlperf")),
)
CHILD_FORMATS = LOG_FORMATS[1:]
BY_NAME = {fmt.name: fmt for fmt in LOG_FORMATS}


def resolved(formats: tuple[LogFormat, ...] = LOG_FORMATS) -> list[tuple[LogFormat, LogParser]]:
    """Every format with its parser, all imported before any is asked: one that cannot serve fails the sniff."""
    return [(fmt, fmt.parser()) for fmt in formats]


def parser(name: str) -> LogParser:
    return BY_NAME[name].parser()


def streamed_parser(name: str) -> StreamedLogParser:
    fmt = BY_NAME[name]
    if not fmt.streamed:
        raise ValueError(f"log format {name!r} is read whole, not chunk by chunk")
    return cast(StreamedLogParser, fmt.parser())
