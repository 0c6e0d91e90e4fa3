"""A read of a small DuckDB store runs on one thread; a larger store and RECEIPTS_THREADS keep their setting."""

from __future__ import annotations

import os

from receipts import duck
from receipts.store import duckdb_store, open_store


def _threads(con) -> int:
    return con.execute("SELECT current_setting('threads')").fetchone()[0]


def test_small_store_read_runs_on_one_thread(noise_db, monkeypatch):
    monkeypatch.delenv("RECEIPTS_THREADS", raising=False)
    default = _threads(duck.connect())
    assert os.path.getsize(noise_db) <= duckdb_store.SMALL_STORE_BYTES  # 18 real runs' logs
    with open_store(noise_db, read_only=True) as store:
        assert _threads(store.con) == 1
    monkeypatch.setattr(duckdb_store, "SMALL_STORE_BYTES", os.path.getsize(noise_db) - 1)  # as if one byte larger
    with open_store(noise_db, read_only=True) as store:
        assert _threads(store.con) == default
    monkeypatch.setenv("RECEIPTS_THREADS", "3")  # the user's setting wins either way
    with open_store(noise_db, read_only=True) as store:
        assert _threads(store.con) == 3
