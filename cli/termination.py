"""SIGTERM and SIGHUP end a command the way Ctrl-C does, and no stop is lost inside DuckDB.

A batch scheduler's time limit (Slurm, Kubernetes, `timeout`) and a closed terminal send SIGTERM or SIGHUP, whose
default action ends Python at once: no rollback said, no `finally`, a scratch folder of spilled step rows left
behind (measured: `kill -TERM` 1.5 s into a 1M-line ingest left ~50 MB in /tmp and said nothing). Raised as a
KeyboardInterrupt instead, every path that already stops cleanly on Ctrl-C (the transaction of the file in progress
rolled back, scratch removed, the batch's summary printed) stops cleanly on these too, and the exit code says which
signal it was (128 + its number, as shells report it).

DuckDB's Python client (1.4) can swallow the KeyboardInterrupt a signal raises: one arriving while it binds a
statement's parameters is cleared, the statement runs on and nothing is raised (a loop of parameterised INSERTs
went on past Ctrl-C in 11 of 12 tries; `receipts ingest FOLDER` ingested every file and exited 0 in 2 of 13).
So every stopping signal, SIGINT included, is also recorded here, and a loop that must stop on it (the ingest's,
after each file) asks `stop_if_signalled` between its steps: a stop swallowed inside a statement is raised there.
"""

from __future__ import annotations

import signal

_STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_received: list[int] = []  # the stopping signals received, in order (a list: the handler may run more than once)
_raised = 0  # how many of them stop_if_signalled has raised again


class Terminated(KeyboardInterrupt):
    """The command was asked to stop by a signal other than SIGINT."""


def stop_like_ctrl_c() -> None:
    """In the command line's process only: a library importing receipts keeps its own handlers."""
    for sig in _STOPPING:
        signal.signal(sig, _raise)


def _raise(signum: int, _frame) -> None:
    _received.append(signum)
    raise _stop(signum)


def _stop(signum: int) -> KeyboardInterrupt:
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signal.Signals(signum).name)


def stop_if_signalled() -> None:
    """Raise the stop a signal asked for if nothing has acted on it yet (it was swallowed inside a C extension);
    a no-op otherwise. Called between the steps of a loop that must stop, never inside a statement."""
    global _raised
    if len(_received) > _raised:
        _raised = len(_received)
        raise _stop(_received[0])


def interrupted_exit_code() -> int:
    """128 + the first stopping signal received; 130 (SIGINT) when none was recorded (a library caller, or a
    KeyboardInterrupt without a signal). A DuckDB query in flight turns the handler's exception into its own
    InterruptException, so the signal is remembered here, not read from it."""
    return 128 + (_received[0] if _received else signal.SIGINT)


def interruption() -> str:
    """How the stop reads in a message: 'interrupted' (Ctrl-C) or 'terminated (SIGTERM)'."""
    if _received and _received[0] != signal.SIGINT:
        return f"terminated ({signal.Signals(_received[0]).name})"
    return "interrupted"
