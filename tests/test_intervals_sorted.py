"""intervals.sorted_step_ns (the nsys path: one sort per process, unions as passes over masks of the sorted
rows, the overlap of two unions as |A| + |B| - |A u B|) and intervals.anatomy_rows (the Kineto path: the same
passes, clipped to spans the caller gives) give the numbers of the anatomy by interval sets
(tests/interval_reference.py: a sort per set, edge sweep, clipping by join), bit for bit: on intervals of any
length, including zero and negative ones (a damaged export), one or many steps and ranks, null steps, spans
that cut the work, miss a step or have no work, and time ranges too wide for the lifted passes."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from receipts.ingest.intervals import anatomy_from_ns, anatomy_rows, sort_order, sorted_step_ns
from receipts.schema.categories import KERNEL_CATEGORIES, MEMORY_CATEGORIES, load_category_rules
from tests.conftest import examples
from tests.interval_reference import anatomy_by_sets

CATEGORIES = pl.Series(sorted({*KERNEL_CATEGORIES, *MEMORY_CATEGORIES}), dtype=pl.Enum(sorted({*KERNEL_CATEGORIES,
                                                                                               *MEMORY_CATEGORIES})))
KINDS = load_category_rules().kinds


def both_ways(steps: list[int], cats: list[int], starts: list[int], ends: list[int]):
    events = pl.DataFrame({"rank": [0] * len(steps), "step": steps, "category": CATEGORIES.gather(cats),
                           "start_ns": starts, "end_ns": ends},
                          schema_overrides={"rank": pl.Int32, "step": pl.Int64})
    spans = events.group_by("rank", "step").agg(pl.col("start_ns").min().alias("span_start_ns"),
                                                pl.col("end_ns").max().alias("span_end_ns"))
    want = anatomy_by_sets(events, spans)
    same(want, anatomy_rows(events, spans, kinds=KINDS))
    key, start = np.array(steps, np.int64), np.array(starts, np.int64)
    order = sort_order(key, start)
    step_ns, category_ns = sorted_step_ns(key[order].astype(np.int32), np.array(cats, np.uint8)[order],
                                          start[order], np.array(ends, np.int64)[order], CATEGORIES, kinds=KINDS)

    def ranked(frame: pl.DataFrame) -> pl.DataFrame:
        return frame.select(pl.lit(0, pl.Int32).alias("rank"), pl.col("key").cast(pl.Int64).alias("step"),
                            pl.exclude("key"))
    same(want, anatomy_from_ns(ranked(category_ns), ranked(step_ns)))


def same(want: tuple[pl.DataFrame, ...], got: tuple[pl.DataFrame, ...]) -> None:
    for w, g in zip(want, got, strict=True):
        assert_frame_equal(w.sort(w.columns, nulls_last=True), g.sort(g.columns, nulls_last=True), check_exact=True)


@st.composite
def activity(draw, lengths: st.SearchStrategy[int], width: int, distinct_starts: bool):
    n = draw(st.integers(1, 60))
    starts = draw(st.lists(st.integers(0, width), min_size=n, max_size=n, unique=distinct_starts))
    return ([draw(st.sampled_from([3, 4, 9])) for _ in range(n)],
            [draw(st.integers(0, len(CATEGORIES) - 1)) for _ in range(n)],
            starts, [s + draw(lengths) for s in starts])


@settings(max_examples=examples(300), deadline=None, derandomize=True, database=None)
@given(activity(st.integers(0, 40), 200, False))
def test_proper_intervals(case):
    both_ways(*case)


@settings(max_examples=examples(300), deadline=None, derandomize=True, database=None)
@given(activity(st.integers(-30, 40), 200, True))
def test_intervals_that_end_before_they_start(case):
    # Distinct starts: with such intervals anatomy_rows' own result depends on how its sort breaks ties.
    both_ways(*case)


@settings(max_examples=examples(200), deadline=None, derandomize=True, database=None)
@given(activity(st.integers(0, 40), 200, False))
def test_gaps_around_the_long_gap_threshold(case):
    """Times in steps of 50 us, so gaps fall short of LONG_GAP_NS, reach it exactly and pass it: the idle split
    into idle and idle_long as the reference splits it, gap by gap."""
    steps, cats, starts, ends = case
    both_ways(steps, cats, [50_000 * s for s in starts], [50_000 * e for e in ends])


@settings(max_examples=examples(100), deadline=None, derandomize=True, database=None)
@given(activity(st.integers(0, 2**40), 2**61, False))
def test_time_ranges_too_wide_to_lift(case):
    both_ways(*case)


@st.composite
def spanned_activity(draw):
    """Events of two ranks (steps 1-3 or null) and spans of their own: cutting into the work, wider than it,
    missing for some (rank, step), present where there is no work."""
    n = draw(st.integers(0, 50))
    ranks = [draw(st.sampled_from([0, 1])) for _ in range(n)]
    steps = [draw(st.sampled_from([1, 2, 3, None])) for _ in range(n)]
    starts = draw(st.lists(st.integers(0, 300), min_size=n, max_size=n, unique=True))
    ends = [s + draw(st.integers(-20, 60)) for s in starts]
    events = pl.DataFrame({"rank": ranks, "step": steps, "category": CATEGORIES.gather(
        [draw(st.integers(0, len(CATEGORIES) - 1)) for _ in range(n)]), "start_ns": starts, "end_ns": ends},
        schema_overrides={"rank": pl.Int32, "step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64})
    keys = draw(st.lists(st.tuples(st.sampled_from([0, 1]), st.sampled_from([1, 2, 3, 4, None])), unique=True))
    bounds = [sorted((draw(st.integers(-10, 320)), draw(st.integers(-10, 320)))) for _ in keys]
    spans = pl.DataFrame({"rank": [k[0] for k in keys], "step": [k[1] for k in keys],
                          "span_start_ns": [b[0] for b in bounds], "span_end_ns": [b[1] for b in bounds]},
                         schema={"rank": pl.Int32, "step": pl.Int64, "span_start_ns": pl.Int64, "span_end_ns": pl.Int64})
    return events, spans


@settings(max_examples=examples(200), deadline=None, derandomize=True, database=None)
@given(spanned_activity())
def test_anatomy_rows_clipped_to_spans(case):
    events, spans = case
    same(anatomy_by_sets(events, spans), anatomy_rows(events, spans, kinds=KINDS))


@settings(max_examples=examples(100), deadline=None, derandomize=True, database=None)
@given(spanned_activity())
def test_long_gaps_clipped_to_spans(case):
    """The same in steps of 25 us: a span that starts or ends far from its work, or holds none, has its long gaps
    at its edges (or is one)."""
    events, spans = case
    scaled = [pl.col(c) * 25_000 for c in ("start_ns", "end_ns")]
    events = events.with_columns(scaled)
    spans = spans.with_columns([pl.col(c) * 25_000 for c in ("span_start_ns", "span_end_ns")])
    same(anatomy_by_sets(events, spans), anatomy_rows(events, spans, kinds=KINDS))


def test_idle_is_split_by_the_length_of_its_gaps():
    """Work at 0-1 ms, 1.2-2 ms and 3-4 ms of a 0-5 ms span: gaps of 0.2 ms (idle), 1 ms and 1 ms at the span's
    end (idle_long); a span with no work is one gap, its length deciding which part it is."""
    events = pl.DataFrame({"rank": [0, 0, 0], "step": [1, 1, 1], "category": ["gemm", "gemm", "attention"],
                           "start_ns": [0, 1_200_000, 3_000_000], "end_ns": [1_000_000, 2_000_000, 4_000_000]})
    spans = pl.DataFrame({"rank": [0, 0, 0], "step": [1, 2, 3], "span_start_ns": [0, 0, 0],
                          "span_end_ns": [5_000_000, 400_000, 500_000]})
    rows, _ = anatomy_rows(events, spans, kinds=KINDS)
    got = {(r["step"], r["category"]): r["time_ms"] for r in rows.filter(pl.col("category").is_in(["idle", "idle_long"]))
           .iter_rows(named=True)}
    assert got == pytest.approx({(1, "idle"): 0.2, (1, "idle_long"): 2.0, (2, "idle"): 0.4, (2, "idle_long"): 0.0,
                                 (3, "idle"): 0.0, (3, "idle_long"): 0.5}, abs=1e-12)


def test_anatomy_rows_of_text_categories():
    """A category given as text (not the Enum) is read as its values; one the rules do not know still counts."""
    events = pl.DataFrame({"rank": [0, 0, 0], "step": [1, 1, 2], "category": ["gemm", "nccl_all_reduce", "mystery"],
                           "start_ns": [0, 5, 20], "end_ns": [10, 15, 30]})
    spans = pl.DataFrame({"rank": [0, 0], "step": [1, 2], "span_start_ns": [0, 15], "span_end_ns": [12, 30]})
    same(anatomy_by_sets(events, spans), anatomy_rows(events, spans, kinds=KINDS))
