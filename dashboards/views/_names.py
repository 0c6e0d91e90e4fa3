"""Column headers a reader reads: `median step (ms)`, not `median_step_ms`. Presentation only."""

from __future__ import annotations

import polars as pl

# Whole names that read better said otherwise; everything else is worded by header().
_SAID = {
    "receipt_id": "receipt", "run_name": "run", "run_at": "run date", "git_rev": "git revision", "z": "z",
    "change_pvalue": "change p-value", "last_arrival_share": "arrived last (share)",
    "wait_imposed_ms_per_step": "wait imposed (ms/step)", "wait_ms_per_step": "own wait (ms/step)",
    "share_pct": "% of category", "ms_per_step": "ms per rank-step", "overlap_pct": "overlap (%)",
}
# Unit suffixes, longest first: `_ms_per_step` before `_ms`.
_UNITS = (("_ms_per_step", "ms/step"), ("_gbps", "GB/s"), ("_bytes", "bytes"), ("_pct", "%"), ("_ms", "ms"),
          ("_ns", "ns"), ("_s", "s"))


def header(name: str) -> str:
    """`median_step_ms` -> `median step (ms)`; `n_steps` -> `steps`; a name without a unit loses its underscores."""
    if name in _SAID:
        return _SAID[name]
    unit = next(((suffix, text) for suffix, text in _UNITS if name.endswith(suffix)), None)
    stem = name[: -len(unit[0])] if unit else name
    stem = stem.removeprefix("n_") if stem.startswith("n_") else stem
    words = stem.replace("_", " ").strip()
    return f"{words} ({unit[1]})" if unit else words


def readable(frame: pl.DataFrame) -> pl.DataFrame:
    """The frame with headers a reader reads (the values untouched)."""
    return frame.rename({c: header(c) for c in frame.columns})
