"""Progress bars: on stderr, only on a terminal, only for work that runs longer than a second. The ingest's
(IngestProgress) and one of things done of a total (CountProgress: `receipts push`).

Parsers return data and never print; the pipeline yields one outcome per file as soon as it is stored. This
bar follows those outcomes: bytes and files done of the batch, the file in progress, time elapsed; within a
training log it follows the parser's reading too (`read`, the pipeline's progress callback: bytes and lines
of the log so far), within an nsys export the rows of its large tables streamed, and within a profile of many
files the files read (both as bytes of the file). A batch that ends within the delay never draws it, so quick
ingests and scripts (stderr not a terminal) see no change.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (BarColumn, DownloadColumn, MofNCompleteColumn, Progress, SpinnerColumn, TaskID,
                           TextColumn, TimeElapsedColumn)
from rich.table import Column

from receipts.pipeline import IngestFailure, ingest_targets

DELAY_S = 1.0


def target_bytes(target: Path) -> int:
    """A file's size, or the sum of the files in a run directory / trace folder (what the ingest reads)."""
    try:
        if target.is_dir():
            return sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
        return target.stat().st_size
    except OSError:
        return 0


# What the columns beside the name and the bar take: spinner, `454.1/454.1 MiB`, `4,000,082 lines, 0/1 files`,
# `0:00:03` and the spaces between the six columns.
_FIXED_WIDTH = 1 + 15 + 26 + 7 + 5


def _cut(max_width: int | None = None) -> Column:
    return Column(no_wrap=True, overflow="ellipsis", max_width=max_width)


class _DelayedBar:
    """A rich bar on `console` when it is a terminal, drawn only once `delay_s` has passed (`_show` sets it up and
    starts the clock), removed on exit."""

    def __init__(self, console: Console, delay_s: float) -> None:
        self.enabled = console.is_terminal
        self._console = console
        self._delay_s = delay_s
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._timer: threading.Timer | None = None
        self._started = False

    @property
    def started(self) -> bool:
        return self._started

    def _show(self, columns: tuple, description: str, **task: Any) -> None:
        """The bar of `columns` (transient: gone when done), its one task, and the clock before it is drawn."""
        self._progress = Progress(*columns, console=self._console, transient=True, refresh_per_second=8)
        self._task = self._progress.add_task(description, **task)
        self._timer = threading.Timer(self._delay_s, self._start)
        self._timer.daemon = True
        self._timer.start()

    def _start(self) -> None:
        if self._progress is not None and not self._started:
            self._started = True
            self._progress.start()

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._progress is not None and self._started:
            self._progress.stop()


class IngestProgress(_DelayedBar):
    """Use as a context manager around the ingest loop and call `done(path)` after each outcome."""

    def __init__(self, paths: list[Path], console: Console, *, recursive: bool = False, delay_s: float = DELAY_S):
        super().__init__(console, delay_s)
        self._sizes: dict[str, int] = {}
        self._order: list[str] = []
        self._files_done = 0
        self._bytes_done = 0     # bytes of the files done
        self._lines = 0          # lines read of the file in progress
        if self.enabled:
            for target in ingest_targets(list(paths), recursive=recursive):
                key = target.path if isinstance(target, IngestFailure) else str(target)
                self._order.append(key)
                self._sizes[key] = 0 if isinstance(target, IngestFailure) else target_bytes(Path(key))

    def __enter__(self) -> IngestProgress:
        if not self.enabled or not self._order:
            return self
        # One line whatever the terminal's width and the names: the file name gives way (an ellipsis), then the
        # bar, before any column wraps (rich wrapped `MiB` onto a line of its own in 80 columns).
        room = self._console.width - _FIXED_WIDTH
        bar = min(max(room // 3, 10), 40)
        columns = (SpinnerColumn(), TextColumn("[bold]{task.description}", table_column=_cut(max(room - bar, 10))),
                   BarColumn(bar_width=bar), DownloadColumn(binary_units=True, table_column=_cut()),
                   TextColumn("{task.fields[files]}", table_column=_cut()), TimeElapsedColumn(table_column=_cut()))
        # One unit more than the bytes per file: the file's last step (window, summary, the store's write) runs
        # after its last byte is read, and a task at its total is finished (rich then freezes the elapsed time
        # and blanks the spinner: a 4M-line ingest looked hung for its last 4 of 9 s).
        self._show(columns, self._label(0), total=sum(self._sizes.values()) + len(self._order),
                   files=self._files_text())
        return self

    def _label(self, index: int, *, read: bool = False) -> str:
        if index >= len(self._order):
            return "done"
        # Once a file is read, its parse (a format read whole), window, summary and store write remain.
        return f"{'finishing' if read else 'ingesting'} {Path(self._order[index]).name}"

    def _files_text(self) -> str:
        lines = f"{self._lines:,} lines, " if self._lines else ""
        return f"{lines}{self._files_done}/{len(self._order)} files"

    def read(self, bytes_read: int, lines_read: int) -> None:
        """The file in progress has been read this far (a ReadProgress callback, from the parser's reader)."""
        if self._progress is None or self._task is None:
            return
        self._lines = lines_read
        current = self._order[self._files_done] if self._files_done < len(self._order) else None
        all_read = current is not None and bytes_read >= self._sizes.get(current, 0)
        self._progress.update(self._task, completed=self._bytes_done + self._files_done + bytes_read,
                              files=self._files_text(), description=self._label(self._files_done, read=all_read))

    def done(self, path: str) -> None:
        """One outcome is in: advance by its bytes, name the next file."""
        if self._progress is None or self._task is None:
            return
        self._files_done += 1
        self._bytes_done += self._sizes.get(path, 0)
        self._lines = 0
        self._progress.update(self._task, completed=self._bytes_done + self._files_done, files=self._files_text(),
                              description=self._label(self._files_done))


class CountProgress(_DelayedBar):
    """A bar of things done of a total (`receipts push`: receipts), by the same rules as the ingest's: on stderr,
    only on a terminal, only past a delay. Call it with (done, total)."""

    def __init__(self, what: str, console: Console, *, delay_s: float = DELAY_S):
        super().__init__(console, delay_s)
        self._what = what

    def __enter__(self) -> CountProgress:
        if self.enabled:
            self._show((SpinnerColumn(), TextColumn(f"[bold]{self._what}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn()), self._what, total=None)
        return self

    def __call__(self, done: int, total: int) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=done, total=total)
