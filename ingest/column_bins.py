"""Rows of fixed numpy columns gathered under keys batch by batch and read back per key: held in memory, or
appended to files in a scratch folder so that what waits costs no memory.

An nsys export streams once, and two things gathered from it are each larger than a process should hold at 10M
kernels: the runtime calls (ingest/correlation.py, bins by process and correlation-id range) and the kept GPU
activity (ingest/nsys_activity.py, bins by process and step group). Both are written once and read back bin by bin, so
what is resident at a time is one bin, whatever the capture's length.

Writing here is not writing to the store: the folder is the parse's scratch (the caller's, removed after use),
and a bin's files are removed when it is taken.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterator, Sequence
from pathlib import Path

import numpy as np

_made = itertools.count()  # names each collection's files apart, in a scratch folder several may share


class ColumnBins:
    """Bins of rows, each row one value of each of `dtypes`; with `folder`, each bin's columns are files there."""

    def __init__(self, name: str, dtypes: Sequence[type | np.dtype], folder: Path | None = None) -> None:
        self._name = f"{name}-{next(_made)}"
        self._dtypes = tuple(np.dtype(d) for d in dtypes)
        self._folder = folder
        self._held: dict[Hashable, list[list[np.ndarray]]] = {}  # without a folder: the arrays of each column
        self._files: dict[Hashable, tuple[Path, ...]] = {}
        self._rows: dict[Hashable, int] = {}

    def add(self, key: Hashable, columns: Sequence[np.ndarray]) -> None:
        """Append rows (one array per column, of equal length) to the bin `key`; arrays are kept as given when
        held, so the caller gives up arrays of its own (not views of a larger one)."""
        if not columns[0].size:
            return
        self._rows[key] = self._rows.get(key, 0) + columns[0].size
        if self._folder is None:
            for stored, column in zip(self._held.setdefault(key, [[] for _ in self._dtypes]), columns):
                stored.append(column)
            return
        files = self._files.get(key)
        if files is None:
            n = len(self._files)
            files = self._files[key] = tuple(self._folder / f"{self._name}-{n}-{i}.bin" for i in range(len(columns)))
        for path, column, dtype in zip(files, columns, self._dtypes):
            with open(path, "ab") as out:
                column.astype(dtype, copy=False).tofile(out)

    def keys(self) -> list:
        """The bins that hold rows, in the order of their first rows."""
        return list(self._rows)

    def rows(self, key: Hashable) -> int:
        return self._rows.get(key, 0)

    def read(self, key: Hashable) -> tuple[np.ndarray, ...]:
        """A bin's columns whole, the bin kept (held: joined once, and kept joined)."""
        if key not in self._rows:
            return tuple(np.zeros(0, d) for d in self._dtypes)
        if self._folder is not None:
            return tuple(np.fromfile(path, dtype=d) for path, d in zip(self._files[key], self._dtypes))
        held = self._held[key]
        for stored in held:
            if len(stored) > 1:
                stored[:] = [np.concatenate(stored)]
        return tuple(stored[0] for stored in held)

    def take(self, key: Hashable) -> tuple[np.ndarray, ...]:
        """A bin's columns whole, given up by the collection (its files removed)."""
        if key not in self._rows:
            return self.read(key)
        if self._folder is None:
            columns = self.read(key)
            self._held.pop(key, None)
        else:  # one column read at a time, each file removed as read
            columns = tuple(self._take_column(key, i) for i in range(len(self._dtypes)))
            self._files.pop(key, None)
        self._rows.pop(key, None)
        return columns

    def take_pieces(self, key: Hashable, rows: int) -> Iterator[tuple[np.ndarray, ...]]:
        """A bin's columns in pieces of at most `rows` rows (held: as added), given up by the collection."""
        if self._folder is None:
            for piece in zip(*self._held.pop(key, [[] for _ in self._dtypes])):
                yield piece
        else:
            files = self._files.pop(key, ())
            for start in range(0, self._rows.get(key, 0), rows):
                yield tuple(np.fromfile(path, dtype=d, count=rows, offset=start * d.itemsize)
                            for path, d in zip(files, self._dtypes))
            for path in files:
                path.unlink()
        self._rows.pop(key, None)

    def partitioned(self, key: Hashable, by: int, bounds: np.ndarray, name: str, piece_rows: int) -> ColumnBins:
        """The bin `key`, given up, as a new collection (in the same folder) keyed by partition of column `by`:
        partition i holds the rows whose value is from bounds[i - 1] (included) to bounds[i] (excluded), in the
        order they were added. Read `piece_rows` at a time; no bounds: one partition, the bin as it was."""
        parts = ColumnBins(name, self._dtypes, self._folder)
        for columns in self.take_pieces(key, piece_rows):
            if not bounds.size:
                parts.add(0, columns)
                continue
            part = np.searchsorted(bounds, columns[by], side="right")
            if part[0] == part[-1] and part.min() == part.max():  # the usual piece: values advance with time
                parts.add(int(part[0]), columns)
                continue
            # a radix sort of small integers: the rows by partition, each partition's in their order
            order = np.argsort(part.astype(np.uint16 if bounds.size < 1 << 16 else np.int64), kind="stable")
            part = part[order]
            columns = tuple(column[order] for column in columns)
            cuts = [0, *(np.flatnonzero(part[1:] != part[:-1]) + 1).tolist(), part.size]
            for lo, hi in zip(cuts, cuts[1:]):
                parts.add(int(part[lo]), [column[lo:hi] for column in columns])
        return parts

    def drop(self, key: Hashable) -> None:
        """A bin given up unread."""
        self._held.pop(key, None)
        for path in self._files.pop(key, ()):
            path.unlink()
        self._rows.pop(key, None)

    def clear(self) -> None:
        for key in self.keys():
            self.drop(key)

    def _take_column(self, key: Hashable, i: int) -> np.ndarray:
        path = self._files[key][i]
        column = np.fromfile(path, dtype=self._dtypes[i])
        path.unlink()
        return column


def quantile_bounds(sample: list[np.ndarray], rows: int, part_rows: int) -> np.ndarray:
    """Bounds for `partitioned` that cut `rows` rows into parts of about `part_rows`, from the quantiles of a
    sample of the column (taken evenly as the rows came): none when the rows fit one part or there is no sample."""
    parts = -(-rows // part_rows)
    if parts <= 1 or not sample:
        return np.zeros(0, np.int64)
    values = np.sort(np.concatenate(sample))
    return np.unique(values[(np.arange(1, parts) * values.size) // parts])
