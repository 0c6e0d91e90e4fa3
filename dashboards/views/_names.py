"""Column headers a reader reads: `median step (ms)`, not `median_step_ms`. Presentation only."""

from __future__ import annotations

import polars as pl

# Whole names that read better said otherwise; everything else is worded by header().
_SAID = {
    "receipt_id": "receipt", "run_name": "run", "run_at": "run date", "git_rev": "git revision", "z": "z",
    "change_pvalue": "change p-value", "last_arrival_share": "arrived last (share)",
    "arrived_last_pct": "arrived last (%)",
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


def blank_unknown(frame: pl.DataFrame, formats: dict[str, str] | None = None) -> pl.DataFrame:
    """The frame with its unknown cells shown as `—` (Streamlit's table prints `None` for a null): a text column's
    nulls filled; a number column with nulls turned into text, each value with its printf `formats` entry (else
    `%.3f` for floats, `%d` for integers). Columns without nulls stay numbers (sortable, formatted by the view)."""
    formats = formats or {}
    columns = {}
    for name, dtype in frame.schema.items():
        column = frame[name]
        if column.null_count() == 0:
            columns[name] = column
        elif dtype.is_numeric():  # a display table's few rows: formatted one by one
            fmt = formats.get(name, "%.3f" if dtype.is_float() else "%d")
            columns[name] = pl.Series(name, ["—" if v is None else fmt % v for v in column.to_list()], dtype=pl.Utf8)
        else:
            columns[name] = column.cast(pl.Utf8).fill_null("—")
    return pl.DataFrame(columns)


def number_config(frame: pl.DataFrame, config: dict) -> dict:
    """`config` with a text column, same label, where blank_unknown turned a number column into text (its values
    carry their format already)."""
    import streamlit as st

    out = dict(config)
    for name, column in config.items():
        number = isinstance(column, dict) and (column.get("type_config") or {}).get("type") == "number"
        if number and name in frame.columns and frame.schema[name] == pl.Utf8:
            out[name] = st.column_config.TextColumn(column.get("label"), width=column.get("width"))
    return out
