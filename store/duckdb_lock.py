"""Opening a DuckDB store that another process holds: wait for its lock, bounded, and say so.

A DuckDB file has one writer process at a time, enforced by an OS file lock taken when the
database is opened (DuckDB 1.4: `IO Error: Could not set lock on file "...": Conflicting lock is
held in /usr/bin/python3 (PID 123)`). Two `receipts run` jobs on one node that finish together, or
an ingest while the dashboard's reader is open, would otherwise make one of them fail after its
run succeeded. So the opener retries until the lock is free or the wait runs out, printing one line
naming the holder; the wait is bounded (RECEIPTS_LOCK_WAIT_S, default 60 s) so a process that
never lets go is reported instead of waited on forever.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import duckdb

from receipts.duck import connect
from receipts.errors import StoreError, UsageError

ENV_LOCK_WAIT = "RECEIPTS_LOCK_WAIT_S"
DEFAULT_WAIT_S = 60.0
_POLL_FIRST_S, _POLL_MAX_S = 0.05, 1.0
_HOLDER = re.compile(r"Conflicting lock is held in (?P<program>.*?) \(PID (?P<pid>\d+)\)")


def lock_wait_s(environ: dict[str, str] | None = None) -> float:
    """The bound on the wait, from RECEIPTS_LOCK_WAIT_S (seconds; 0 = fail at once)."""
    raw = (os.environ if environ is None else environ).get(ENV_LOCK_WAIT)
    if raw is None or not raw.strip():
        return DEFAULT_WAIT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (0 <= value < float("inf")):
        raise UsageError(f"{ENV_LOCK_WAIT}={raw!r}: expected a number of seconds >= 0")
    return value


def lock_holder(exc: BaseException) -> str | None:
    """'PID 123 (/usr/bin/python3)' from DuckDB's lock-conflict message; None for any other error."""
    m = _HOLDER.search(str(exc))
    return f"PID {m['pid']} ({m['program']})" if m else None


def _stderr_line(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def open_with_lock_wait(path: str | Path, *, read_only: bool = False, threads: int | None = None,
                        wait_s: float | None = None,
                        notify: Callable[[str], None] = _stderr_line,
                        sleep: Callable[[float], None] = time.sleep,
                        clock: Callable[[], float] = time.monotonic) -> duckdb.DuckDBPyConnection:
    """A connection to the DuckDB file at `path`; while another process holds its lock, wait up to
    `wait_s` (default: lock_wait_s()) with one `notify` line, then StoreError naming the holder."""
    wait_s = lock_wait_s() if wait_s is None else wait_s
    deadline = clock() + wait_s
    pause = _POLL_FIRST_S
    told = False
    while True:
        try:
            return connect(str(path), read_only=read_only, threads=threads)
        except duckdb.IOException as exc:
            holder = lock_holder(exc)
            if holder is None:
                raise
            if clock() >= deadline:
                raise StoreError(str(path), f"is locked by {holder}; gave up after waiting {wait_s:g} s "
                                            f"(another receipts process is using it; set {ENV_LOCK_WAIT} "
                                            "to wait longer)") from None
            if not told:
                notify(f"waiting for the store lock on {path} held by {holder} "
                       f"(up to {wait_s:g} s, {ENV_LOCK_WAIT})")
                told = True
            sleep(min(pause, max(0.0, deadline - clock())))
            pause = min(pause * 2, _POLL_MAX_S)
