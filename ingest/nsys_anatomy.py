"""The step-time anatomy of an Nsight Systems export from its kept GPU activity (ingest/nsys_activity.py): per
(rank, step) and category, the unions of busy time, idle inside the step's span and exposed communication; the
per-activity events the straggler analysis reads; kernel calls and time per step and name; the NVTX ranges.

- idle (ingest.intervals): measured inside the step's GPU span [first start, last end] of its own attributed work,
  not inside the NVTX range: CPU-side ranges lead the GPU by the launch queue depth, so a marker window would count
  the queue as idle.
- warm-up: the first step of each rank is marked warmup (compile / first-step badput).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import polars as pl

from receipts.ingest.heap import trim_c_heap
from receipts.ingest.gap_places import START_LABEL, own_span_places
from receipts.ingest.intervals import STEP_NS, anatomy_from_ns, sort_order, sorted_step_ns
from receipts.ingest.launch_shape import shape_expr
from receipts.ingest.nsys_activity import COPY_LABEL, KIND, Activity, step_of_codes
from receipts.schema.model import ANATOMY_GAP_SCHEMA, ANATOMY_NVTX_SCHEMA, ANATOMY_ROW_SCHEMA, ANATOMY_STEP_SCHEMA

_spilled = itertools.count()  # names the events' files apart, in a scratch folder parses may share


def raw_events(activity: pl.DataFrame, names: dict[int, str]) -> pl.DataFrame:
    """Every activity of a ranked process, named (--keep-raw; written as Parquet beside the store)."""
    return (activity.filter(pl.col("rank").is_not_null())
            .with_columns(pl.col("name_id").replace_strict(names, default=None, return_dtype=pl.Utf8).alias("name"))
            .with_columns(pl.col("category").cast(pl.Utf8))
            .with_columns(pl.when(pl.col("kind") == KIND["kernel"]).then(pl.col("name"))
                          .otherwise(pl.col("category")).alias("name"))
            .with_columns(pl.col("short_id").replace_strict(names, default=None, return_dtype=pl.Utf8)
                          .alias("short_name"))
            .select("rank", "step", "category", "name", "start_ns", "end_ns", pl.col("stream_id").alias("stream"),
                    "short_name"))



def anatomy_frames(activity: Activity, with_graphs: bool, step_ranges: pl.DataFrame, rank_of: dict, has_steps: bool,
             names: dict[int, str], spill: Path | None = None
             ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame | pl.LazyFrame, pl.DataFrame]:
    """(rows, steps, kernel_steps, events, gap places: ANATOMY_GAP_SCHEMA) from the kept activity of ranked
    processes. Each step group of each
    process (Activity) is sorted once by (step, start); every number is per (rank, step), so the interval arithmetic
    runs over chunks of whole steps of those sorted arrays (its intermediates follow the chunk, not the capture),
    giving integers per step that intervals.anatomy_from_ns turns into milliseconds for all steps at once."""
    categories = pl.Series(activity.rules.enum.categories, dtype=activity.rules.enum)
    kinds = activity.rules.kinds
    per_step: list[pl.DataFrame] = []
    per_category: list[pl.DataFrame] = []
    per_gap: list[pl.DataFrame] = []
    events: list[pl.DataFrame] = []
    spilled: list[Path] = []
    trim_c_heap()  # what the stream freed
    for pid in activity.pids():
        rank = rank_of.get(pid)
        if rank is None:
            activity.drop(pid)  # not ranked
            continue
        pieces = (((activity.take(pid, group, with_graphs), None, None) for group in activity.groups(pid))
                  if has_steps else window_pieces(activity.window(pid, with_graphs)))
        for columns, counted, until in pieces:
            step_parts, category_parts, made, gap_parts = piece_anatomy(columns, counted, until, rank,
                                                                        activity.step_values, categories, spill,
                                                                        kinds=kinds)
            del columns
            per_step += step_parts
            per_category += category_parts
            per_gap += gap_parts
            if isinstance(made, pl.DataFrame):
                events.append(made)
            else:
                spilled += made
            trim_c_heap()
    if not per_step:  # no ranked activity: the frames' columns, no rows
        none = np.zeros(0, np.int64)
        per_step, per_category = ([_ranked(frame, 0, activity.step_values)] for frame in sorted_step_ns(
            none.astype(np.int32), none.astype(np.uint8), none, none, categories, kinds=kinds))
    # One chunk each, as one frame computed for the whole capture would be: polars divides a chunk of one value
    # exactly and a longer one through the reciprocal (1 ulp apart).
    totals, by_category = pl.concat(per_step, rechunk=True), pl.concat(per_category, rechunk=True)
    if not has_steps:
        totals, by_category = added_up(totals, by_category)
    rows, step_rows = anatomy_from_ns(by_category, totals)
    if has_steps:
        markers = (step_ranges.with_columns(pl.col("pid_key").replace_strict(rank_of, default=None,
                                                                             return_dtype=pl.Int32).alias("rank"))
                   .filter(pl.col("rank").is_not_null())
                   .group_by("rank", "step").agg(pl.col("range_start_ns").min().alias("start_ns"),
                                                 ((pl.col("range_end_ns") - pl.col("range_start_ns")).max() / 1e6)
                                                 .alias("wall_ms")))
    else:
        markers = totals.select("rank", "step", pl.col("span_start_ns").alias("start_ns"),
                                ((pl.col("span_end_ns") - pl.col("span_start_ns")) / 1e6).alias("wall_ms"))
    markers = markers.with_columns(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int64))
    steps = (markers.join(step_rows, on=["rank", "step"], how="left", nulls_equal=True)
             .with_columns(pl.col("gpu_ms", "comm_ms").fill_null(0.0), pl.col("kernels").fill_null(0),
                           (pl.lit(has_steps) & (pl.col("step") == pl.col("step").min().over("rank"))).alias("warmup")))
    warm = steps.select("rank", "step", "warmup")
    rows = rows.join(warm, on=["rank", "step"], how="left", nulls_equal=True).with_columns(pl.col("warmup").fill_null(False))
    return (rows.select([pl.col(c).cast(t) for c, t in ANATOMY_ROW_SCHEMA.items()]).sort("rank", "step", "category"),
            steps.select([pl.col(c).cast(t) for c, t in ANATOMY_STEP_SCHEMA.items()]).sort("rank", "step"),
            _kernel_steps(activity, rank_of, names),
            pl.scan_parquet(spilled) if spilled else pl.concat(events) if events else pl.DataFrame(schema={
                "rank": pl.Int32, "step": pl.Int64, "category": activity.rules.enum, "start_ns": pl.Int64,
                "end_ns": pl.Int64}),
            _gap_rows(per_gap, names, categories))


def window_pieces(bins: Iterator[tuple[tuple[np.ndarray, ...], int | None]]
                   ) -> Iterator[tuple[tuple[np.ndarray, ...], np.ndarray | None, int | None]]:
    """A window's bins of start times (Activity.window) as pieces of disjoint time whose integers add up:
    (columns, counted, until). Each activity running past its bin's end (`until`) counts up to there, and from
    there on as a continuation carried into the next bin, which counts in the unions but is no activity of its
    own (`counted`: the mask of the rows that are; None: every row)."""
    carry: tuple[np.ndarray, ...] | None = None
    for columns, bin_end in bins:
        counted = None
        if carry is not None:
            counted = np.r_[np.zeros(carry[0].size, bool), np.ones(columns[0].size, bool)]
            columns = tuple(np.concatenate(pair) for pair in zip(carry, columns))
            carry = None
        end = columns[3]
        if bin_end is not None and (over := end > bin_end).any():
            carry = tuple(np.full(int(np.count_nonzero(over)), bin_end, np.int64) if i == 2 else column[over]
                          for i, column in enumerate(columns))
        yield columns, counted, bin_end


def added_up(totals: pl.DataFrame, by_category: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The integers of a window's pieces (window_pieces) as one row per (rank, step) and (rank, step, category):
    each piece is a disjoint stretch of time, so every union and overlap adds up, and the span is the widest."""
    return (totals.group_by("rank", "step", maintain_order=True)
            .agg(pl.col("span_start_ns").min(), pl.col("span_end_ns").max(), pl.col(*STEP_NS).sum()).rechunk(),
            by_category.group_by("rank", "step", "category", maintain_order=True).agg(pl.col("union_ns").sum())
            .rechunk())


def piece_anatomy(columns: tuple[np.ndarray, ...], counted: np.ndarray | None, until: int | None, rank: int,
                   step_values: np.ndarray, categories: pl.Series, spill: Path | None = None, *,
                   kinds: Mapping[str, str]
                   ) -> tuple[list[pl.DataFrame], list[pl.DataFrame], pl.DataFrame | list[Path], list[pl.DataFrame]]:
    """One piece of one process's kept activity (a step group, or a bin of a window without steps, window_pieces:
    `counted` the rows that are activities, not continuations, None: all; `until` where its time ends, the
    intervals counted up to there, None: no end): its integers per step and per (step, category)
    (sorted_step_ns, by chunk), its events: a frame, or with `spill` the Parquet files they were written to, a
    file per chunk as it is made (a frame of a whole process's events, 29 B an activity, was the anatomy's peak),
    and where its steps' long gaps lie (gap_places.own_span_places: columns rank, step, label, call, gap_ns; none
    for a window without steps, whose idle is kept whole, or without labels). The caller gives the arrays up, so
    that the unsorted ones go as the sorted ones come."""
    code, cat, start, end = columns[:4]
    label = columns[4] if len(columns) > 4 else None
    order = sort_order(code, start, stable=False)
    # One array at a time, each copy replacing its original.
    code = code[order]
    cat = cat[order]
    start = start[order]
    end = end[order]
    if label is not None:
        label = label[order]
    if counted is not None:
        counted = counted[order]
    del order

    def one(rows: slice) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame | None]:
        ends = end[rows] if until is None else np.minimum(end[rows], until)
        gaps = (own_span_places(code[rows], label[rows], start[rows], ends)
                if label is not None and counted is None and until is None and step_values.size else None)
        return (*sorted_step_ns(code[rows], cat[rows], start[rows], ends, categories,
                                counted=None if counted is None else counted[rows], kinds=kinds), gaps)

    def events(rows: slice) -> pl.DataFrame:
        # start and end are the sorted arrays themselves (no copy): only rank, step and the category are new, the
        # category an Enum (1 B an activity where a string took 16: 95 MB at 5M kernels).
        kept: slice | np.ndarray = rows
        n = rows.stop - rows.start
        if counted is not None:  # continuations left out
            picked = np.flatnonzero(counted[rows]) + rows.start
            kept, n = picked, picked.size
        return pl.DataFrame([pl.Series("rank", np.full(n, rank, np.int32)),
                             step_of_codes(code[kept], step_values), categories.gather(cat[kept]),
                             pl.Series("start_ns", start[kept]), pl.Series("end_ns", end[kept])])

    chunks = step_chunks(code)
    # Chunks are independent and numpy releases the GIL: _CHUNK_WORKERS at a time.
    with ThreadPoolExecutor(max_workers=_CHUNK_WORKERS) as pool:
        done = list(pool.map(one, chunks))
    made: pl.DataFrame | list[Path]
    if spill is None:
        made = events(slice(0, code.size))
    else:
        made = []
        for rows in chunks:
            made.append(spill / f"events-{next(_spilled)}.parquet")
            events(rows).write_parquet(made[-1], compression="uncompressed", statistics=False)
    return ([_ranked(step_ns, rank, step_values) for step_ns, _, _ in done],
            [_ranked(category_ns, rank, step_values) for _, category_ns, _ in done], made,
            [_ranked(gaps, rank, step_values) for _, _, gaps in done if gaps is not None and gaps.height])


def _gap_rows(parts: list[pl.DataFrame], names: dict[int, str], categories: pl.Series) -> pl.DataFrame:
    """The gap places of every piece as ANATOMY_GAP_SCHEMA rows: each label named (nsys_activity._labels)."""
    if not parts:
        return pl.DataFrame(schema=ANATOMY_GAP_SCHEMA)
    gaps = pl.concat(parts)
    text = {}
    for label in gaps["label"].unique().to_list():
        text[label] = (None if label == START_LABEL else "(unnamed)" if label == COPY_LABEL - 1
                       else str(categories[label - COPY_LABEL]) if label >= COPY_LABEL else names.get(label, "(unnamed)"))
    return gaps.select("rank", "step", pl.col("label").replace_strict(text, return_dtype=pl.Utf8).alias("after"),
                       "call", (pl.col("gap_ns") / 1e6).alias("gap_ms")).select(
        [pl.col(c).cast(t) for c, t in ANATOMY_GAP_SCHEMA.items()])


def _ranked(frame: pl.DataFrame, rank: int, step_values: np.ndarray) -> pl.DataFrame:
    """A per-step frame of one process keyed by step code -> keyed by (rank, step)."""
    return frame.select(pl.lit(rank, dtype=pl.Int32).alias("rank"), step_of_codes(frame["key"].to_numpy(), step_values),
                        pl.exclude("key"))


def _kernel_steps(activity: Activity, rank_of: dict, names: dict[int, str]) -> pl.DataFrame:
    """Kernel calls and time per (rank, step, category, name, launch shape), from the sums the stream kept per name
    id and shape (shape null where the export has none). Name, category and shape are Categorical: a row per step
    and kernel name is the one output that grows with a capture's steps, and a demangled name is hundreds of bytes
    (19 MB of text at 2,788 steps of the 5M-kernel benchmark)."""
    sums = activity.kernel_sums()
    ids = sorted(sums["name_id"].drop_nulls().unique().to_list())
    # As _categorise: by name; a name id without a name is '(unnamed)' in category 'other', as is no name id.
    label = pl.Series("name", [names.get(i, "(unnamed)") for i in ids] + ["(unnamed)"], dtype=pl.Categorical)
    category = pl.Series("category", [activity.rules.classify(names.get(i, "")) for i in ids] + ["other"],
                         dtype=pl.Categorical)
    at = sums["name_id"].replace_strict(dict(zip(ids, range(len(ids)))), default=len(ids), return_dtype=pl.UInt32)
    at = at.fill_null(len(ids))
    return (sums.select(pl.col("pid_key").replace_strict(rank_of, default=None, return_dtype=pl.Int32).alias("rank"),
                        step_of_codes(sums["code"].to_numpy(), activity.step_values), category.gather(at), label.gather(at),
                        shape_expr().cast(pl.Categorical), "calls", "ns")
            .filter(pl.col("rank").is_not_null())
            .group_by("rank", "step", "category", "name", "shape")
            .agg(pl.col("calls").sum(), (pl.col("ns").sum() / 1e6).alias("time_ms")))


_CHUNK_EVENTS = 1 << 18  # activities per interval-arithmetic chunk (whole steps of one process)
_CHUNK_WORKERS = min(2, os.cpu_count() or 1)  # chunks in flight: each holds its intermediates (~25 MB)


def step_chunks(code: np.ndarray) -> list[slice]:
    """Rows of `code` (sorted) cut between steps, about _CHUNK_EVENTS each: a chunk ends with the step in which a
    multiple of _CHUNK_EVENTS falls."""
    ends = np.r_[np.flatnonzero(code[1:] != code[:-1]) + 1, code.size]
    cuts = ends[np.searchsorted(ends, np.arange(_CHUNK_EVENTS, code.size, _CHUNK_EVENTS), side="left")]
    bounds = [0, *sorted(set(cuts.tolist()) | {code.size})]
    return [slice(lo, hi) for lo, hi in zip(bounds, bounds[1:])]


def nvtx_frame(ranges: pl.DataFrame, rank_of: dict) -> pl.DataFrame:
    """Per rank (null: a process that launched no GPU work) and range name, like nvtx_sum per process."""
    return (ranges.with_columns(pl.col("pid_key").replace_strict(rank_of, default=None, return_dtype=pl.Int32).alias("rank"))
            .group_by("rank", "range_name")
            # 128-bit: each duration is under 2^63 ns (its ends within 2^62 of the capture's start), not their sum
            .agg(pl.len().cast(pl.Int64).alias("count"),
                 (pl.col("duration_ns").cast(pl.Int128).sum() / 1e6).alias("total_ms"))
            .with_columns(pl.lit(None, dtype=pl.Float64).alias("gpu_ms"))
            .select([pl.col(c).cast(t) for c, t in ANATOMY_NVTX_SCHEMA.items()])
            .sort("rank", "range_name", nulls_last=True))
