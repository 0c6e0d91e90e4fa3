"""The child process of `receipts run` seen from the launcher: its output teed, whole lines and
redacted, into run.log, and the signals sent to us forwarded to whoever in its process tree listens
(Linux /proc)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from typing import IO

from receipts.schema.secrets import EnvRules, redact

# Every signal a scheduler or a terminal uses to tell a job something. Not forwarded: SIGKILL/SIGSTOP
# (cannot be caught), SIGCHLD/SIGWINCH and the like (about us, not the job), SIGPIPE (our own output).
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def tee(source: IO[bytes], *, log: IO[bytes], log_lock: threading.Lock, echo: IO[bytes] | None,
        rules: EnvRules, known: tuple[str, ...]) -> None:
    """Copy one of the child's streams line by line, redacted, into run.log and `echo`.
    Whole lines only: a secret split across two reads would slip past a chunk-wise filter, and the
    stdout and stderr tees share run.log (the lock keeps each line whole there)."""
    for raw in iter(source.readline, b""):
        text = raw.decode("utf-8", errors="surrogateescape")
        clean = redact(text, rules=rules, known_values=known).encode("utf-8", errors="surrogateescape")
        with log_lock:
            if log.closed:
                return  # a daemonised descendant's output after the footer: run.log is finished
            # A last line without a newline (the child's final print(..., end="")) is ended here, in the
            # log only: otherwise the other stream's next line or our footer would be glued onto it.
            log.write(clean if clean.endswith(b"\n") else clean + b"\n")
        if echo is not None:
            try:
                echo.write(clean)
                echo.flush()
            except (OSError, ValueError):
                echo = None  # our own stdout went away (closed pipe): keep logging regardless


class SignalForwarder:
    """Signals in FORWARDED sent to us go to whoever in the child's process tree listens for them.

    A child that handles the signal gets it alone, and decides for its own children (torchrun passes
    INT/TERM/HUP/QUIT on to its workers). A child that does not handle it would only die of it: then
    its descendants that do handle it get it instead, and the child is spared. torchrun 2.11 has no
    USR1 handler and starts each worker in a session of its own: USR1 sent to torchrun ended it and
    never reached the workers (tests/gpu/signals_torchrun.sh, H100 box), so Slurm's pre-emption
    warning would have killed the job instead of warning it. With no listener anywhere the child gets
    the signal and its default action applies, as without the wrapper. Signals that arrive before the
    child is spawned are held and delivered the moment it exists. Handlers can only be set from the
    main thread; elsewhere the child is on its own."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._held: list[int] = []

    def _handle(self, signum, _frame) -> None:
        if self._proc is None:
            self._held.append(signum)
        elif self._proc.poll() is None:
            self._forward(signum)

    def _forward(self, signum: int) -> None:
        assert self._proc is not None
        if handles_signal(self._proc.pid, signum) is False:
            listeners = [pid for pid in descendants(self._proc.pid) if handles_signal(pid, signum)]
            for pid in listeners:
                try:
                    os.kill(pid, signum)
                except OSError:
                    pass  # it exited since the scan
            if listeners:
                return
        self._proc.send_signal(signum)

    def attach(self, proc: subprocess.Popen) -> None:
        self._proc = proc
        for signum in self._held:
            self._forward(signum)
        self._held.clear()

    def install(self):
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {sig: signal.signal(sig, self._handle) for sig in FORWARDED}

        def restore() -> None:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

        return restore


def handles_signal(pid: int, signum: int) -> bool | None:
    """Whether process `pid` has installed a handler for `signum`: the SigCgt mask of /proc/PID/status
    (Linux). None where that cannot be read (another OS, the process gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError, IndexError):
        return None
    return None


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, grandchildren, ...), from the parent ids in /proc/*/stat;
    empty where /proc cannot be read."""
    children: dict[int, list[int]] = {}
    try:
        entries = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return []
    for name in entries:
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as stat:
                # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ')'
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found
