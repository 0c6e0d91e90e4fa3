"""Writer processes for the races between processes (tests/test_postgres.py, tests/test_supersession.py): each
has imported the CLI once, then runs `receipts ARGS...` for each tab-separated line on its stdin and answers with
a line naming the exit code. A round hands every writer its command line at once, so the ingests start within a
millisecond of each other (a fresh interpreter per ingest spreads the starts over its ~1 s of imports, and a
race needed long runs to overlap at all); the processes are started once per test session, not per race."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

WRITER = r"""
import sys
from receipts.cli.main import main
print("\0ready", flush=True)
for line in sys.stdin:
    sys.argv = ["receipts", *line.rstrip("\n").split("\t")]
    try:
        main()
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 2)
    print(f"\0exit {code}", flush=True)
"""


class WarmWriters:
    """`n` writer processes; `race` runs one command line in each of the first len(commands) at once."""

    def __init__(self, n: int, folder: Path):
        self._errs = [folder / f"writer{i}.err" for i in range(n)]
        self._err_files = [open(err, "w") for err in self._errs]
        self._procs = [subprocess.Popen([sys.executable, "-c", WRITER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=err, text=True) for err in self._err_files]
        assert [self._answer(p)[0] for p in self._procs] == ["ready"] * n

    def __len__(self) -> int:
        return len(self._procs)

    def race(self, commands: list[list[str]]) -> list[tuple[int, str]]:
        """Each writer's exit code and what it printed on stdout; a writer that did not exit 0 fails the race
        with the end of its stderr."""
        assert len(commands) <= len(self._procs), "more racers than writers"
        procs = self._procs[:len(commands)]
        marks = [err.stat().st_size for err in self._errs]
        for proc, args in zip(procs, commands):
            proc.stdin.write("\t".join(args) + "\n")
            proc.stdin.flush()
        answers = [self._answer(p) for p in procs]
        results = [(int(code.removeprefix("exit ")), out) for code, out in answers]
        failed = [(i, code, self._errs[i].read_text()[marks[i]:][-2000:]) for i, (code, _) in enumerate(results) if code]
        assert not failed, failed[:2]
        return results

    def close(self) -> None:
        for proc in self._procs:
            proc.stdin.close()
        for proc in self._procs:
            proc.wait(timeout=60)
        for err in self._err_files:
            err.close()

    @staticmethod
    def _answer(proc: subprocess.Popen) -> tuple[str, str]:
        """The writer's next protocol line, and the CLI's own output lines before it."""
        out = []
        while True:
            line = proc.stdout.readline()
            assert line, f"writer {proc.pid} exited ({proc.poll()})"
            if line.startswith("\0"):
                return line[1:].strip(), "".join(out)
            out.append(line)
