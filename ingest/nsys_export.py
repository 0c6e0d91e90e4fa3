"""`.nsys-rep` -> `.sqlite`: an Nsight Systems report exported through the `nsys` command line tool.

The parser (ingest/nsys.py) reads the SQLite export only; a report is exported first, beside itself (kept there for
the next ingest while newer than the report) or, from a read-only folder, into a scratch folder the caller removes.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from receipts.errors import InputError


def export_report(path: Path, into: Path | None = None) -> Path:
    """`.nsys-rep` -> `.sqlite` via `nsys export`: beside the report (and reused there while newer than it), or in
    the folder `into` (a scratch folder the caller removes: the report's own folder is read-only)."""
    path = Path(path)
    out = path.with_suffix(".sqlite") if into is None else into / path.with_suffix(".sqlite").name
    if into is None and out.is_file() and out.stat().st_mtime >= path.stat().st_mtime:
        return out
    command = ["nsys", "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(out), str(path)]
    if shutil.which("nsys") is None:
        raise InputError(path, "an Nsight Systems report needs exporting to SQLite first and `nsys` is not on "
                               f"PATH; run: {' '.join(command[:5])} --output {out} {path}")
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0 or not out.is_file():
        raise InputError(path, f"`{' '.join(command)}` failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    return out


def exports_beside(path: Path) -> bool:
    """Whether a report's export can be written (and kept for the next ingest) beside it."""
    folder = Path(path).parent
    return folder.exists() and _writable(folder)


def _writable(folder: Path) -> bool:
    try:
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False
