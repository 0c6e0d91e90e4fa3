"""A kernel's launch shape as both profilers record it, in one spelling: 'grid (2,66,1) block (384,1,1)'.

nsys: CUPTI_ACTIVITY_KIND_KERNEL's gridX/Y/Z and blockX/Y/Z columns; Kineto: a kernel event's args "grid" and
"block", each a list of 3 ints. A kernel name can cover several problem sizes, and where the launch shape differs
with the size it tells the calls apart (`receipts explain` prices added calls by it). A shape missing or not six
positive integers is no shape (None): the kernel's calls are then priced as one group.
"""

from __future__ import annotations

import functools
from typing import Any

import polars as pl

SHAPE_COLUMNS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")
_MAX_DIM = (1 << 31) - 1  # CUDA's largest grid dimension; anything past it is damage
_LABEL = "grid ({},{},{}) block ({},{},{})"  # the one spelling, for a launch (label) and for a frame (shape_expr)


def _dims(value: Any) -> tuple[int, int, int] | None:
    if not isinstance(value, (list, tuple)) or len(value) != 3:
        return None
    if not all(type(v) is int and 0 < v <= _MAX_DIM for v in value):  # bool and float are no dimension
        return None
    return (value[0], value[1], value[2])


@functools.lru_cache(maxsize=4096)
def _label(grid: tuple, block: tuple) -> str | None:
    g, b = _dims(grid), _dims(block)
    return None if g is None or b is None else _LABEL.format(*g, *b)


def label(grid: Any, block: Any) -> str | None:
    """The shape of one launch from its grid and block (each 3 positive ints, as a list or tuple), else None."""
    if isinstance(grid, tuple) and isinstance(block, tuple):  # hashable: the usual case, cached
        return _label(grid, block)
    g, b = _dims(grid), _dims(block)
    return None if g is None or b is None else _label(g, b)


def shape_expr() -> pl.Expr:
    """The shape of each row of a frame with the SHAPE_COLUMNS (integers, null where the export had none), as
    text; null where any of the six is missing or not positive."""
    cols = [pl.col(c) for c in SHAPE_COLUMNS]
    valid = pl.all_horizontal([c.is_not_null() & (c > 0) for c in cols])
    return (pl.when(valid).then(pl.format(_LABEL, *cols))
            .otherwise(pl.lit(None, dtype=pl.Utf8)).alias("shape"))
