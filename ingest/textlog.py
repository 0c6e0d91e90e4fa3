"""Reading a training log as lines, with the checks every text format shares (its bytes, compressed or not:
ingest/logbytes.py).

Lines are held as polars Series so format parsers can filter and regex-extract millions of lines in
native code (the throughput target is >= 1M lines/s on one core). A log is read either whole
(`read_log`, for formats that look at the log as a whole) or in blocks of about `BLOCK_BYTES`
(`read_chunks`, for the step formats that reduce each block to its numbers), so peak memory does not
grow with the log's length. Both split lines the same way, so a parser sees the same lines either way.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Protocol, cast

import numpy as np
import polars as pl

from receipts.errors import InputError
from receipts.ingest.logbytes import SNIFF_BYTES, decompressed_blocks, open_log, raw_blocks, read_bytes, refuse_binary

_NOT_NEWLINE = re.compile(rb"[^\n]")
BLOCK_BYTES = 8 << 20  # a block of lines: big enough to amortise polars' per-call cost, small next to the log

# Called as a log is read: (bytes read so far, lines read so far). The CLI draws its progress bar from it.
ReadProgress = Callable[[int, int], None]


class LogEnd(Protocol):
    """Where a log ends: what the 'cut short' note needs (a LogText, or a streamed log's last chunk)."""
    @property
    def n_lines(self) -> int: ...
    @property
    def unterminated_last(self) -> bool: ...
    @property
    def stream_cut(self) -> bool: ...


@dataclass(frozen=True)
class LogText:
    path: Path
    lines: pl.Series            # Utf8, one element per line, without the newline
    unterminated_last: bool     # the file does not end in a newline: its last line may be cut short
    stream_cut: bool = False    # a compressed log's stream stops before its end marker (its writer stopped)

    @property
    def n_lines(self) -> int:
        return len(self.lines)

    def head(self, n: int = 400) -> list[str]:
        return self.lines.head(n).to_list()

    def frame(self) -> pl.DataFrame:
        """Lines with 1-based line numbers, for filter + extract pipelines."""
        return numbered(self.lines)

    def chunks(self) -> Iterator[LogChunk]:
        """The whole log as one chunk, for parsers that read chunk by chunk."""
        yield LogChunk(None, first_line=1, last=True,
                       unterminated_last=self.unterminated_last, stream_cut=self.stream_cut, lines=self.lines)


@dataclass(frozen=True, eq=False)
class LogChunk:
    """A block of consecutive whole lines of a log, numbered as in the file: read in blocks, its bytes as read,
    split into lines when a parser first asks for `frame`; read whole, its lines already split."""
    block: bytes | None         # whole lines as read, newlines included; None when `lines` is given
    first_line: int             # the number of its first line, 1-based in the file
    last: bool                  # holds the file's last line
    unterminated_last: bool     # last chunk only: the file does not end in a newline
    stream_cut: bool = False    # last chunk only: a compressed log's stream stops before its end marker
    lines: pl.Series | None = None
    cr_lines: bool = False      # the file's lines end in a CR alone (decided once, from its head: see cr_only)

    @cached_property
    def frame(self) -> pl.DataFrame:
        """line (Int64, 1-based in the file), text (Utf8, without the newline)."""
        return numbered(self.lines if self.lines is not None else split_lines(cast(bytes, self.block), cr=self.cr_lines),
                        self.first_line)

    @cached_property
    def line_count(self) -> int:
        if self.lines is not None:
            return len(self.lines)
        if "frame" in self.__dict__:  # split already (the cached frame): its height, not a count of the bytes
            return self.frame.height
        return count_lines(cast(bytes, self.block), cr=self.cr_lines)

    @property
    def n_lines(self) -> int:
        """The number of the chunk's last line (on the last chunk: the file's line count)."""
        return self.first_line + self.line_count - 1

    def as_end(self) -> ChunkEnd:
        """What a parser keeps of the chunk once it has read it, for the 'cut short' note: not its text."""
        return ChunkEnd(self.n_lines, self.unterminated_last, self.stream_cut)


@dataclass(frozen=True)
class ChunkEnd:
    """A LogEnd: where a streamed log's chunk ends (the last chunk: where the log ends)."""
    n_lines: int
    unterminated_last: bool
    stream_cut: bool


def numbered(lines: pl.Series, first_line: int = 1) -> pl.DataFrame:
    """line (Int64, the first `first_line`), text: the frame every parser filters and extracts from."""
    return pl.DataFrame({"text": lines}).with_row_index("line", offset=first_line).with_columns(
        pl.col("line").cast(pl.Int64))


def count_lines(block: bytes, *, cr: bool | None = None) -> int:
    """The lines split_lines splits `block` into: one per newline, and a last one without it."""
    if cr_only(block) if cr is None else cr:
        return block.rstrip(b"\r").count(b"\r") + 1
    # numpy's vectorised compare: bytes.count reads one byte at a time (0.23 against 0.09 s per 650 MB)
    return int(np.count_nonzero(np.frombuffer(block, np.uint8) == ord("\n"))) + (not block.endswith(b"\n"))


def read_log(path: Path, progress: ReadProgress | None = None) -> LogText:
    path = Path(path)
    with open_log(path) as (f, how):
        data = read_bytes(path, f, how)
        read = len(data) if how is None else f.fileobj_position()
    if not data.removeprefix(b"\xef\xbb\xbf").strip():  # a lone UTF-8 BOM is empty too
        if how is not None and f.cut_short:
            raise InputError(path, f"the {how} stream is cut short before any text; expected a {how}-compressed "
                                   "training log")
        raise InputError(path, "is empty; expected a training log")
    refuse_binary(path, data[:SNIFF_BYTES])
    unterminated = not ends_a_line(data)
    lines = split_lines(data)
    if progress is not None:
        progress(read, len(lines))
    return LogText(path=path, lines=lines, unterminated_last=unterminated, stream_cut=how is not None and f.cut_short)


def read_chunks(path: Path, progress: ReadProgress | None = None, *,
                block_bytes: int = BLOCK_BYTES) -> Iterator[LogChunk]:
    """The log in chunks of whole lines (about `block_bytes` each; a longer line makes a longer chunk),
    split exactly as `read_log` splits it. The caller checks emptiness (read_log does, on the fallback
    path); a binary head is refused here as there. A plain file must be seekable (the streamed path reads a log
    more than once anyway: sniffed, then parsed); a compressed one is read through its decompressor."""
    path = Path(path)
    with open_log(path) as (f, how):
        blocks = raw_blocks(f, block_bytes) if how is None else decompressed_blocks(path, f, how, block_bytes)
        first_line, done, cr = 1, 0, False
        for data, more, position in blocks:
            if first_line == 1:
                refuse_binary(path, data[:SNIFF_BYTES])
                # A block ends at a newline, so a file with any newline has one in its first block: a CR-only
                # log is decided there, once, and a later block's lone CR stays inside its line.
                cr = cr_only(data)
            chunk = LogChunk(data, first_line=first_line, last=not more,
                             unterminated_last=not more and not ends_a_line(data, cr=cr),
                             stream_cut=not more and how is not None and f.cut_short, cr_lines=cr)
            yield chunk
            # counted once the parser is done with the chunk: a parser that split it has its lines' count
            first_line += chunk.line_count
            done += len(data)
            if progress is not None:
                progress(done if position is None else position, first_line - 1)
            del chunk, data  # the next block is read without this one's bytes and lines held


def cr_only(data: bytes) -> bool:
    """Lines ended by a carriage return alone (classic Mac OS, some serial consoles and loggers): no newline
    anywhere and a CR between two lines. Read as lines, not as one line's overwrites."""
    return b"\n" not in data and b"\r" in data.rstrip(b"\r")


def ends_a_line(data: bytes, *, cr: bool | None = None) -> bool:
    """Whether the text ends with a line end: a newline, or a CR in a CR-only log."""
    return data.endswith(b"\n") or (data.endswith(b"\r") and (cr_only(data) if cr is None else cr))


def split_lines(data: bytes, *, cr: bool | None = None) -> pl.Series:
    """Whole lines of a log as a Series of their texts (a last line without its newline is one too). `cr`: the
    file is a CR-only log (None: decided from `data`, the whole text)."""
    if cr_only(data) if cr is None else cr:
        text = data.decode("utf-8", errors="replace")
        return pl.Series("text", (text[:-1] if text.endswith("\r") else text).split("\r"), dtype=pl.Utf8)
    lines = _split_lines(data)
    # \r\n logs from Windows tooling and \r progress bars both occur; keep the last \r segment.
    # (Per line, so splitting a log in blocks and cleaning each gives the lines of cleaning it whole.)
    if b"\r" in data:
        lines = lines.str.strip_chars_end("\r").str.replace(r"^.*\r", "")
    return lines


def _split_lines(data: bytes) -> pl.Series:
    """Lines as a Series, split in native code: polars' CSV reader with a separator that does not occur
    and no quoting is a line splitter that keeps empty lines (about 2x Python's split + Series)."""
    if b"\x1f" in data or _NOT_NEWLINE.search(data) is None:
        # the separator occurs (split in Python rather than lose text after it), or a block of empty lines
        text = data.decode("utf-8", errors="replace")
        return pl.Series("text", (text[:-1] if text.endswith("\n") else text).split("\n"), dtype=pl.Utf8)
    frame = pl.read_csv(io.BytesIO(data), has_header=False, separator="\x1f", quote_char=None, new_columns=["text"],
                        encoding="utf8-lossy", infer_schema=False, truncate_ragged_lines=True)
    return frame["text"].fill_null("")


def same_shape(previous: str, last: str) -> bool:
    """Whether `last` has the shape of `previous` (a line of the same kind printed before it): numbers
    and runs of spaces blanked, the text must be equal. A writer killed mid-line leaves a prefix of a
    line, whose numbers may parse and even end in a plausible unit, but whose shape is short."""
    def shape(text: str) -> str:
        return re.sub(r"\s+", " ", re.sub(r"nan|inf|[-+\d.,eE]*\d[-+\d.,eE]*", "#", text)).strip()
    return shape(previous) == shape(last)


def cut_short_note(log: LogEnd, last_line_parsed: bool) -> str | None:
    """The standard 'ended early' wording for a log whose final line has no newline, or whose compressed stream
    stops before its end marker (the writer was stopped: the run may have gone on past what the file holds)."""
    kept = log.n_lines if last_line_parsed else log.n_lines - 1
    if log.stream_cut:
        return (f"the compressed stream stops before its end marker (its writer was stopped?) in line {log.n_lines}; "
                f"ingested up to line {kept}")
    if log.unterminated_last and not last_line_parsed:
        return f"line {log.n_lines} is cut short (no newline at end of file); ingested up to line {kept}"
    return None


# Timestamps a log carries on its own lines, in the forms real training logs print them:
#   Python logging / DeepSpeed / torchtitan  `2026-03-16 22:57:30,775 - ...`, `[2022-10-31 10:59:02,323] [INFO] ...`,
#                                            `[rank0]:[titan] 2025-06-16 22:30:48,735 - root - INFO ...`
#   nvidia-smi's banner (and `date`)         `Wed Oct  9 18:10:50 2024` alone on its line
# Only a timestamp that opens its line (after bracketed labels) counts: a date inside a code dump or a
# message is not when the run printed it.
_LOG_STAMP = (r"^(?:\[[^\]]*\]:?\s*)*\[?(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)(?:[,.](\d{1,6}))?\]?(?:\s|$)")
_CTIME = r"^\s*(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) ((?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ 0-9]\d \d\d:\d\d:\d\d \d{4})\s*$"


def log_start_time(log: LogText) -> str | None:
    """When the run began as its own log says: the first line-opening timestamp in the file, as ISO-8601
    (no zone: a log's clock is the machine's local time and does not name its zone), else None.

    A training script's log opens with its launcher's or logger's lines, so the first stamped line is the
    run's start, not the first step's; a value that is not a calendar date (a damaged line) is skipped."""
    # One anchored match per line (it fails on a line's first characters: ~15 ms per 1M lines), the head first
    # (a log stamping its lines does so from the top), then the parse of the first few stamped lines only.
    stamp = pl.col("text").str.contains(_LOG_STAMP + "|" + _CTIME)
    candidates = pl.DataFrame({"text": log.lines.head(10_000)}).filter(stamp).head(64)
    if candidates.height == 0 and log.n_lines > 10_000:
        candidates = pl.DataFrame({"text": log.lines.slice(10_000)}).filter(stamp).head(64)
    frame = candidates.select(
        pl.col("text").str.extract_groups(_LOG_STAMP).alias("iso"),
        pl.col("text").str.extract(_CTIME, 1).str.replace(r"  +", " ").alias("ctime"),
    ).unnest("iso")
    stamped = frame.select(
        pl.coalesce(
            (pl.col("1").str.replace("T", " ") + "." + pl.col("2").fill_null("0").str.pad_end(6, "0"))
            .str.strptime(pl.Datetime("us"), "%Y-%m-%d %H:%M:%S%.f", strict=False),
            pl.col("ctime").str.strptime(pl.Datetime("us"), "%b %d %H:%M:%S %Y", strict=False),
        ).alias("at"),
    ).drop_nulls("at")
    return stamped["at"][0].isoformat() if stamped.height else None
