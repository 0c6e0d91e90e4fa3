"""The profile kinds receipts reads: one typed entry per kind a target can be (pipeline/targets.py target_kind:
ingest/sniff.py's answer for a file, the folder's contents for a folder; profile_paths_in for a run directory's),
naming the module under receipts.ingest that parses it, how the profile is read, the files it is made of and
whether they are read one task per file (pipeline/execution.py).

pipeline/parse.py reads a profile by its entry. A kind no entry names is a RegistryError naming it, never a
fall-through to some parser; so is a parser module that cannot be imported: the installation is broken, not the
file (the batch stops there: pipeline/ingest.py). The modules load when a profile is read, not when this registry
is imported.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Literal

from receipts.errors import RegistryError
from receipts.pipeline.targets import run_dir_traces

# 'nsys-export': one nsys export (nsys_job.read_export); 'nsys-job': one job's exports, one per rank or node, read
# as one anatomy (execution.parse_nsys_job); 'kineto': PyTorch profiler traces, one per rank (execution.parse_kineto)
Reader = Literal["nsys-export", "nsys-job", "kineto"]


def _itself(path: Path) -> list[Path]:
    return [path]


def _job_exports(path: Path) -> list[Path]:
    from receipts.ingest import nsys_job

    return nsys_job.job_exports(path)


def _folder_traces(path: Path) -> list[Path]:
    from receipts.ingest import kineto

    return kineto.trace_files(path)


@dataclass(frozen=True)
class ProfileFormat:
    kind: str                                  # what target_kind (or profile_paths_in) answers
    parser: str                                # its module under receipts.ingest
    reader: Reader
    files: Callable[[Path], list[Path]]        # the files read, in rank order
    # The files its source's digest covers (pipeline/parse.py source_file); None: the path's own, the file or
    # every file of the folder.
    hashed: Callable[[Path], list[Path]] | None = None
    many_files: bool = False                   # one task per file (pipeline/execution.py), raw events staged per file

    @property
    def module(self) -> str:
        return f"receipts.ingest.{self.parser}"

    def parser_module(self) -> ModuleType:
        """The parser's module, imported; a RegistryError naming it when it cannot be."""
        try:
            return importlib.import_module(self.module)
        except ImportError as exc:
            raise RegistryError("profile format", self.kind, self.module,
                                f"cannot be imported ({type(exc).__name__}: {exc})") from exc


PROFILE_FORMATS: dict[str, ProfileFormat] = {f.kind: f for f in (
    ProfileFormat("nsys", "nsys_job", "nsys-export", _itself),
    ProfileFormat("nsys-gz", "nsys_job", "nsys-export", _itself),
    ProfileFormat("nsys-rep", "nsys_job", "nsys-export", _itself),
    ProfileFormat("nsys-dir", "nsys_job", "nsys-job", _job_exports, _job_exports, many_files=True),
    ProfileFormat("nsys-files", "nsys_job", "nsys-job", _job_exports, _job_exports, many_files=True),
    ProfileFormat("kineto", "kineto", "kineto", _itself),
    ProfileFormat("kineto-dir", "kineto", "kineto", _folder_traces, many_files=True),
    ProfileFormat("kineto-files", "kineto", "kineto", run_dir_traces, run_dir_traces, many_files=True),
)}


def profile_format(kind: str) -> ProfileFormat:
    """The entry of a profile kind; a RegistryError naming the kind when there is none."""
    found = PROFILE_FORMATS.get(kind)
    if found is None:
        raise RegistryError("profile format", kind, __name__,
                            f"has no entry for it (profile kinds: {', '.join(PROFILE_FORMATS)})")
    return found
