"""Scratch folders an ingest writes and removes, and what a killed ingest left of them.

An ingest stages work on disk: a long log's step rows (ingest/spool.py), the Parquet slices of a bulk write
(store/duckdb_store.py), a gzipped nsys export unpacked (ingest/nsys_job.py). Each goes in a temporary folder
removed when the step ends, or fails: but a process killed outright (SIGKILL, the OOM killer, a node lost) runs
no cleanup, and a 10M-step log left ~100 MB behind, an unpacked export gigabytes. So each folder's name carries
its owner, host and pid (`receipts-steps-gpu07-41233-k2j9x1`), and a process's first one in a folder first
removes those of this host whose process is gone (once: an orphan is left by a process that died before this one
looked, and a batch of a thousand logs need not list the temp dir a thousand times). A folder of another host (a
temp dir shared by containers, whose pids are not ours to judge) or of a live process is left alone, as is
anything not named this way. A write refused for want of space there is said as such (errors.ScratchFull).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from receipts.errors import ScratchFull

_HOST = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname())[:64] or "host"
_OWNED = re.compile(r"^receipts-[a-z]+-(?P<host>[A-Za-z0-9._]+)-(?P<pid>[0-9]+)-[^/]+$")
_swept: set[Path] = set()  # folders this process has removed the orphans of


@contextmanager
def scratch_dir(kind: str, parent: Path | None = None) -> Iterator[Path]:
    """A fresh folder `receipts-<kind>-<host>-<pid>-*` in `parent` (the temp dir by default), removed on exit;
    the orphans of killed ingests there are removed first, the first time this process makes one there."""
    where = Path(parent) if parent is not None else Path(tempfile.gettempdir())
    if where not in _swept:
        remove_orphans(where)
        _swept.add(where)
    with tempfile.TemporaryDirectory(prefix=f"receipts-{kind}-{_HOST}-{os.getpid()}-", dir=where) as folder:
        try:
            yield Path(folder)
        except Exception as exc:
            if _filled(exc, where):
                raise ScratchFull(where) from exc
            raise


def _filled(exc: Exception, where: Path) -> bool:
    """Whether `exc` is a write refused for want of space (ENOSPC from Python, polars' 'os error 28', DuckDB's
    IOException text) on the disk of `where`: the store's own disk filling is another matter, told apart by
    what is left here while the failed write's partial files still stand."""
    full = (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or any(
        text in str(exc) for text in ("No space left on device", "os error 28"))
    if not full:
        return False
    try:
        return shutil.disk_usage(where).free < _NEARLY_FULL
    except OSError:
        return False


_NEARLY_FULL = 16 << 20  # bytes free under which a refused write was this folder's disk filling


def remove_orphans(parent: Path) -> list[Path]:
    """Remove the scratch folders in `parent` of this host's processes that no longer run; returns them."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for entry in entries:
        owned = _OWNED.match(entry.name)
        if owned is None or owned["host"] != _HOST or not entry.is_dir(follow_symlinks=False):
            continue
        if _running(int(owned["pid"])):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    return removed


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: running
        return True
    except OverflowError:
        return False
    return True
