"""GPU activity -> the step range open at the start of its launching runtime call, by (process, correlation id).

CUPTI gives each GPU activity (kernel, memcpy, memset, graph replay) the correlation id of the runtime call
that launched it (cudaLaunchKernel, cudaMemcpyAsync, cudaGraphLaunch, ...); the NVTX step range of that process
open at that call's start claims the activity (ingest/nsys_activity.py gives each process's ranges). The runtime table
is the largest of an export: 9.3M calls beside 6.6M activities in the 5M-kernel benchmark. In DuckDB, the
one-row-per-id guard (a hash GROUP BY over every call) and the hash join cost twice the bare scan of those
tables; here each call is reduced as it streams in to its correlation id and a small key saying which range
its start falls in, each process's calls become sorted arrays of the correlation ids that a range claims
(with that range's code), and each batch of activities is one binary search per process as it arrives.

The key of a call starting at t, for a process's ranges sorted by start: `at` is the latest range started at or
before t (-1: none), and key = 2 (at + 1) + (0 if t is before that range's end, else 1); even keys from 2 up
claim. The key never decreases as t grows (for one `at`, an earlier start is inside the range whenever a later
one is), so the least key of an id's calls is the key of its earliest call: ids and keys sort as one int64 each.

Bounded memory (given a scratch folder): a process's calls wait in files as they stream in, with every 64th id
kept as a sample; then they are cut into partitions of consecutive id ranges of about _PART_CALLS calls (the
ranges from the sample's quantiles, so any order or spacing of ids partitions evenly), each partition reduced on
its own, and its claimed ids written back. An activity batch reads the partitions its ids fall in, through a
small cache: activity ids advance with time, so a batch touches one or two. Without a folder a process's calls
are one partition, in memory.

Repeated ids: nsys writes one call per id, but older exports write two (cudaLaunchKernel and
cudaLaunchKernel_v7000: saxpy-mpi) and a damaged one may repeat one id everywhere. The earliest call is the
launch, the number of repeated (process, id) pairs is counted for the warning, and the cost stays n log n
whatever the ids (a join on repeated ids would build kernels x calls rows). An id is never cut across two
partitions, so one id repeated everywhere is one partition of every call.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple, cast

import numpy as np
import polars as pl

from receipts.ingest.column_bins import ColumnBins, quantile_bounds

_NO_START = np.iinfo(np.int64).max  # a call whose start is NULL: after every range, so it claims nothing
_PART_CALLS = 1 << 19  # calls per partition of a process's calls, when they wait in files (~6 MB of ids and keys)
_SAMPLE_EVERY = 64  # one id in 64 of each batch sets the partitions' id ranges
_PIECE_CALLS = 1 << 20  # calls read back at a time while they are cut into partitions
_CACHED_PARTS = 4  # claimed partitions held for the activity stream (its ids advance with time)


class StepRanges(NamedTuple):
    """One process's step ranges, sorted by start, and the code each gives the activities it claims."""
    starts: np.ndarray
    ends: np.ndarray
    codes: np.ndarray  # int32, >= 0


class Launches:
    """Per process (pid_key): the correlation ids whose earliest call a step range claims, sorted, and that
    range's code, in partitions of consecutive id ranges."""

    def __init__(self, calls: Iterable, ranges: dict[int, StepRanges], spill: Path | None = None) -> None:
        """`calls`: Arrow record batches with columns pid_key, corr_id, launch_ns (one row per runtime call);
        `ranges`: the step ranges of each process that has any; `spill`: a folder (the caller's) where the calls
        and the claimed ids wait in files, else they are held in memory."""
        waiting = ColumnBins("calls", (np.int64, np.int32), spill)
        samples: dict[int, list[np.ndarray]] = {}
        for batch in calls:
            frame = cast(pl.DataFrame, pl.from_arrow(batch))
            # A call without process or id can launch nothing that carries them. Copied out by a mask per process
            # (a few; faster than partition_by) into numpy's own memory (see Activity in ingest/nsys_activity.py).
            known = (frame["pid_key"].is_not_null() & frame["corr_id"].is_not_null()).to_numpy()
            pids, ids = frame["pid_key"].fill_null(0).to_numpy(), frame["corr_id"].fill_null(0).to_numpy()
            starts = frame["launch_ns"].fill_null(_NO_START).to_numpy()
            for pid in frame["pid_key"].drop_nulls().unique().to_list():
                rows = known & (pids == pid)
                mine = ids[rows]
                waiting.add(pid, (mine, _keys(ranges.get(pid), starts[rows])))
                if spill is not None:
                    samples.setdefault(pid, []).append(mine[::_SAMPLE_EVERY].copy())  # a copy: a view holds `mine`
        self.repeated = 0  # (process, correlation id) pairs carried by more than one call
        self._bounds: dict[int, np.ndarray] = {}  # per process, the first id of each partition but the first
        self._claimed = ColumnBins("claimed", (np.int64, np.int32), spill)  # (pid, partition) -> ids, codes
        self._cache: OrderedDict[tuple[int, int], tuple[np.ndarray, ...]] = OrderedDict()
        for pid in waiting.keys():
            bounds = quantile_bounds(samples.pop(pid, []), waiting.rows(pid), _PART_CALLS)
            parts = waiting.partitioned(pid, 0, bounds, "calls-part", _PIECE_CALLS)
            for part in range(bounds.size + 1):
                ids, keys = parts.take(part)
                ids, keys, repeated = _earliest(ids, keys, pid in ranges)
                self.repeated += repeated
                if pid in ranges:
                    self._claimed.add((pid, part), (ids, ranges[pid].codes[keys // 2 - 1]))
            if pid in ranges:
                self._bounds[pid] = bounds

    def codes(self, pid: int, corr: np.ndarray) -> np.ndarray:
        """The code of the range that claims each activity of process `pid` with correlation ids `corr`
        (int32, -1: none)."""
        bounds = self._bounds.get(pid)
        if bounds is None:
            return np.full(corr.size, -1, np.int32)
        # Searched in id order: a binary search for ids in random order misses the cache at every step.
        order = np.argsort(corr)
        ordered = corr[order]
        found = np.full(corr.size, -1, np.int32)
        edges = [0, *np.searchsorted(ordered, bounds, side="left").tolist(), ordered.size]
        for part, (lo, hi) in enumerate(zip(edges, edges[1:])):
            if lo == hi or not self._claimed.rows((pid, part)):
                continue
            ids, codes = self._partition(pid, part)
            wanted = ordered[lo:hi]
            at = np.minimum(np.searchsorted(ids, wanted), ids.size - 1)
            found[order[lo:hi]] = np.where(ids[at] == wanted, codes[at], -1)
        return found

    def close(self) -> None:
        """The claimed ids given up (their files removed)."""
        self._cache.clear()
        self._claimed.clear()

    def _partition(self, pid: int, part: int) -> tuple[np.ndarray, ...]:
        key = (pid, part)
        if key in self._cache:
            self._cache.move_to_end(key)
        else:
            self._cache[key] = self._claimed.read(key)
            if len(self._cache) > _CACHED_PARTS:
                self._cache.popitem(last=False)
        return self._cache[key]


def _keys(ranges: StepRanges | None, starts: np.ndarray) -> np.ndarray:
    """Each call's key (module docstring): 1 for every call of a process without ranges."""
    if ranges is None:
        return np.ones(starts.size, np.int32)
    after = np.searchsorted(ranges.starts, starts, side="right")  # at + 1
    inside = (after > 0) & (starts < ranges.ends[after - 1])
    after <<= 1
    after += 1
    after -= inside
    return after.astype(np.int32)


def _earliest(ids: np.ndarray, keys: np.ndarray, claimed_only: bool) -> tuple[np.ndarray, np.ndarray, int]:
    """(distinct ids sorted, the least key of each, how many ids more than one call carries); with claimed_only,
    only the ids whose least key claims (even, from 2 up). `ids` and `keys` are the caller's to give up: they
    are reused in place."""
    if not ids.size:
        return ids, keys, 0
    bits = int(keys.max()).bit_length()
    lo, hi = int(ids.min()), int(ids.max())
    if hi - lo < 1 << (63 - bits):
        # One int64 per call, id above key: a plain sort (SIMD, several times an argsort's speed) orders both.
        packed = ids  # in place: a copy of every id was the build's peak
        del ids
        packed -= lo
        packed <<= bits
        packed |= keys
        del keys
        packed.sort()
        keys = (packed & ((1 << bits) - 1)).astype(np.int32)
        packed >>= bits
        ids = packed
        ids += lo
        del packed
    else:
        order = np.lexsort((keys, ids))
        ids, keys = ids[order], keys[order]
    # Sorted by (id, key): an id's first call has its least key.
    first = np.empty(ids.size, bool)
    first[0] = True
    np.not_equal(ids[1:], ids[:-1], out=first[1:])
    repeated = int(np.count_nonzero(first[:-1] & ~first[1:]))
    if claimed_only:
        first &= ((keys & 1) == 0) & (keys > 0)
    return ids[first], keys[first], repeated
