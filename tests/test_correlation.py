"""ingest/correlation.py on its own: the step code each activity gets through its launching runtime call, with the
calls held in memory (one partition a process) and waiting in files cut into id partitions of a few calls, against
a reference written the plain way (a Python loop over every call). Ids in any order, spread or dense, repeated,
NULL starts and processes without ranges: the partitioned lookup must give the same code to every activity and
count the same repeated ids. The pinned real exports (test_nsys_expected.py) cover the same through nsys.parse."""

from __future__ import annotations

import bisect

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import examples
from receipts.ingest import correlation
from receipts.ingest.column_bins import ColumnBins
from receipts.ingest.correlation import Launches, StepRanges


def _reference(calls: list[tuple[int, int, int | None]], ranges: dict[int, StepRanges]):
    """({(pid, id): code of the range open at its earliest call's start, for claimed ids}, repeated pairs)."""
    earliest: dict[tuple[int, int], int | None] = {}
    count: dict[tuple[int, int], int] = {}
    for pid, corr, start in calls:
        count[(pid, corr)] = count.get((pid, corr), 0) + 1
        t = correlation._NO_START if start is None else start
        if (pid, corr) not in earliest or t < earliest[(pid, corr)]:
            earliest[(pid, corr)] = t
    claimed = {}
    for (pid, corr), t in earliest.items():
        r = ranges.get(pid)
        if r is None:
            continue
        at = bisect.bisect_right(r.starts.tolist(), t) - 1
        if at >= 0 and t < r.ends[at]:
            claimed[(pid, corr)] = int(r.codes[at])
    return claimed, sum(n > 1 for n in count.values())


def _batches(calls, size: int):
    for lo in range(0, max(len(calls), 1), size):
        part = calls[lo:lo + size]
        yield pa.record_batch({"pid_key": pa.array([c[0] for c in part], pa.int64()),
                               "corr_id": pa.array([c[1] for c in part], pa.int64()),
                               "launch_ns": pa.array([c[2] for c in part], pa.int64())})


@st.composite
def _captures(draw):
    n_ranges = draw(st.integers(0, 6))
    edges = sorted(draw(st.lists(st.integers(0, 1000), min_size=2 * n_ranges, max_size=2 * n_ranges, unique=True)))
    ranges = {7 << 24: StepRanges(np.array(edges[0::2], np.int64), np.array(edges[1::2], np.int64),
                                  np.array(draw(st.permutations(range(n_ranges))), np.int32))} if n_ranges else {}
    spread = draw(st.sampled_from([1, 10, 1 << 33]))  # dense ids, 10% dense, or far apart
    ids = st.integers(0, 300).map(lambda i: i * spread)
    n = draw(st.integers(0, 400))  # drawn first: hypothesis's lists stay short otherwise
    calls = draw(st.lists(st.tuples(st.sampled_from([7 << 24, 9 << 24]), ids,
                                    st.none() | st.integers(-10, 1010)), min_size=n, max_size=n))
    return calls, ranges, spread


@settings(max_examples=examples(150), deadline=None)
@given(capture=_captures(), batch=st.integers(1, 64), part_calls=st.integers(1, 40), cached=st.integers(1, 3),
       in_files=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_lookup_equals_the_plain_reference(capture, batch, part_calls, cached, in_files, seed, tmp_path_factory):
    calls, ranges, spread = capture
    folder = tmp_path_factory.mktemp("spill") if in_files else None
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(correlation, "_PART_CALLS", part_calls)
        mp.setattr(correlation, "_PIECE_CALLS", max(1, part_calls // 2))
        mp.setattr(correlation, "_CACHED_PARTS", cached)
        mp.setattr(correlation, "_SAMPLE_EVERY", 2)
        launches = Launches(_batches(calls, batch), ranges, folder)
        claimed, repeated = _reference(calls, ranges)
        assert launches.repeated == repeated
        for pid in (7 << 24, 9 << 24):
            # every id a call may carry and a few no call does, in any order
            corr = np.random.default_rng(seed).permutation(np.arange(-2, 303, dtype=np.int64) * spread)
            want = [claimed.get((pid, int(c)), -1) for c in corr]
            assert launches.codes(pid, corr).tolist() == want
        launches.close()
    if folder is not None:
        assert not list(folder.iterdir())  # every file of the calls removed


@pytest.mark.parametrize("in_files", [False, True])
def test_column_bins_give_back_what_was_added(in_files, tmp_path):
    bins = ColumnBins("t", (np.int64, np.uint8), tmp_path if in_files else None)
    rng = np.random.default_rng(0)
    added: dict[str, list[np.ndarray]] = {"a": [], "b": []}
    for i in range(7):
        for key in ("a", "b"):
            n = int(rng.integers(0, 50))
            ints = rng.integers(-2**62, 2**62, n)
            bins.add(key, (ints, (ints & 0xFF).astype(np.uint8)))
            added[key].append(ints)
    bins.add("empty", (np.zeros(0, np.int64), np.zeros(0, np.uint8)))
    assert bins.keys() == ["a", "b"] and bins.rows("empty") == 0
    whole = {key: np.concatenate(parts) for key, parts in added.items()}
    ints, low = bins.read("a")
    assert ints.tolist() == whole["a"].tolist() and low.tolist() == (whole["a"] & 0xFF).tolist()
    assert bins.read("a")[0].tolist() == whole["a"].tolist()  # read keeps the bin
    assert np.concatenate([p[0] for p in bins.take_pieces("b", 9)]).tolist() == whole["b"].tolist()
    assert bins.take("a")[0].tolist() == whole["a"].tolist()
    assert bins.keys() == [] and [c.size for c in bins.take("a")] == [0, 0]
    assert not list(tmp_path.iterdir())  # taken bins leave no file
