"""The nsys parser streams the runtime calls and the GPU activity out of DuckDB in record batches (nsys_activity._BATCH_ROWS
rows each) and attributes each batch on arrival; the real exports fit in one batch at the shipped size. Here the
batches are cut tiny, so every export streams in dozens to hundreds of them (a process's calls and activities
spread over many), and every output must still equal the pinned one (tests/data/gpu/nsys_expected.json).
The batches are a pure function of the rows: one export of each shape the reading branches on (SHAPES), not every
export (the whole set is pinned at the shipped size in tests/test_nsys_expected.py)."""

from __future__ import annotations

import json

import pytest
from test_nsys_expected import EXPECTED, SHAPES, _parse

from receipts.ingest import nsys_activity


@pytest.mark.parametrize("name", SHAPES)
def test_tiny_batches_give_the_pinned_numbers(name, tmp_path, monkeypatch):
    monkeypatch.setattr(nsys_activity, "_BATCH_ROWS", 97)
    got, want = _parse(name, tmp_path), json.loads(EXPECTED.read_text())[name]
    for key in want:
        assert got[key] == want[key], f"{name}: {key} differs"
