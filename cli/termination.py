"""SIGTERM and SIGHUP end a command the way Ctrl-C does.

A batch scheduler's time limit (Slurm, Kubernetes, `timeout`) and a closed terminal send SIGTERM or SIGHUP, whose
default action ends Python at once: no rollback said, no `finally`, a scratch folder of spilled step rows left
behind (measured: `kill -TERM` 1.5 s into a 1M-line ingest left ~50 MB in /tmp and said nothing). Raised as a
KeyboardInterrupt instead, every path that already stops cleanly on Ctrl-C (the transaction of the file in progress
rolled back, scratch removed, the batch's summary printed) stops cleanly on these too, and the exit code says which
signal it was (128 + its number, as shells report it).
"""

from __future__ import annotations

import signal

_STOPPING = (signal.SIGTERM, signal.SIGHUP)
_received: list[int] = []  # the stopping signals received, in order (a list: the handler may run more than once)


class Terminated(KeyboardInterrupt):
    """The command was asked to stop by a signal other than SIGINT."""


def stop_like_ctrl_c() -> None:
    """In the command line's process only: a library importing receipts keeps its own handlers."""
    for sig in _STOPPING:
        signal.signal(sig, _raise)


def _raise(signum: int, _frame) -> None:
    _received.append(signum)
    raise Terminated(signal.Signals(signum).name)


def interrupted_exit_code() -> int:
    """128 + the first stopping signal received; 130 (SIGINT) when none was. A DuckDB query in flight turns the
    handler's exception into its own InterruptException, so the signal is remembered here, not read from it."""
    return 128 + (_received[0] if _received else signal.SIGINT)


def interruption() -> str:
    """How the stop reads in a message: 'interrupted' (Ctrl-C) or 'terminated (SIGTERM)'."""
    return f"terminated ({signal.Signals(_received[0]).name})" if _received else "interrupted"
