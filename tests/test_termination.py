"""A stop that DuckDB swallows is raised again between a loop's steps (cli/termination.py).

DuckDB's Python client (1.4) can clear the KeyboardInterrupt a signal raises while it runs a parameterised
statement: the statement runs on and nothing is raised. The loops run in a child process, so the handlers the
command line installs never touch pytest's."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# A loop of parameterised INSERTs, signalled from a timer 20 times, under the command line's handlers: does each
# stop reach the loop (raised inside it, or by stop_if_signalled after it)?
CHILD = textwrap.dedent("""
    import os, signal, sys, threading, time
    import duckdb
    from receipts.cli import termination

    termination.stop_like_ctrl_c()
    sig = getattr(signal, sys.argv[1])
    con = duckdb.connect()
    con.execute("CREATE TABLE t (a INTEGER, b VARCHAR)")
    swallowed = raised = 0
    for attempt in range(20):
        threading.Timer(0.02, os.kill, (os.getpid(), sig)).start()
        start = time.monotonic()
        try:
            while time.monotonic() - start < 0.3:
                con.execute("INSERT INTO t VALUES (?, ?)", [1, "x"])
            swallowed += 1  # the loop ran on: nothing was raised inside it
            termination.stop_if_signalled()
        except KeyboardInterrupt:
            raised += 1
        except Exception as exc:  # DuckDB's own word for an interrupt it did act on
            assert "interrupted" in str(exc).lower(), exc
            raised += 1
    print(swallowed, raised)
""")


def test_no_stop_is_lost_in_a_loop_of_duckdb_statements():
    # Without stop_if_signalled, the first signal of a process was swallowed in most runs (1 of these 20; 11 of
    # 12 fresh processes of one loop each), the loop running to its end.
    for sig in ("SIGINT", "SIGTERM"):
        done = subprocess.run([sys.executable, "-c", CHILD, sig], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        swallowed, raised = map(int, done.stdout.split())
        assert raised == 20, (sig, swallowed, raised)  # every stop reached the loop, at the latest after it


def test_stop_if_signalled_does_nothing_without_a_signal():
    from receipts.cli.termination import stop_if_signalled

    stop_if_signalled()
