"""A capture without NVTX steps is one window per rank; ingest/nsys_activity.py reads it in bins of start times so that no
array holds the whole capture, cutting each activity that runs past its bin's end and carrying the rest into the
next bins. The integers of the bins, added up, must equal those of the window read whole, bit for bit, and so must
the per-activity events (continuations are no events): here on random intervals (long ones crossing many bins),
and in test_nsys_expected.py on real exports. A window with an activity without a start is read whole."""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from receipts.ingest.launch_shape import SHAPE_COLUMNS
from receipts.ingest import nsys_activity, nsys_anatomy
from receipts.schema.categories import load_category_rules
from tests.conftest import examples
from tests.test_intervals_sorted import CATEGORIES, KINDS

_NO_STEPS = np.zeros(0, np.int64)


def _whole_and_binned(cats, starts, ends, bounds):
    code = np.full(len(starts), -1, np.int32)
    columns = (code, np.array(cats, np.uint8), np.array(starts, np.int64), np.array(ends, np.int64))
    whole = nsys_anatomy.piece_anatomy(tuple(c.copy() for c in columns), None, None, 0, _NO_STEPS, CATEGORIES, kinds=KINDS)
    where = np.searchsorted(bounds, columns[2], side="right")

    def bins():
        for i in range(bounds.size + 1):
            rows = np.flatnonzero(where == i)[::-1]  # a bin's rows in any order
            yield tuple(c[rows] for c in columns), int(bounds[i]) if i < bounds.size else None

    pieces = [nsys_anatomy.piece_anatomy(cols, counted, until, 0, _NO_STEPS, CATEGORIES, kinds=KINDS)
              for cols, counted, until in nsys_anatomy.window_pieces(bins())]
    binned = (nsys_anatomy.added_up(pl.concat([f for p in pieces for f in p[0]]), pl.concat([f for p in pieces for f in p[1]]))
              + (pl.concat([p[2] for p in pieces]),))
    return (*whole[0], *whole[1], whole[2]), binned


def _same(a: pl.DataFrame, b: pl.DataFrame) -> None:
    a, b = a.sort(a.columns, nulls_last=True), b.sort(b.columns, nulls_last=True)
    assert_frame_equal(a, b.select(a.columns), check_exact=True, check_dtypes=False)


@st.composite
def _windows(draw, lengths: st.SearchStrategy[int]):
    n = draw(st.integers(1, 80))
    starts = draw(st.lists(st.integers(0, 1000), min_size=n, max_size=n))
    ends = [s + draw(lengths) for s in starts]
    cats = [draw(st.integers(0, len(CATEGORIES) - 1)) for _ in range(n)]
    bounds = np.unique(draw(st.lists(st.integers(1, 1100), max_size=12))).astype(np.int64)
    return cats, starts, ends, bounds


def _check(case) -> None:
    whole, binned = _whole_and_binned(*case)
    totals, by_category, events = binned
    _same(whole[0], totals)
    _same(whole[1], by_category)
    _same(whole[2], events)


@settings(max_examples=examples(300), deadline=None, derandomize=True, database=None)
@given(_windows(st.integers(0, 400)))
def test_bins_add_up_to_the_window(case):
    _check(case)


def _batch(starts: list[int], ends: list[int]):
    n = len(starts)
    return pa.record_batch({
        "pid_key": pa.array([7 << 24] * n, pa.int64()), "device_id": pa.array([0] * n, pa.int64()),
        "stream_id": pa.array([7] * n, pa.int64()), "corr_id": pa.array(range(n), pa.int64()),
        "start_ns": pa.array(starts, pa.int64()), "end_ns": pa.array(ends, pa.int64()),
        "kind": pa.array([0] * n, pa.uint8()), "name_id": pa.array([1] * n, pa.int64()),
        "short_id": pa.array([1] * n, pa.int64()), "copy_kind": pa.array([None] * n, pa.int64()),
        "in_graph": pa.array([False] * n),
        **{c: pa.array([None] * n, pa.int32()) for c in SHAPE_COLUMNS}})  # as the select gives an unshaped export


@pytest.mark.parametrize("odd", [None, "ends before it starts", "no end", "no start"])
def test_a_window_with_an_activity_without_a_start_is_read_whole(odd, monkeypatch):
    """An activity that ends before it starts, or has no end, is made zero length as it streams in (and counted
    for a warning); one without a start (int64's least, as the arithmetic reads a NULL: not a proper interval)
    counts as the intervals it merges with let it, so only the whole window gives the whole window's numbers: one
    bin then, however long the capture (and no crash: a NULL start once overflowed the packed sort of a window)."""
    monkeypatch.setattr(nsys_activity, "_GROUP_ACTIVITIES", 10)
    monkeypatch.setattr(nsys_activity, "_SAMPLE_EVERY", 1)
    activity = nsys_activity.Activity(np.zeros(0, np.int64), {1: "gemm"}, {}, load_category_rules(), False,
                              has_steps=False, group_codes=1)
    starts = list(range(0, 1000, 10))
    ends = [s + 15 for s in starts]
    if odd == "ends before it starts":
        ends[50] = starts[50] - 1
    elif odd is not None:
        (ends if odd == "no end" else starts)[50] = None
    activity.add(_batch(starts, ends), None)
    bins = list(activity.window(7 << 24, True))
    assert len(bins) == (1 if odd == "no start" else 10)
    assert activity.ended_early == (1 if odd in ("ends before it starts", "no end") else 0)
    assert sum(columns[0].size for columns, _ in bins) == 100
    for columns, counted, until in nsys_anatomy.window_pieces(iter(bins)):
        nsys_anatomy.piece_anatomy(columns, counted, until, 0, _NO_STEPS, CATEGORIES, kinds=KINDS)
