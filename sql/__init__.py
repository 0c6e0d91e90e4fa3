"""The analysis as plain .sql files (DuckDB SQL), one query per file, named parameters ($name).

Each file starts with a header comment: what it answers, what it reads, and each output column with
its unit. Files whose name starts with `_` are helpers for other queries.
"""

from __future__ import annotations

if __name__.split(".")[0] != "receipts":  # a second copy under a bare name: see receipts/errors.py
    raise ImportError(f"import receipts.{__name__}, not {__name__}: the repository root is the package `receipts`")

from functools import cache
from importlib import resources


@cache
def load_query(name: str) -> str:
    return resources.files("receipts.sql").joinpath(f"{name}.sql").read_text(encoding="utf-8")
