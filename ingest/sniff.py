"""The one place that decides which parser reads a file."""

from __future__ import annotations

from dataclasses import replace
from collections.abc import Iterator
from pathlib import Path

import polars as pl

from receipts.errors import InputError, Remedy
from receipts.ingest import declared, native, wrapped
from receipts.ingest.log_formats import (CHILD_FORMATS, LOG_FORMATS, LogFormat, parser, resolved,
                                         streamed_parser)
from receipts.ingest.logbytes import StreamDamaged, decompressed_head
from receipts.ingest.textlog import LogText, ReadProgress, log_start_time, read_chunks
from receipts.schema.model import ParsedRun

STAMP_HEAD_LINES = 10_000  # where a streamed log's run date is looked for (see _head_start_time)
# Formats whose parser also reads a log chunk by chunk (parse_chunks(path, chunks, spill)): their memory is one
# chunk plus the numbers kept, whatever the log's length. The others read the log whole.
STREAMED_FORMATS = tuple(fmt.name for fmt in LOG_FORMATS if fmt.streamed)
# Names users pass to --format, mapped to format names; 'declared' is the user's [logs] step_line
# (ingest/declared.py).
FORMAT_ALIASES = {alias: fmt.name for fmt in LOG_FORMATS for alias in fmt.aliases} | {"declared": "declared"}

SQLITE_MAGIC = b"SQLite format 3\x00"
GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"  # some Windows editors and tools start a JSON document with it


def sniff_kind(path: Path) -> str:
    """'log' | 'nsys' | 'nsys-gz' | 'nsys-rep' | 'kineto' | 'kineto-dir' | 'topology' | 'collect_env' |
    'nccl_tests' | 'memory-snapshot', decided from content, not names. A profile's kind is read as its entry in
    pipeline/profile_formats.py says."""
    from receipts.ingest import memory_snapshot

    path = Path(path)
    if path.is_dir():
        if any(p.name.endswith((".json", ".json.gz")) for p in path.iterdir() if p.is_file()):
            return "kineto-dir"
        raise InputError(path, "is a directory with neither a run.log (a `receipts run` directory) nor "
                               "PyTorch profiler traces (*.pt.trace.json[.gz])")
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from exc
    if head.startswith(SQLITE_MAGIC):
        return "nsys"
    if memory_snapshot.detect(head):
        return memory_snapshot.FORMAT
    if path.suffix == ".nsys-rep" or path.suffix == ".qdrep":
        return "nsys-rep"
    if head.startswith(GZIP_MAGIC):
        # Through the log reader's decompressor: a gzipped log cut short is read as the lines it holds (textlog),
        # so its first bytes must not be refused here for the end marker they lack.
        try:
            inner = decompressed_head(path, 4096)
        except StreamDamaged as exc:
            raise InputError(path, f"gzip stream is corrupt ({exc}); expected a gzipped training log, PyTorch "
                                   "profiler trace (.pt.trace.json.gz) or nsys export") from exc
        except OSError as exc:
            raise InputError(path, f"cannot read: {exc.strerror or exc}") from exc
        if inner.startswith(SQLITE_MAGIC):
            return "nsys-gz"  # exports are gzipped to travel; SQLite needs a real file
        if memory_snapshot.detect(inner):
            return memory_snapshot.FORMAT
        return "kineto" if inner.removeprefix(UTF8_BOM).lstrip().startswith(b"{") else "log"
    from receipts.ingest import sysinfo

    kind = sysinfo.detect(head.decode("utf-8", errors="replace"))
    if kind is not None:
        return kind
    if head.removeprefix(UTF8_BOM).lstrip().startswith(b"{") and (b'"traceEvents"' in head or b'"schemaVersion"' in head
                                           or b'"deviceProperties"' in head or b'"distributedInfo"' in head):
        return "kineto"
    return "log"


def what_it_is(path: Path) -> str:
    """What a file that `sniff_kind` calls a log looks like, for a refusal that must name it: an old pickle (protocol
    0 or 1: not a memory snapshot, which torch writes in 2 or later), a JSON document that is no profiler trace, or a
    training log."""
    import pickletools

    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return "a file that cannot be read"
    if head[:1] in (b"(", b"}", b"]"):
        try:
            ops = [op.name for op, _, _ in _first(pickletools.genops(head), 3)]
        except (ValueError, UnicodeDecodeError):  # not pickle opcodes: a log line that opens with a bracket
            ops = []
        if len(ops) == 3 and ops[0] in ("MARK", "EMPTY_DICT", "EMPTY_LIST"):
            return ("a pickle in protocol 0 or 1, not a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot "
                    "writes protocol 2 or later)")
    if head.removeprefix(UTF8_BOM).lstrip()[:1] in (b"{", b"[") and other_json_document(path):
        return "a JSON document without traceEvents, not a PyTorch profiler trace"
    return "a training log"


def _first(items, n: int) -> list:
    out = []
    for item in items:
        out.append(item)
        if len(out) == n:
            break
    return out


def other_json_document(path: Path) -> bool:
    """A JSON file that reads whole as a document without traceEvents (a run's config.json beside its traces):
    not a trace, so not one of a profile's ranks. False for a trace and for anything that does not read as
    JSON (empty, cut short, damaged: perhaps a rank's trace, which must then be named, never dropped)."""
    import gzip
    import json
    import zlib

    try:
        if sniff_kind(path) == "kineto":
            return False
        raw = path.read_bytes()
        doc = json.loads(gzip.decompress(raw) if raw.startswith(GZIP_MAGIC) else raw)
    except (InputError, OSError, EOFError, zlib.error, ValueError, RecursionError):
        return False
    return not (isinstance(doc, dict) and "traceEvents" in doc)


def parse_log(log: LogText, name: str | None = None, *, step_line: str | None = None) -> ParsedRun:
    """Parse with the named (or sniffed) format. A log with RECEIPT records but no RECEIPT steps (a
    `receipts run` around a script that knows nothing of receipts) takes its steps from the child's
    own lines, in the format sniffed among them, under the launcher's header (ingest/wrapped.py).
    A third-party `name` forces the child's format, also under a RECEIPT header when there is one.
    `step_line`: the user's declared step line ([logs] step_line, ingest/declared.py), tried after the
    RECEIPT format and before the built-in ones; `name` 'declared' forces it."""
    if name == "declared" or (name is None and _declared(log.head(SNIFF_CHUNK), step_line)):
        if step_line is None:
            raise InputError(log.path, "the declared format needs a step line: [logs] step_line in receipts.toml "
                                       "(or in an extra registry file)")
        parsed = declared.parse(log, step_line)
        return parsed if parsed.started_at is not None else replace(parsed, started_at=log_start_time(log))
    forced_child = name if name not in (None, "native") else None
    if forced_child and not native.detect(log.head(2000)):
        return _parse_dated(forced_child, log)  # a third-party log on its own
    parsed = _parse_dated("native" if forced_child else name or detect_log_format(log), log)
    if not forced_child and not wrapped.wants_child_steps(parsed):
        return parsed
    child_log = wrapped.child_lines(log)
    child_format = forced_child or detect_among_lines(child_log, formats=CHILD_FORMATS)
    if child_format is None:
        return parsed  # the launcher's provenance alone: a receipt of what ran where, without steps
    try:
        child = _parse_dated(child_format, child_log)
    except InputError as exc:
        if forced_child:
            raise  # the user named the format: that it does not fit is the answer
        # e.g. Megatron's arguments dump but no iteration line: the run died before its first step
        return replace(parsed, warnings=parsed.warnings + (f"the child's output looks like {child_format} "
                                                           f"but gave no steps: {exc.message}",))
    return wrapped.merge(parsed, child)


def _declared(head: list[str], step_line: str | None) -> bool:
    """The user's step line matches the head of a log that is not in the RECEIPT format."""
    return step_line is not None and not native.detect(head) and declared.detect(head, step_line)


def parse_streamed(path: Path, name: str | None = None, progress: ReadProgress | None = None, *,
                   spill: Path | None = None, step_line: str | None = None) -> ParsedRun | None:
    """The log parsed chunk by chunk, when the format it would be parsed with (named, or sniffed as
    `detect_log_format` sniffs) streams and no RECEIPT header wraps it; None when it must be read whole
    (`parse_log`), which is also where a log no format claims gets its error. `spill`: a directory the
    step rows are written to as they are read (ingest/spool.py; the caller removes it), else in memory."""
    if name == "declared" or (name is None and step_line is not None
                              and _declared(next(_line_slices(path), []), step_line)):
        return None  # a declared step line is read whole (parse_log)
    found = _streamed_format(path, name)
    if found is None:
        return None
    parsed = streamed_parser(found).parse_chunks(path, read_chunks(path, progress), spill)
    if parsed.started_at is None:
        parsed = replace(parsed, started_at=_head_start_time(path))
    return parsed


def _head_start_time(path: Path) -> str | None:
    """log_start_time over a streamed log's first lines (read again, block by block, only that far): a log
    that stamps its lines does so from its launcher's first line, and a speedrun record prints nvidia-smi's
    banner after its code dump, within the first thousand lines."""
    head: list[str] = []
    for lines in _line_slices(path):
        head.extend(lines)
        if len(head) >= STAMP_HEAD_LINES:
            break
    return log_start_time(LogText(path, pl.Series("text", head, dtype=pl.Utf8), unterminated_last=False))


def _streamed_format(path: Path, name: str | None) -> str | None:
    if name is not None and name not in STREAMED_FORMATS:
        return None
    slices = _line_slices(path)
    head = next(slices, None)
    if head is None or not any(line.strip().removeprefix("\ufeff").strip() for line in head):
        return None  # empty, or a blank head: read whole, where emptiness is judged on the whole file
    if name is not None:
        return None if native.detect(head) else name
    for lines in _chain(head, slices):
        found = _detect_among(lines, formats=LOG_FORMATS)
        if found is not None:
            return found if found in STREAMED_FORMATS else None
    return None


def _chain(head: list[str], rest: Iterator[list[str]]) -> Iterator[list[str]]:
    yield head
    yield from rest


def _line_slices(path: Path) -> Iterator[list[str]]:
    """The log's lines in the slices `detect_among_lines` looks at (SNIFF_CHUNK lines from the top),
    read block by block so that sniffing stops reading where it decides."""
    pending: list[str] = []
    for chunk in read_chunks(path):
        pending.extend(chunk.frame["text"].to_list())
        while len(pending) >= SNIFF_CHUNK:
            yield pending[:SNIFF_CHUNK]
            pending = pending[SNIFF_CHUNK:]
    if pending:
        yield pending


def _parse_dated(name: str, log: LogText) -> ParsedRun:
    """Parse with one format; a run its parser could not date takes its start from the log's own line
    timestamps (a logger prefix, nvidia-smi's banner), so lanes and history order it by when it ran rather
    than by when it was ingested. A RECEIPT header dates its run itself (and names it by that date)."""
    parsed = parser(name).parse(log)
    if parsed.started_at is None and name != "native":
        parsed = replace(parsed, started_at=log_start_time(log))
    return parsed


def _detect_among(head: list[str], *, formats: tuple[LogFormat, ...]) -> str | None:
    """The first of `formats` that claims these lines. Every format's parser is resolved first: one that
    cannot be imported is a RegistryError naming it, never a format that claims nothing (ingest/log_formats.py)."""
    for fmt, module in resolved(formats):
        if module.detect(head):
            return fmt.name
    return None


SNIFF_CHUNK = 2000


def detect_among_lines(log: LogText, *, formats: tuple[LogFormat, ...]) -> str | None:
    """The first format whose lines appear anywhere in the log, looked for chunk by chunk from the top:
    the head decides almost every log at once, and a long preamble (modded-nanogpt prints its whole
    source before step 0) costs one linear pass, never more, and stops at the first chunk that decides."""
    for start in range(0, max(log.n_lines, 1), SNIFF_CHUNK):
        found = _detect_among(log.lines.slice(start, SNIFF_CHUNK).to_list(), formats=formats)
        if found is not None:
            return found
    return None


def detect_log_format(log: LogText) -> str:
    found = detect_among_lines(log, formats=LOG_FORMATS)
    if found is not None:
        return found
    raise InputError(
        log.path,
        "unknown log format: no line looks like a RECEIPT record, a Megatron "
        "'iteration N/M' line, a nanochat 'step N/M | ... | dt:' line, a torchtitan 'step: N loss:' line, "
        "a modded-nanogpt 'step:N/M ... train_time:' line or a ':::MLLOG' record (declare your own step line "
        "as [logs] step_line in receipts.toml)",
        remedy=Remedy("format"),
    )
