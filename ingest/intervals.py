"""Interval arithmetic shared by the profiler parsers: busy time is a union, never a sum.

Summing kernel durations over-counts wherever streams overlap (nsys-ai PR #158); exposed
communication is the part of the NCCL union not covered by the compute union on the same device.

Input `events`: one row per GPU activity with columns
    rank (i32), step (i64, null = not attributed to a step), category (str, or an Enum: its codes are
    grouped without ranking text), start_ns, end_ns (i64).
Input `spans`: one row per (rank, step) with span_start_ns, span_end_ns: the window idle is measured
in (the caller says which: the GPU span of the step's own work, or the step marker's window).

The core is one sort per interval set and linear numpy passes (segmented running max, reduceat,
bincount): millions of kernels merge in about a second, where group-by/over() pipelines took minutes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

import numpy as np
import polars as pl

from receipts.schema.categories import DECOMPOSITION, IDLE_LONG, LONG_GAP_NS, NOT_KERNELS

_KEYS = ["rank", "step"]


def _codes(column: pl.Series) -> np.ndarray:
    """Integer sort codes for a key column; nulls sort last."""
    if isinstance(column.dtype, pl.Enum):
        column = column.to_physical()  # an Enum's codes already order like it: no ranking of text
    elif column.dtype == pl.Utf8 or column.dtype == pl.Categorical:
        column = column.rank("dense")
    values = column.cast(pl.Int64)
    sentinel = int(cast(int, values.max() or 0)) + 1
    return values.fill_null(sentinel).to_numpy()


def _combined_key(frame: pl.DataFrame, keys: list[str]) -> np.ndarray:
    """One int64 per row that orders like the tuple of key columns (dense codes, mixed radix)."""
    key = np.zeros(frame.height, dtype=np.int64)
    for k in keys:
        codes = _codes(frame[k])
        codes = codes - codes.min() if codes.size else codes
        key = key * (int(codes.max()) + 1 if codes.size else 1) + codes
    return key


def sort_order(key: np.ndarray, start: np.ndarray, *, stable: bool = True) -> np.ndarray:
    """Indices sorting by (key, start): one argsort of a packed int64 when it fits, else lexsort. Without
    `stable`, rows equal in both come in any order (numpy's quicksort, about twice as fast)."""
    if start.size == 0:
        return np.zeros(0, dtype=np.int64)
    lo = int(start.min())
    width = int(start.max()) - lo + 1
    if width < 2**62 and (int(key.max()) + 1) * width < 2**62:  # (a NULL start, int64's least, is as wide as it gets)
        # Packed in one array; int64 wraps, so a step out of range in between still ends in range.
        packed = key.astype(np.int64)
        packed *= width
        packed += start
        packed -= lo
        return np.argsort(packed, kind="stable" if stable else None)
    return np.lexsort((start, key))


def _grouped(events: pl.DataFrame, keys: list[str]) -> tuple[pl.DataFrame, np.ndarray, np.ndarray, np.ndarray]:
    """Sort by keys + start; return (one row of keys per group, group index, start, end) per event.

    numpy's lexsort over integer codes: polars' multi-column sort with a string key was the hot spot."""
    start = events["start_ns"].to_numpy().astype(np.int64)
    end = events["end_ns"].to_numpy().astype(np.int64)
    key = _combined_key(events, keys)
    order = sort_order(key, start)
    sorted_key = key[order]
    new = np.r_[True, sorted_key[1:] != sorted_key[:-1]] if order.size else np.zeros(0, dtype=bool)
    group = np.cumsum(new) - 1
    key_rows = events.select(keys)[order[new]]
    return key_rows, group, start[order], end[order]


def _segmented_running_max(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Running max of `values` that restarts at each group (groups contiguous, values >= 0)."""
    if values.size == 0:
        return values
    span = int(values.max()) + 1
    n_groups = int(group[-1]) + 1
    if span * n_groups < 2**62:
        # Lift each group above every earlier one so one global accumulate never crosses a boundary.
        lifted = values + group.astype(np.int64) * span
        return np.maximum.accumulate(lifted) - group.astype(np.int64) * span
    out = np.empty_like(values)
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    for lo, hi in zip(starts, np.r_[starts[1:], values.size]):
        out[lo:hi] = np.maximum.accumulate(values[lo:hi])
    return out


def _islands(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Disjoint islands (group, start, end) of intervals sorted by (group, start)."""
    if start.size == 0:
        return group, start, end
    base = min(int(start.min()), int(end.min()))
    s, e = start - base, end - base
    run_max = _segmented_running_max(e, group)
    prev_max = np.r_[-1, run_max[:-1]]
    new = np.r_[True, group[1:] != group[:-1]] | (s > prev_max)
    idx = np.flatnonzero(new)
    island_end = np.maximum.reduceat(e, idx)
    return group[idx], s[idx] + base, island_end + base


def islands(events: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Merge overlapping intervals per key into disjoint islands (start_ns, end_ns)."""
    key_rows, group, start, end = _grouped(events, keys)
    g, s, e = _islands(group, start, end)
    if not g.size:
        return pl.DataFrame(schema={**{k: events.schema[k] for k in keys}, "start_ns": pl.Int64, "end_ns": pl.Int64})
    return key_rows[g].with_columns(pl.Series("start_ns", s, dtype=pl.Int64), pl.Series("end_ns", e, dtype=pl.Int64))


def union_ns(events: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Length of the union of intervals per key, as column `union_ns`."""
    key_rows, group, start, end = _grouped(events, keys)
    g, s, e = _islands(group, start, end)
    total = np.bincount(g, weights=(e - s), minlength=key_rows.height).astype(np.int64)
    return key_rows.with_columns(pl.Series("union_ns", total, dtype=pl.Int64))


def intersection_ns(a: pl.DataFrame, b: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Per key, the time covered by both interval sets (each first merged into islands)."""
    isl_a, isl_b = islands(a, keys).with_columns(pl.lit(0).alias("_set")), islands(b, keys).with_columns(pl.lit(1).alias("_set"))
    both = pl.concat([isl_a, isl_b])
    if both.height == 0:
        return pl.DataFrame(schema={**{k: a.schema[k] for k in keys}, "both_ns": pl.Int64})
    key_rows, group, _, _ = _grouped(both.with_columns(pl.lit(0).alias("start_ns"), pl.lit(0).alias("end_ns")), keys)
    ordered = both[sort_order(_combined_key(both, keys), both["start_ns"].to_numpy().astype(np.int64))]
    # Edges: +1 at an island start, -1 at its end, per set. Islands within one set are disjoint, so the
    # running count of each set is 0 or 1, and it returns to 0 at every group boundary.
    n = ordered.height
    t = np.r_[ordered["start_ns"].to_numpy(), ordered["end_ns"].to_numpy()]
    g = np.r_[group, group]
    is_b = np.r_[ordered["_set"].to_numpy(), ordered["_set"].to_numpy()].astype(bool)
    delta = np.r_[np.ones(n, np.int64), -np.ones(n, np.int64)]
    order = np.lexsort((delta, t, g))  # at equal t, ends (-1) first: touching islands do not overlap
    t, g, is_b, delta = t[order], g[order], is_b[order], delta[order]
    count_a = np.cumsum(np.where(is_b, 0, delta))
    count_b = np.cumsum(np.where(is_b, delta, 0))
    dt = np.r_[t[1:] - t[:-1], 0]
    same_group = np.r_[g[1:] == g[:-1], False]
    covered = (count_a > 0) & (count_b > 0) & same_group
    total = np.bincount(g[covered], weights=dt[covered], minlength=key_rows.height).astype(np.int64)
    return key_rows.with_columns(pl.Series("both_ns", total, dtype=pl.Int64)).filter(pl.col("both_ns") > 0)


def sorted_step_ns(key: np.ndarray, category: np.ndarray, start: np.ndarray, end: np.ndarray,
                   categories: pl.Series, spans: tuple[np.ndarray, np.ndarray] | None = None,
                   counted: np.ndarray | None = None, *, kinds: Mapping[str, str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """anatomy_rows' integers for activities sorted by (key, start), one step per key value, its span its own
    work unless `spans` says otherwise: (one row per key: key, span_start_ns and span_end_ns of its own work (first
    start, last end) and STEP_NS; one row per
    (key, category) present: key, category, union_ns). `category`: codes into `categories`; `kinds`: each
    category's kind (CategoryRules.kinds), which decides what is communication and what compute.

    Every union is one linear pass over rows already in order (a mask keeps the order), where anatomy_rows sorts
    each interval set again (_masked_unions). When no interval ends before it starts, the overlap of two unions is
    |A| + |B| - |A u B| and the in-span values are the unions themselves (an interval of length 0 adds nothing);
    otherwise the overlap is intersection_ns' edge sweep and in-span values count only intervals of positive
    length, as anatomy_rows' clipping leaves them.

    `spans`: (start, end) per key value in order, when the in-span values are to count the intervals clipped to
    them (anatomy_rows); a key whose span starts where it ends has nothing inside. Clipping the start to a bound
    that is the same for the whole key keeps the rows' order, so the clipped rows need no second sort.
    `counted`: the rows counted as kernels (None: all); a row left out is the continuation of an activity counted
    in another piece of time (ingest/nsys_anatomy.py, a window without steps read in bins of start times)."""
    change = np.r_[True, key[1:] != key[:-1]] if key.size else np.zeros(0, bool)
    first = np.flatnonzero(change)
    group = np.cumsum(change) - 1
    n = first.size
    union, proper = _masked_unions(group, start, end, n)
    member = categories.cast(pl.Utf8).to_list()  # a few dozen at most

    def of(wanted) -> np.ndarray:
        return np.array([m is not None and wanted(m) for m in member], bool)[category]

    comm, compute = of(lambda m: kinds.get(m) == "communication"), of(lambda m: kinds.get(m) == "compute")
    work = comm | compute
    kernel = of(lambda m: m in kinds and m not in NOT_KERNELS)
    comm_ns, compute_ns, kernel_ns, busy = union(comm), union(compute), union(work), union(None)
    both = (_both_swept(group, start, end, comm, compute, n) if not proper and (end[work] < start[work]).any()
            else comm_ns + compute_ns - kernel_ns)
    if spans is not None:
        clipped_start, clipped_end = np.maximum(start, spans[0][group]), np.minimum(end, spans[1][group])
        inside = clipped_end > clipped_start
        clipped, _ = _masked_unions(group[inside], clipped_start[inside], clipped_end[inside], n)
        busy_in, c_in, m_in = clipped(None), clipped(compute[inside]), clipped(comm[inside])
        cm = c_in + m_in - clipped(work[inside])
        long_idle = _long_gaps_ns(group[inside], clipped_start[inside], clipped_end[inside], spans[0], spans[1])
    else:
        if proper:
            busy_in, c_in, m_in, cm = busy, compute_ns, comm_ns, both
        else:
            positive = end > start
            busy_in, c_in, m_in = union(positive), union(positive & compute), union(positive & comm)
            cm = c_in + m_in - union(positive & work)
        positive = end > start
        own_end = np.maximum.reduceat(end, first) if n else np.zeros(0, np.int64)
        long_idle = _long_gaps_ns(group[positive], start[positive], end[positive], start[first], own_end)
    step_ns = pl.DataFrame({
        "key": key[first], "span_start_ns": start[first],
        "span_end_ns": np.maximum.reduceat(end, first) if n else np.zeros(0, np.int64),
        "union_ns": busy, "busy_in_span_ns": busy_in,
        "kernels": np.bincount(group[kernel if counted is None else kernel & counted],
                               minlength=n).astype(np.int64),
        "comm_ns": comm_ns, "both_ns": both, "c_ns": c_in, "m_ns": m_in, "cm_ns": cm, "long_idle_ns": long_idle})
    keys, codes, unions = [], [], []
    for code in np.flatnonzero(np.bincount(category, minlength=len(categories))):
        rows = category == code
        present = np.flatnonzero(np.bincount(group[rows], minlength=n))
        keys.append(key[first[present]])
        codes.append(np.full(present.size, code, np.uint32))
        unions.append(union(rows)[present])
    category_ns = pl.DataFrame({
        "key": np.concatenate(keys) if keys else key[:0],
        "category": categories.gather(np.concatenate(codes) if codes else np.zeros(0, np.uint32)),
        "union_ns": np.concatenate(unions) if unions else np.zeros(0, np.int64)})
    return step_ns, category_ns


def gap_walk(group: np.ndarray, start: np.ndarray, end: np.ndarray, lo: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The walk both the long idle (_long_gaps_ns) and each long gap's place (ingest/gap_places.py) read, over
    intervals sorted by (group, start), at least one: per interval the latest end so far within its group (reach),
    whether it is its group's first and last, and the gap before it (from the span's start `lo` for a first)."""
    base = int(min(int(start.min()), int(lo.min())))
    reach = _segmented_running_max(end - base, group) + base   # the latest end so far within the group
    first = np.r_[True, group[1:] != group[:-1]]
    last = np.r_[group[1:] != group[:-1], True]
    before = np.where(first, lo[group], np.r_[0, reach[:-1]])  # where the GPU went idle before this interval
    return reach, first, last, start - before


def _long_gaps_ns(group: np.ndarray, start: np.ndarray, end: np.ndarray, lo: np.ndarray, hi: np.ndarray
                  ) -> np.ndarray:
    """Per group (0..n-1, n = lo.size), the GPU's idle time inside [lo, hi) held in gaps of at least LONG_GAP_NS
    (schema/categories.py): the stretches between the group's merged intervals, and from the span's start to the
    first and from the last to its end, each counted whole when it is that long and not at all when shorter. The
    intervals: of positive length, inside their span, sorted by (group, start). A group without any is one gap,
    its span. The gaps of a group sum to its span less the union of its intervals (its idle)."""
    n = lo.size
    out = np.zeros(n, np.int64)
    if not n:
        return out
    if not start.size:
        gap = hi - lo
        return np.where(gap >= LONG_GAP_NS, gap, 0).astype(np.int64)
    reach, first, last, gap = gap_walk(group, start, end, lo)
    starts = np.flatnonzero(first)  # integers summed as integers: a float's 53 bits do not hold every export's ns
    out[group[starts]] += np.add.reduceat(np.where(gap >= LONG_GAP_NS, gap, 0), starts)
    tail = hi[group[last]] - reach[last]
    out[group[last]] += np.where(tail >= LONG_GAP_NS, tail, 0)
    empty = np.ones(n, bool)
    empty[group] = False
    whole = hi[empty] - lo[empty]
    out[empty] = np.where(whole >= LONG_GAP_NS, whole, 0)
    return out


def _masked_unions(group: np.ndarray, start: np.ndarray, end: np.ndarray, n: int):
    """(union, proper): union(rows) is the length of the union of the intervals a mask selects (None: all) per
    group, for intervals sorted by (group, start) with groups 0..n-1; proper: no interval ends before it starts.

    Proper intervals whose groups fit side by side in an int64 are lifted apart (group g moved up by g times the
    time range), so one running maximum of ends needs no reset between groups and each interval adds what it
    reaches past the ones before it: a few passes. Otherwise the islands, as union_ns merges them."""
    proper = bool((end >= start).all())
    if proper and start.size:
        base = int(start.min())
        span = int(end.max()) - base + 1
        if n * span < 1 << 62:
            lift = group * span
            lifted_start, lifted_end = (start - base) + lift, (end - base) + lift
            del lift

            def lifted(rows: np.ndarray | None) -> np.ndarray:
                g, s, e = ((group, lifted_start, lifted_end) if rows is None
                           else (group[rows], lifted_start[rows], lifted_end[rows]))
                if not g.size:
                    return np.zeros(n, np.int64)
                # What each interval reaches past both its start and every end before it.
                gain = np.empty_like(e)
                gain[0] = e[0] - s[0]
                np.subtract(e[1:], np.maximum(s[1:], np.maximum.accumulate(e)[:-1]), out=gain[1:])
                np.maximum(gain, 0, out=gain)
                return np.bincount(g, weights=gain, minlength=n).astype(np.int64)
            return lifted, proper

    def merged(rows: np.ndarray | None) -> np.ndarray:
        g, s, e = (group, start, end) if rows is None else (group[rows], start[rows], end[rows])
        gi, si, ei = _islands(g, s, e)
        return np.bincount(gi, weights=(ei - si), minlength=n).astype(np.int64)
    return merged, proper


def _both_swept(group: np.ndarray, start: np.ndarray, end: np.ndarray, a: np.ndarray, b: np.ndarray,
                n: int) -> np.ndarray:
    """Per group, the time both row sets `a` and `b` cover, by intersection_ns' edge sweep."""
    def frame(rows: np.ndarray) -> pl.DataFrame:
        return pl.DataFrame({"group": group[rows], "start_ns": start[rows], "end_ns": end[rows]})
    hit = intersection_ns(frame(a), frame(b), ["group"])
    both = np.zeros(n, np.int64)
    both[hit["group"].to_numpy()] = hit["both_ns"].to_numpy()
    return both


def anatomy_rows(events: pl.DataFrame, spans: pl.DataFrame, *, kinds: Mapping[str, str]
                 ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per (rank, step): time by category (union), idle inside the span, exposed comm; `kinds`: each category's
    kind (CategoryRules.kinds).

    Returns (rows[rank, step, category, time_ms], per_step[rank, step, gpu_ms, kernels, comm_ms, overlap_pct]).
    One sort of the events by (rank, step, start), then sorted_step_ns' passes; the in-span numbers count each
    event clipped to its step's span (a span may start before its first event and end before its last: work
    spilling past the marker is not idle). Events of a (rank, step) without a span count in its category rows
    only; a span without events gets zeros. tests/interval_reference.py computes the same by interval sets."""
    ev = events.select(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int64), "category", "start_ns", "end_ns")
    sp = spans.select(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int64), "span_start_ns", "span_end_ns")
    category, categories = _category_codes(ev["category"])
    start = ev["start_ns"].to_numpy().astype(np.int64)
    end = ev["end_ns"].to_numpy().astype(np.int64)
    key = _combined_key(ev, _KEYS)
    order = sort_order(key, start)
    key, start, end, category = key[order], start[order], end[order], category[order]
    first = order[np.r_[True, key[1:] != key[:-1]]] if order.size else order
    key_rows = ev.select(_KEYS)[first]  # one row per (rank, step), in sorted order
    bounds = key_rows.join(sp, on=_KEYS, how="left", nulls_equal=True, maintain_order="left")
    if bounds.height != key_rows.height:
        raise ValueError("anatomy_rows: more than one span for a (rank, step)")
    spanned = bounds["span_start_ns"].is_not_null().to_numpy()
    lo = np.where(spanned, bounds["span_start_ns"].fill_null(0).to_numpy(), 0).astype(np.int64)
    hi = np.where(spanned, bounds["span_end_ns"].fill_null(0).to_numpy(), 0).astype(np.int64)  # lo = hi: nothing inside
    step_ns, category_ns = sorted_step_ns(key, category, start, end, categories, spans=(lo, hi), kinds=kinds)
    group_of = np.searchsorted(step_ns["key"].to_numpy(), category_ns["key"].to_numpy())  # keys ascend
    by_cat = key_rows[group_of].with_columns(category_ns["category"], category_ns["union_ns"])
    ints = pl.concat([key_rows, step_ns.select(STEP_NS)], how="horizontal")
    whole = (pl.col("span_end_ns") - pl.col("span_start_ns")).clip(0)  # a span without work: one gap, itself
    totals = (sp.join(ints, on=_KEYS, how="left", nulls_equal=True, maintain_order="left")
              .with_columns(pl.col("long_idle_ns").fill_null(pl.when(whole >= LONG_GAP_NS).then(whole).otherwise(0)))
              .with_columns(pl.col(*STEP_NS).fill_null(0)))
    return anatomy_from_ns(by_cat, totals)


def _category_codes(column: pl.Series) -> tuple[np.ndarray, pl.Series]:
    """(a code per row, the categories the codes index): an Enum's own codes; text is made an Enum of its values
    first (a null category is a code of its own, past the others)."""
    dtype = column.dtype
    if not isinstance(dtype, pl.Enum):
        values = column.cast(pl.Utf8)
        dtype = pl.Enum(values.drop_nulls().unique().sort().to_list())
        column = values.cast(dtype)
    categories = pl.Series(dtype.categories)
    codes = column.to_physical().cast(pl.Int64)
    if codes.null_count():
        codes, categories = codes.fill_null(categories.len()), categories.extend_constant(None, 1)
    return codes.to_numpy().astype(np.uint32), categories.cast(pl.Utf8)


# Integers per (rank, step) that anatomy_from_ns turns into rows: the union of all work (union_ns), of the work
# inside the span (busy_in_span_ns), kernels counted, the union of communication (comm_ns) and its overlap with
# compute (both_ns); inside the span, the union of compute (c_ns), of communication (m_ns) and their overlap (cm_ns),
# and the idle held in gaps of at least LONG_GAP_NS (long_idle_ns, _long_gaps_ns).
STEP_NS = ("union_ns", "busy_in_span_ns", "kernels", "comm_ns", "both_ns", "c_ns", "m_ns", "cm_ns", "long_idle_ns")


def anatomy_from_ns(by_cat: pl.DataFrame, totals: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """anatomy_rows' result from its integers: `by_cat` (rank, step, category, union_ns) and `totals` (rank,
    step, span_start_ns, span_end_ns and STEP_NS, one row per span). The milliseconds are computed here once for
    all steps, so whoever computed the integers (in chunks, or with numpy on sorted arrays) gets the same floats."""
    by_cat = by_cat.select(*_KEYS, pl.col("category").cast(pl.Utf8), (pl.col("union_ns") / 1e6).alias("time_ms"))
    # The non-overlapping decomposition of the span: compute only + communication hidden under compute +
    # exposed communication + memory work under neither + idle in short gaps + idle in long gaps = the span,
    # exactly, so that a step's parts add up to its time and a change in one part is not counted twice in another.
    # The idle is split in integers (the long part at most the whole), so the two parts add up to it exactly.
    idle_ns = (pl.col("span_end_ns") - pl.col("span_start_ns") - pl.col("busy_in_span_ns")).clip(0)
    # A stall is a step's: a window without steps (step null) keeps its idle whole, as its length decides how it is
    # read (in bins of time past a size, where a gap across a bin's end would count as two shorter ones).
    long_ns = pl.when(pl.col("step").is_null()).then(0).otherwise(pl.min_horizontal(pl.col("long_idle_ns"), idle_ns))
    per_step = totals.with_columns(
        ((pl.col("c_ns") - pl.col("cm_ns")) / 1e6).alias("compute_only"),
        (pl.col("cm_ns") / 1e6).alias("comm_hidden"),
        ((pl.col("m_ns") - pl.col("cm_ns")) / 1e6).alias("exposed_comm"),
        ((pl.col("busy_in_span_ns") - (pl.col("c_ns") + pl.col("m_ns") - pl.col("cm_ns"))).clip(0)
         / 1e6).alias("memcpy_only"),
        (pl.col("union_ns") / 1e6).alias("gpu_ms"),
        ((idle_ns - long_ns) / 1e6).alias("idle"),
        (long_ns / 1e6).alias(IDLE_LONG),
        (pl.col("comm_ns") / 1e6).alias("comm_ms"),
        pl.when(pl.col("comm_ns") > 0).then(100.0 * pl.col("both_ns") / pl.col("comm_ns")).otherwise(None).alias("overlap_pct"),
    )
    derived = per_step.unpivot(DECOMPOSITION, index=_KEYS, variable_name="category", value_name="time_ms")
    rows = pl.concat([by_cat, derived]).sort([*_KEYS, "category"], nulls_last=True)
    return rows, per_step.select(*_KEYS, "gpu_ms", "kernels", "comm_ms", "overlap_pct")


def kernel_steps(kernels: pl.DataFrame) -> pl.DataFrame:
    """Kernel time per (rank, step, category, name, shape) from kernel activities (rank, step, category, name,
    start_ns, end_ns and, where known, shape: the launch shape, ingest/launch_shape.py): calls and the sum of
    durations in ms. Activities without a rank are left out; step null is the one window of a capture without step
    markers (the caller passes only attributed activities otherwise)."""
    shape = pl.col("shape") if "shape" in kernels.columns else pl.lit(None, dtype=pl.Utf8).alias("shape")
    return (kernels.filter(pl.col("rank").is_not_null())
            .group_by("rank", "step", "category", pl.col("name").fill_null("(unnamed)"), shape)
            .agg(pl.len().cast(pl.Int64).alias("calls"),
                 ((pl.col("end_ns") - pl.col("start_ns")).sum() / 1e6).alias("time_ms")))
