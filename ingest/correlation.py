"""GPU activity -> the start of its launching runtime call, by (process, correlation id).

CUPTI gives each GPU activity (kernel, memcpy, memset, graph replay) the correlation id of the runtime call
that launched it (cudaLaunchKernel, cudaMemcpyAsync, cudaGraphLaunch, ...); the NVTX step open at that
call's start claims the activity (ingest/nsys.py). The runtime table is the largest of an export: 9.3M calls
beside 6.6M activities in the 5M-kernel benchmark. In DuckDB, the one-row-per-id guard (a hash GROUP BY over
every call) and the hash join cost twice the bare scan of those tables; here each process's calls become one
sorted array of correlation ids (numpy's stable sort: calls arrive nearly in id order) and each batch of
activities is one binary search per process as it streams in, so no activity frame waits for a join.

Repeated ids: nsys writes one call per id, but older exports write two (cudaLaunchKernel and
cudaLaunchKernel_v7000: saxpy-mpi) and a damaged one may repeat one id everywhere. The earliest call is the
launch, the number of repeated (process, id) pairs is counted for the warning, and the cost stays n log n
whatever the ids (a join on repeated ids would build kernels x calls rows).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import numpy as np
import polars as pl

_NO_START = np.iinfo(np.int64).max  # a call whose start is NULL: it matches, but launches nothing


class Launches:
    """Per process (pid_key): its calls' distinct correlation ids, sorted, and the earliest start of each."""

    def __init__(self, calls: Iterable) -> None:
        """`calls`: Arrow record batches with columns pid_key, corr_id, launch_ns (one row per runtime call)."""
        parts: dict[int, list[pl.DataFrame]] = {}
        for batch in calls:
            # A call without process or id can launch nothing that carries them.
            frame = cast(pl.DataFrame, pl.from_arrow(batch)).drop_nulls(["pid_key", "corr_id"])
            for (pid,), part in frame.partition_by("pid_key", as_dict=True, include_key=False).items():
                parts.setdefault(int(pid), []).append(part)
        self.repeated = 0  # (process, correlation id) pairs carried by more than one call
        self._by_pid: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for pid in list(parts):
            both = pl.concat(parts.pop(pid))
            ids = both["corr_id"].to_numpy()
            starts = both["launch_ns"].fill_null(_NO_START).to_numpy()
            del both
            order = np.argsort(ids, kind="stable")
            ids, starts = ids[order], starts[order]
            del order
            first = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
            if first.size < ids.size:
                self.repeated += int(np.count_nonzero(np.diff(np.r_[first, ids.size]) > 1))
                ids, starts = ids[first], np.minimum.reduceat(starts, first)
            self._by_pid[pid] = (ids, starts)

    def lookup(self, pid: int, corr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(launch_ns, found) for the activities of process `pid` with correlation ids `corr`; launch_ns is
        meaningful only where found."""
        ids, starts = self._by_pid.get(pid, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
        if not ids.size:
            return np.zeros(corr.size, np.int64), np.zeros(corr.size, bool)
        at = np.minimum(np.searchsorted(ids, corr), ids.size - 1)
        launch = starts[at]
        return launch, (ids[at] == corr) & (launch != _NO_START)
