"""Where each long GPU gap lies (ingest/gap_places.py): the activity the GPU finished last before it, which call of
its name in the step that was, and the gaps summing to idle_long. By hand on small steps, against a brute-force
reading of the same intervals, and against intervals._long_gaps_ns (what idle_long is made of)."""

from __future__ import annotations

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from receipts.ingest.gap_places import START_LABEL, gap_frame, own_span_places, places_ns
from receipts.ingest.intervals import _long_gaps_ns
from receipts.schema.categories import LONG_GAP_NS

MS = 1_000_000


def _brute(steps: list[list[tuple[int, int, int]]], spans: list[tuple[int, int]]) -> list[tuple[int, int, int, int]]:
    """(group, label, call, gap_ns) by walking each step's intervals in start order, one at a time."""
    out = []
    for g, (intervals, (lo, hi)) in enumerate(zip(steps, spans)):
        if not intervals:
            if hi - lo >= LONG_GAP_NS:
                out.append((g, START_LABEL, 0, hi - lo))
            continue
        seen: dict[int, int] = {}
        reach, last = lo, None  # the latest end so far, and the (label, call) that set it
        for label, start, end in sorted(intervals, key=lambda x: x[1]):
            if start - reach >= LONG_GAP_NS:
                out.append((g, *(last if last else (START_LABEL, 0)), start - reach))
            seen[label] = seen.get(label, 0) + 1
            if end >= reach or last is None:
                reach, last = max(reach, end), (label, seen[label])
        if hi - reach >= LONG_GAP_NS:
            out.append((g, *last, hi - reach))
    return out


def _arrays(steps, spans):
    rows = [(g, label, s, e) for g, intervals in enumerate(steps) for label, s, e in sorted(intervals, key=lambda x: x[1])]
    group, label, start, end = (np.array([r[i] for r in rows], np.int64) for i in range(4))
    lo, hi = (np.array([s[i] for s in spans], np.int64) for i in range(2))
    return group, label, start, end, lo, hi


def test_a_gap_follows_the_latest_end_not_the_last_start():
    """Two streams: a long kernel (label 7) overlaps a short one (label 3) that starts later and ends first; the gap
    after both follows the long one, the call counted per name in start order."""
    steps = [[(3, 0, 1 * MS), (7, 1 * MS, 5 * MS), (3, 2 * MS, 3 * MS), (3, 6 * MS, 7 * MS)]]
    group, label, start, end, lo, hi = _arrays(steps, [(0, 7 * MS)])
    g, lab, call, ns = places_ns(group, label, start, end, lo, hi)
    assert list(zip(g.tolist(), lab.tolist(), call.tolist(), ns.tolist())) == [(0, 7, 1, 1 * MS)]


def test_gaps_at_the_span_s_edges_and_an_empty_span():
    """A gap before the span's first activity (no label, call 0), one after its last (that activity's place), a span
    with no activity (one gap, itself), and a gap under 0.5 ms (none)."""
    steps = [[(1, 2 * MS, 3 * MS), (2, 3 * MS + LONG_GAP_NS - 1, 4 * MS)], [], [(5, 0, MS)]]
    spans = [(0, 6 * MS), (10 * MS, 11 * MS), (0, MS)]
    group, label, start, end, lo, hi = _arrays(steps, spans)
    got = list(zip(*(a.tolist() for a in places_ns(group, label, start, end, lo, hi))))
    assert got == [(0, START_LABEL, 0, 2 * MS), (0, 2, 1, 2 * MS), (1, START_LABEL, 0, MS)] == _brute(steps, spans)


_step = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40), st.integers(1, 12)), max_size=12)


@settings(max_examples=examples(200), deadline=None, derandomize=True, database=None)
@given(st.lists(_step, min_size=1, max_size=5))
def test_places_agree_with_a_walk_and_sum_to_the_long_idle(raw):
    """Random steps (times in 0.1 ms: many gaps either side of 0.5 ms, overlaps, repeats of a name): the places are
    the brute-force walk's, and each step's gaps sum to what idle_long counts (intervals._long_gaps_ns)."""
    unit = MS // 10
    steps = [[(label, s * unit, (s + d) * unit) for label, s, d in step] for step in raw]
    spans = [(0, 60 * unit) for _ in steps]
    group, label, start, end, lo, hi = _arrays(steps, spans)
    got = list(zip(*(a.tolist() for a in places_ns(group, label, start, end, lo, hi))))
    assert got == _brute(steps, spans)
    total = np.zeros(len(steps), np.int64)
    for g, _, _, ns in got:
        total[g] += ns
    assert total.tolist() == _long_gaps_ns(group, start, end, lo, hi).tolist()


def test_own_span_places_leave_unclaimed_activities_out():
    """Step codes below 0 (activities no step claimed) have no places; a claimed step's span is its own work."""
    key = np.array([-1, -1, 4, 4, 4], np.int64)
    label = np.array([9, 9, 1, 2, 1], np.int64)
    start = np.array([0, 5 * MS, 0, MS, 3 * MS], np.int64)
    end = np.array([MS, 6 * MS, MS, 2 * MS, 4 * MS], np.int64)
    frame = own_span_places(key, label, start, end)
    assert frame.rows() == [(4, 2, 1, MS)]


def test_gap_frame_names_places_and_skips_a_window_without_steps():
    events = pl.DataFrame({"rank": [0, 0, 0, 0], "step": [3, 3, 3, None], "name": ["k", "k", None, "k"],
                           "start_ns": [0, 2 * MS, 3 * MS, 0], "end_ns": [MS, 2 * MS + 10, 4 * MS, MS]})
    spans = pl.DataFrame({"rank": [0, 0], "step": [3, None], "span_start_ns": [0, 0], "span_end_ns": [4 * MS, 9 * MS]},
                         schema={"rank": pl.Int32, "step": pl.Int64, "span_start_ns": pl.Int64, "span_end_ns": pl.Int64})
    frame = gap_frame(events, spans)
    assert frame.rows() == [(0, 3, "k", 1, 1.0), (0, 3, "k", 2, 0.99999)]


def test_a_copy_s_arrow_is_not_a_bracket_on_a_terminal():
    """A place's name on a terminal (cli/kernel_names.py): Kineto's copy names hold '->' inside parentheses, which
    must not close a bracket that was never opened."""
    from receipts.cli.kernel_names import short_kernel_name

    assert short_kernel_name("Memcpy DtoD (Device -> Device)") == "Memcpy DtoD (…)"
    assert short_kernel_name("void ns::k<a::b<1>, std::plus<float> >(ns::args<4>)") == "ns::k<…>(…)"
