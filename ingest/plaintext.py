"""Reading a small tool-output text file (`nvidia-smi topo -m`, collect_env, nccl-tests).

Standard library only: the launcher parses the topology for the run header before the child starts,
on nodes where the dataframe stack may not be importable (the GPU machine's python has torch only).
"""

from __future__ import annotations

from pathlib import Path

from receipts.errors import InputError


def read_text(path: Path) -> str:
    """The file's text, undecodable bytes replaced; an unreadable file is one InputError naming it."""
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from exc
