"""Reading a training log as lines, with the checks every text format shares.

Lines are held as one polars Series so format parsers can filter and regex-extract millions of
lines in native code (the throughput target is >= 1M lines/s on one core).
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from receipts.errors import InputError

_SNIFF_BYTES = 8192


@dataclass(frozen=True)
class LogText:
    path: Path
    lines: pl.Series            # Utf8, one element per line, without the newline
    unterminated_last: bool     # the file does not end in a newline: its last line may be cut short

    @property
    def n_lines(self) -> int:
        return len(self.lines)

    def head(self, n: int = 400) -> list[str]:
        return self.lines.head(n).to_list()

    def frame(self) -> pl.DataFrame:
        """Lines with 1-based line numbers, for filter + extract pipelines."""
        return pl.DataFrame({"text": self.lines}).with_row_index("line", offset=1).with_columns(
            pl.col("line").cast(pl.Int64)
        )


def read_log(path: Path) -> LogText:
    path = Path(path)
    try:
        data = path.read_bytes()
    except IsADirectoryError as exc:
        raise InputError(path, "is a directory; expected a training log file") from exc
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from exc
    if not data.removeprefix(b"\xef\xbb\xbf").strip():  # a lone UTF-8 BOM is empty too
        raise InputError(path, "is empty; expected a training log")
    head = data[:_SNIFF_BYTES]
    if b"\x00" in head:
        raise InputError(path, "looks binary (NUL bytes in the first 8 KiB); expected a text training log "
                               "(for an nsys report, export it: `nsys export --type sqlite`)")
    unterminated = not data.endswith(b"\n")
    lines = _split_lines(data)
    # \r\n logs from Windows tooling and \r progress bars both occur; keep the last \r segment.
    if b"\r" in data:
        lines = lines.str.strip_chars_end("\r").str.replace(r"^.*\r", "")
    return LogText(path=path, lines=lines, unterminated_last=unterminated)


def _split_lines(data: bytes) -> pl.Series:
    """Lines as a Series, split in native code: polars' CSV reader with a separator that does not occur
    and no quoting is a line splitter that keeps empty lines (about 2x Python's split + Series)."""
    if b"\x1f" in data:  # the separator occurs: split in Python rather than lose text after it
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


def cut_short_note(log: LogText, last_line_parsed: bool) -> str | None:
    """The standard 'ended early' wording for a log whose final line has no newline."""
    if log.unterminated_last and not last_line_parsed:
        return f"line {log.n_lines} is cut short (no newline at end of file); ingested up to line {log.n_lines - 1}"
    return None
