"""The files of one profile, one per rank (or per node), in the order their names give."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path


def natural_order(paths: Iterable[Path]) -> list[Path]:
    """By name, numbers compared as numbers: rank2 before rank10, as the ranks run."""
    return sorted(paths, key=lambda p: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", Path(p).name)])
