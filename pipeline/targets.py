"""What the named paths hold, decided from the file system and a sniff: one ingestible unit at a time (a file, a
`receipts run` directory, a folder of Kineto traces, a folder of one job's nsys exports), each with its kind, and the
profiles lying in a run directory. Nothing is parsed here and nothing is stored."""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from receipts.errors import InputError, Remedy
from receipts.ingest import sniff
from receipts.ingest.rank_files import natural_order

SIDECAR_NAME = "receipt.toml"


def target_kind(path: Path) -> str:
    """The kind of one target: a folder is one job's nsys exports or a set of Kineto traces; a file, what it sniffs as.
    A profile's kind is an entry of pipeline/profile_formats.py, which says how it is read."""
    return ("nsys-dir" if _is_export_folder(path) else "kineto-dir") if path.is_dir() else sniff.sniff_kind(path)


def run_dir_traces(run_dir: Path) -> list[Path]:
    """PyTorch profiler traces lying beside run.log, one per rank, in natural name order (rank2 < rank10)."""
    return natural_order(p for p in run_dir.iterdir() if p.is_file() and ".pt.trace." in p.name
                         and p.name.endswith((".json", ".json.gz")))


def profile_paths_in(run_dir: Path) -> list[tuple[Path, str]]:
    """Profiler exports in a `receipts run` directory, each with its kind: the nsys exports at the top level (one
    export is one profile; several are the job profiled one report per rank or node, one profile) and one set of
    Kineto traces (at the top level or in a sub-folder), which is one profile of all ranks."""
    from receipts.ingest import nsys_job

    exports = nsys_job.job_exports(run_dir)  # a report beside its own export counts once
    kinds = {".sqlite": "nsys", ".gz": "nsys-gz", ".nsys-rep": "nsys-rep"}
    profiles = ([(run_dir, "nsys-files")] if len(exports) > 1 else [(p, kinds[p.suffix]) for p in exports])
    traces = [p for p in sorted(run_dir.rglob("*")) if p.is_file() and p.name.endswith((".json.gz", ".json"))
              and ".pt.trace" in p.name]
    if traces:
        folder = traces[0].parent
        # The traces of one folder, not the folder itself: beside run.log they share it with other files.
        profiles.append((folder, "kineto-dir" if folder != run_dir else "kineto-files"))
    return profiles


def snapshots_in(run_dir: Path) -> list[Path]:
    """PyTorch memory snapshots in a `receipts run` directory (`*.pickle`, `*.pickle.gz`, any depth), by name."""
    return [p for p in sorted(run_dir.rglob("*")) if p.name.endswith((".pickle", ".pickle.gz")) and _regular(p)
            and sniff.sniff_kind(p) == "memory-snapshot"]


@dataclass(frozen=True)
class IngestFailure:
    """One file (or folder) that could not be ingested; nothing of it was written."""
    path: str
    error: Exception


def _file_type(mode: int) -> str | None:
    """What a non-regular, non-directory file is, in words; None for a regular file or a folder."""
    for test, what in ((stat.S_ISREG, None), (stat.S_ISDIR, None), (stat.S_ISFIFO, "named pipe (FIFO)"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device")):
        if test(mode):
            return what
    return "special file"


def _is_trace_folder(path: Path) -> bool:
    """A folder holding PyTorch profiler traces at its top level is one profile, one file per rank: its other
    JSON files are ranks too, damaged ones named when the profile is refused, unless they are JSON documents
    that are no trace (kineto.trace_files): never some ranks stored as a profile of their own."""
    return any(_sniffs(p) == "kineto" for p in path.iterdir() if p.name.endswith((".json", ".json.gz")) and _regular(p))


def _sniffs(path: Path) -> str | None:
    """sniff_kind, None for a file it cannot read (it is named when read)."""
    try:
        return sniff.sniff_kind(path)
    except InputError:
        return None


def _is_export_folder(path: Path) -> bool:
    """A folder of two or more nsys exports and nothing else (hidden files aside) is one job profiled one report
    per rank or node, read as one profile (as `nsys recipe --input DIR` reads it)."""
    from receipts.ingest import nsys_job

    files = [p for p in path.iterdir() if not p.name.startswith(".") and _regular(p)]
    return len(nsys_job.job_exports(path)) > 1 and all(nsys_job.is_export(p) for p in files)


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def ingest_targets(paths: list[Path], *, recursive: bool = False) -> Iterator[Path | IngestFailure]:
    """What the named paths hold, one ingestible unit at a time: a file, a `receipts run` directory, a folder
    of Kineto traces, or a folder of one job's nsys exports. Other folders are read file by file (sub-folders
    only with `recursive`, except run directories and folders of traces or exports, which are units). Missing paths and non-regular files (FIFOs, devices,
    sockets) come back as failures, decided from stat() alone: opening a FIFO would wait for a writer forever."""
    seen: set[Path] = set()
    for path in map(Path, paths):
        yield from _targets(path, recursive=recursive, named=True, seen=seen)


def _targets(path: Path, *, recursive: bool, named: bool, seen: set[Path]) -> Iterator[Path | IngestFailure]:
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        yield IngestFailure(str(path), InputError(path, "does not exist"))
        return
    except OSError as exc:
        yield IngestFailure(str(path), InputError(path, f"cannot read: {exc.strerror or exc}"))
        return
    what = _file_type(mode)
    if what is not None:
        yield IngestFailure(str(path), InputError(path, f"is a {what}, not a regular file or folder; refused "
                                                        "without reading it"))
        return
    if not stat.S_ISDIR(mode) or (path / "run.log").is_file() or _is_trace_folder(path) or _is_export_folder(path):
        yield path
        return
    if path.resolve() in seen:
        return  # a folder met twice (symlinks, or named twice): read once, never in a loop
    seen.add(path.resolve())
    children = [p for p in sorted(path.iterdir()) if not p.name.startswith(".") and p.name != SIDECAR_NAME]
    from receipts.ingest.nsys_job import without_exported_reports

    children = without_exported_reports(children)  # a report beside its own export: one profile
    found = False
    for child in children:
        if child.is_dir() and not recursive and not ((child / "run.log").is_file() or _is_trace_folder(child)
                                                     or _is_export_folder(child)):
            continue
        for target in _targets(child, recursive=recursive, named=False, seen=seen):
            found = True
            yield target
    if not found and named:
        deeper = Remedy("recursive") if any(p.is_dir() for p in children) else None
        yield IngestFailure(str(path), InputError(path, "holds no training logs, profiler exports or `receipts run` "
                                                        "directories", remedy=deeper))
