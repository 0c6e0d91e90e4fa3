"""GPU activity -> the step range open at the start of its launching runtime call, by (process, correlation id).

CUPTI gives each GPU activity (kernel, memcpy, memset, graph replay) the correlation id of the runtime call
that launched it (cudaLaunchKernel, cudaMemcpyAsync, cudaGraphLaunch, ...); the NVTX step range of that process
open at that call's start claims the activity (ingest/nsys.py gives each process's ranges). The runtime table
is the largest of an export: 9.3M calls beside 6.6M activities in the 5M-kernel benchmark. In DuckDB, the
one-row-per-id guard (a hash GROUP BY over every call) and the hash join cost twice the bare scan of those
tables; here each call is reduced as it streams in to its correlation id and a small key saying which range
its start falls in, each process's calls become one sorted array of the correlation ids that a range claims
(with that range's code), and each batch of activities is one binary search per process as it arrives.

The key of a call starting at t, for a process's ranges sorted by start: `at` is the latest range started at or
before t (-1: none), and key = 2 (at + 1) + (0 if t is before that range's end, else 1); even keys from 2 up
claim. The key never decreases as t grows (for one `at`, an earlier start is inside the range whenever a later
one is), so the least key of an id's calls is the key of its earliest call: ids and keys sort as one int64 each.

Repeated ids: nsys writes one call per id, but older exports write two (cudaLaunchKernel and
cudaLaunchKernel_v7000: saxpy-mpi) and a damaged one may repeat one id everywhere. The earliest call is the
launch, the number of repeated (process, id) pairs is counted for the warning, and the cost stays n log n
whatever the ids (a join on repeated ids would build kernels x calls rows).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple, cast

import numpy as np
import polars as pl

_NO_START = np.iinfo(np.int64).max  # a call whose start is NULL: after every range, so it claims nothing


class StepRanges(NamedTuple):
    """One process's step ranges, sorted by start, and the code each gives the activities it claims."""
    starts: np.ndarray
    ends: np.ndarray
    codes: np.ndarray  # int32, >= 0


class Launches:
    """Per process (pid_key): the correlation ids whose earliest call a step range claims, sorted, and that
    range's code."""

    def __init__(self, calls: Iterable, ranges: dict[int, StepRanges]) -> None:
        """`calls`: Arrow record batches with columns pid_key, corr_id, launch_ns (one row per runtime call);
        `ranges`: the step ranges of each process that has any."""
        parts: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
        for batch in calls:
            frame = cast(pl.DataFrame, pl.from_arrow(batch))
            # A call without process or id can launch nothing that carries them. Copied out by a mask per process
            # (a few; faster than partition_by) into numpy's own memory (see _Activity in ingest/nsys.py).
            known = (frame["pid_key"].is_not_null() & frame["corr_id"].is_not_null()).to_numpy()
            pids, ids = frame["pid_key"].fill_null(0).to_numpy(), frame["corr_id"].fill_null(0).to_numpy()
            starts = frame["launch_ns"].fill_null(_NO_START).to_numpy()
            for pid in frame["pid_key"].drop_nulls().unique().to_list():
                rows = known & (pids == pid)
                parts.setdefault(pid, []).append((ids[rows], _keys(ranges.get(pid), starts[rows])))
        self.repeated = 0  # (process, correlation id) pairs carried by more than one call
        self._by_pid: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for pid in list(parts):
            # each column joined while its batches' arrays go: the batches and the joined copy of one column
            id_parts, key_parts = (list(column) for column in zip(*parts.pop(pid)))
            ids = np.concatenate(id_parts)
            del id_parts
            keys = np.concatenate(key_parts)
            del key_parts
            ids, keys, repeated = _earliest(ids, keys, pid in ranges)
            self.repeated += repeated
            if pid in ranges:
                self._by_pid[pid] = (ids, ranges[pid].codes[keys // 2 - 1])

    def codes(self, pid: int, corr: np.ndarray) -> np.ndarray:
        """The code of the range that claims each activity of process `pid` with correlation ids `corr`
        (int32, -1: none)."""
        ids, codes = self._by_pid.get(pid, (np.zeros(0, np.int64), np.zeros(0, np.int32)))
        if not ids.size:
            return np.full(corr.size, -1, np.int32)
        # Searched in id order: a binary search for ids in random order misses the cache at every step.
        order = np.argsort(corr)
        ordered = corr[order]
        at = np.minimum(np.searchsorted(ids, ordered), ids.size - 1)
        found = np.empty(corr.size, np.int32)
        found[order] = np.where(ids[at] == ordered, codes[at], -1)
        return found


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
