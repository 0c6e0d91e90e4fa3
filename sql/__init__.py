"""The analysis as plain .sql files (DuckDB SQL), one query per file, named parameters ($name).

Each file starts with a header comment: what it answers, what it reads, and each output column with
its unit. Files whose name starts with `_` are helpers for other queries.
"""

from __future__ import annotations

from functools import cache
from importlib import resources


@cache
def load_query(name: str) -> str:
    return resources.files("receipts.sql").joinpath(f"{name}.sql").read_text(encoding="utf-8")
