"""Megatron iteration lines of the usual layout, read from a block of the log's bytes in native code.

megatron.py reads a long log's iteration lines with polars: a regex extract of the usual start's five fields,
another for the loss, over lines split first. That is 1.5 s of CPU per 2M lines, most of the parse, and
under the 1M lines/s a core should read. The scanner (`_megatron_lines.c`, built by setup.py where a C compiler
is found) reads the block's bytes once instead and returns:

  usual   the rows of lines of the usual layout: line, step, samples, tokens, step_ms, loss, tokens_per_s (null)
  others  every other line (line, text), split as textlog splits a block: what megatron.py reads with polars
          (memory reports, the arguments, the banner, crash lines, iteration lines of another layout)

A line is a usual row only when the scanner reaches exactly the numbers polars reaches through megatron.py's
`_USUAL_START` and `_LOSS_MATCH` (the same nearest doubles; the same first match), and when no other part of
megatron.py would read it: not a memory report, not tokens per second, not the banner, not an argument
line (` .. `), and not a line whose tokens are printed further on. A line it is unsure of (a byte outside
ASCII, a carriage return other than a \r\n line's, a number spelled otherwise than `digits(.digits)`) is one of
the others. So the two ways read every log to the same rows: tests/test_megatron_scan.py holds them equal on
real logs and under hypothesis.

Without the compiled module, `available()` is False and megatron.py reads every line through polars.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import numpy as np
import polars as pl

from receipts.ingest.textlog import split_lines

_scanner: ModuleType | None
try:
    from receipts.ingest import _megatron_lines

    _scanner = _megatron_lines
except ImportError:  # installed where no C compiler was found: the polars path reads every line
    _scanner = None


def available() -> bool:
    return _scanner is not None


@dataclass(frozen=True)
class ScannedBlock:
    """A block of whole lines, split into the usual rows and the other lines."""
    usual: pl.DataFrame     # line, step, samples, tokens, step_ms, loss, tokens_per_s: in line order
    others: pl.DataFrame    # line, text: every other line, in line order
    n_lines: int
    first_stamped: int | None  # index in `usual` of the first row holding a start time `[YYYY-MM-DD hh:mm:ss]`
    _block: bytes
    _starts: np.ndarray
    _ends: np.ndarray

    def usual_text(self, index: int) -> str:
        """The text of `usual`'s row `index` (an ASCII line: the scanner reads no other)."""
        return self._block[int(self._starts[index]):int(self._ends[index])].decode("ascii")


def scan(block: bytes, first_line: int, *, last_as_text: bool = False) -> ScannedBlock:
    """`block`: whole lines of a log, the first numbered `first_line`. `last_as_text`: its last line is one of
    the others whatever it holds (a killed writer's unterminated last line, which megatron.py judges as text)."""
    assert _scanner is not None, "scan() is called only where available()"
    (n_lines, line, step, samples, tokens, step_ms, loss, has_loss, starts, ends, stamped, other_text,
     other_line) = _scanner.scan(block, first_line, last_as_text)
    n_rows = len(line) // 8
    usual = pl.DataFrame({
        "line": np.frombuffer(line, np.int64),
        "step": np.frombuffer(step, np.int64),
        "samples": np.frombuffer(samples, np.float64),
        "tokens": pl.Series(np.frombuffer(tokens, np.float64), nan_to_null=True),  # NaN: not printed
        "step_ms": np.frombuffer(step_ms, np.float64),
        "loss": np.frombuffer(loss, np.float64),
        "has_loss": np.frombuffer(has_loss, np.bool_),
    }).select(
        "line", "step", "samples", "tokens", "step_ms",
        # a loss may be NaN as printed (`lm loss: nan`): its absence is the mask, not NaN
        pl.when("has_loss").then("loss").alias("loss"),
        pl.repeat(None, n_rows, dtype=pl.Float64).alias("tokens_per_s"))
    others = pl.DataFrame({"line": np.frombuffer(other_line, np.int64),
                           "text": split_lines(other_text) if other_text else pl.Series("text", [], pl.Utf8)})
    return ScannedBlock(usual=usual, others=others, n_lines=n_lines, first_stamped=None if stamped < 0 else stamped,
                        _block=block, _starts=np.frombuffer(starts, np.int64), _ends=np.frombuffer(ends, np.int64))
