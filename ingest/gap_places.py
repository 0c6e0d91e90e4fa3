"""Where in its step each long GPU gap lies: the place of each gap that `idle_long` sums (schema/categories.py).

`idle_long` is a per-step sum: it says the host stopped launching for a while, not where. A host stall planted in
the loop (a sleep, a synchronize, a CPU-side transform) leaves its gap at the same place in every step; a profiler's
own pause, a page fault or a late collective leaves one here and there. Kept per gap, with its place, the two come
apart: `explain` compares each place's gap time between runs (analysis/components.py, level `gap`), and a gap that
sits at one place in every step of the candidate runs and in no step of the baseline runs is a structural fact,
as a kernel that appeared is.

A gap's place is the activity the GPU finished last before it (the one whose end the gap starts from: with
overlapping streams, the latest end so far, not the last start), as (label, call): the label (a kernel's name, a
copy's category) and which call of that label in the step it was, counted in start order from 1. The pair is the
same in every step of a loop that launches the same work in the same order, and survives work added elsewhere in
the step (an extra GEMM moves every later launch's index, not `nll_loss ... #1`). A gap from the span's start to its
first activity (none where the span is the step's own work, as both profilers' are) has call 0 and no label.

The gaps of a step sum to its `long_idle_ns` (ingest/intervals.py _long_gaps_ns) exactly: the same intervals (of
positive length, clipped to the span), the same threshold.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from receipts.ingest.intervals import gap_walk
from receipts.schema.categories import LONG_GAP_NS
from receipts.schema.model import ANATOMY_GAP_SCHEMA

START_LABEL = -1  # the label of a gap before the span's first activity (call 0)


def places_ns(group: np.ndarray, label: np.ndarray, start: np.ndarray, end: np.ndarray, lo: np.ndarray,
              hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every gap of at least LONG_GAP_NS inside its group's span [lo, hi): (group, label, call, gap_ns), one entry
    per gap, in (group, time) order. `group` (0..n-1, n = lo.size), `label`, `start`, `end`: intervals of positive
    length inside their span, sorted by (group, start); `label` an integer code per interval (>= 0). A group
    without intervals is one gap, its span (label START_LABEL, call 0)."""
    n = lo.size
    g_out: list[np.ndarray] = []
    l_out: list[np.ndarray] = []
    c_out: list[np.ndarray] = []
    ns_out: list[np.ndarray] = []
    if start.size:
        reach, first, last, gap = gap_walk(group, start, end, lo)
        # The interval that set `reach`: the first of a group always does (its own end), so one accumulate over the
        # whole array never reaches back into the group before.
        setter = np.maximum.accumulate(np.where(end == reach, np.arange(start.size), -1))
        inner = np.flatnonzero((gap >= LONG_GAP_NS) & ~first)    # after an interval
        lead = np.flatnonzero((gap >= LONG_GAP_NS) & first)      # from the span's start
        tail_rows = np.flatnonzero(last)
        tail = hi[group[tail_rows]] - reach[tail_rows]
        tail_rows, tail = tail_rows[tail >= LONG_GAP_NS], tail[tail >= LONG_GAP_NS]
        after = np.r_[setter[inner - 1], setter[tail_rows]]
        call = _calls(group, label, after) if after.size else np.zeros(0, np.int64)
        g_out += [group[lead], group[after]]
        l_out += [np.full(lead.size, START_LABEL, np.int64), label[after].astype(np.int64)]
        c_out += [np.zeros(lead.size, np.int64), call]
        ns_out += [gap[lead], np.r_[gap[inner], tail]]
        # time order within a group: a gap before row j sorts at 2j - 1, one after the group's last row at 2j + 1
        when = [2 * lead - 1, np.r_[2 * inner - 1, 2 * tail_rows + 1]]
    else:
        when = []
    empty = np.ones(n, bool)
    empty[group] = False
    whole = hi - lo
    idle = np.flatnonzero(empty & (whole >= LONG_GAP_NS))
    g_out.append(idle)
    l_out.append(np.full(idle.size, START_LABEL, np.int64))
    c_out.append(np.zeros(idle.size, np.int64))
    ns_out.append(whole[idle])
    when.append(np.full(idle.size, -1))
    g, lab, c, ns = (np.concatenate(x).astype(np.int64) for x in (g_out, l_out, c_out, ns_out))
    order = np.lexsort((np.concatenate(when).astype(np.int64), g))
    return g[order], lab[order], c[order], ns[order]


def _calls(group: np.ndarray, label: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Which call of its label in its group each of `rows` is (1 for the first), counted in row order."""
    order = np.lexsort((label, group))  # stable: rows of one (group, label) stay in row order
    g, lab = group[order], label[order]
    new = np.r_[True, (g[1:] != g[:-1]) | (lab[1:] != lab[:-1])]
    position = np.arange(order.size)
    nth = position - np.maximum.accumulate(np.where(new, position, 0)) + 1
    calls = np.empty(order.size, np.int64)
    calls[order] = nth
    return calls[rows]


def gap_frame(events: pl.DataFrame, spans: pl.DataFrame) -> pl.DataFrame:
    """ANATOMY_GAP_SCHEMA rows of events (rank, step, name, start_ns, end_ns) in their steps' spans (rank, step,
    span_start_ns, span_end_ns): every long gap of every step, where it lies. Events of a step without a span, and
    a window without steps (step null: its idle is kept whole, ingest/intervals.py), have none."""
    keys = ["rank", "step"]
    sp = (spans.filter(pl.col("step").is_not_null())
          .select(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int64), "span_start_ns", "span_end_ns")
          .sort(keys))
    if sp.height == 0:
        return pl.DataFrame(schema=ANATOMY_GAP_SCHEMA)
    ev = (events.select(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int64), pl.col("name").cast(pl.Utf8),
                        "start_ns", "end_ns")
          .join(sp.with_row_index("group"), on=keys, how="inner"))
    lo, hi = sp["span_start_ns"].to_numpy().astype(np.int64), sp["span_end_ns"].to_numpy().astype(np.int64)
    group = ev["group"].to_numpy().astype(np.int64)
    start = np.maximum(ev["start_ns"].to_numpy().astype(np.int64), lo[group])
    end = np.minimum(ev["end_ns"].to_numpy().astype(np.int64), hi[group])
    names = ev["name"].fill_null("(unnamed)")
    labels = names.unique(maintain_order=True)
    code = names.replace_strict(labels, pl.Series(np.arange(labels.len())), return_dtype=pl.Int64).to_numpy()
    inside = end > start
    group, code, start, end = group[inside], code[inside], start[inside], end[inside]
    order = np.lexsort((start, group))
    g, lab, call, ns = places_ns(group[order], code[order], start[order], end[order], lo, hi)
    text = labels.to_list()
    return pl.DataFrame({
        "rank": sp["rank"].gather(g), "step": sp["step"].gather(g),
        "after": pl.Series([text[i] if i >= 0 else None for i in lab.tolist()], dtype=pl.Utf8),
        "call": call, "gap_ms": ns / 1e6}, schema=ANATOMY_GAP_SCHEMA)


def own_span_places(key: np.ndarray, label: np.ndarray, start: np.ndarray, end: np.ndarray) -> pl.DataFrame:
    """The long gaps of activities sorted by (key, start), one step per key value, each step's span its own work
    (first start, last end), as intervals.sorted_step_ns measures it without spans: columns key, label, call, gap_ns.
    Keys below 0 (activities no step claimed) have none."""
    change = np.r_[True, key[1:] != key[:-1]] if key.size else np.zeros(0, bool)
    first = np.flatnonzero(change)
    group = np.cumsum(change) - 1
    lo = start[first]
    hi = np.maximum.reduceat(end, first) if first.size else np.zeros(0, np.int64)
    positive = end > start
    g, lab, call, ns = places_ns(group[positive], label[positive], start[positive], end[positive], lo, hi)
    frame = pl.DataFrame({"key": key[first][g], "label": lab, "call": call, "gap_ns": ns},
                         schema={"key": pl.Int64, "label": pl.Int64, "call": pl.Int64, "gap_ns": pl.Int64})
    return frame.filter(pl.col("key") >= 0)
