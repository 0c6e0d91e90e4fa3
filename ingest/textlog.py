"""Reading a training log as lines, with the checks every text format shares.

Lines are held as one polars Series so format parsers can filter and regex-extract millions of
lines in native code (the throughput target is >= 1M lines/s on one core).
"""

from __future__ import annotations

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
    if not data.strip():
        raise InputError(path, "is empty; expected a training log")
    head = data[:_SNIFF_BYTES]
    if b"\x00" in head:
        raise InputError(path, "looks binary (NUL bytes in the first 8 KiB); expected a text training log "
                               "(for an nsys report, export it: `nsys export --type sqlite`)")
    text = data.decode("utf-8", errors="replace")
    unterminated = not text.endswith("\n")
    body = text[:-1] if not unterminated else text
    # \r\n logs from Windows tooling and \r progress bars both occur; keep the last \r segment.
    lines = pl.Series("text", body.split("\n"), dtype=pl.Utf8)
    if "\r" in text[:_SNIFF_BYTES * 4] or "\r" in text[-_SNIFF_BYTES:]:
        lines = lines.str.strip_chars_end("\r").str.replace(r"^.*\r", "")
    return LogText(path=path, lines=lines, unterminated_last=unterminated)


def cut_short_note(log: LogText, last_line_parsed: bool) -> str | None:
    """The standard 'ended early' wording for a log whose final line has no newline."""
    if log.unterminated_last and not last_line_parsed:
        return f"line {log.n_lines} is cut short (no newline at end of file); ingested up to line {log.n_lines - 1}"
    return None
