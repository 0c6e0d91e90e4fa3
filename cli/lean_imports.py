"""The command-line process leaves pandas out.

DuckDB's Python client imports pandas, and pyarrow with it, before it binds any parameter (duckdb/duckdb#18658,
since 1.4), to recognise pandas' missing-value objects among the parameters. receipts binds str, int, float and
None, never a pandas object, and reads results through the Arrow C stream (duck.query_frame), so pandas did
nothing in a command but cost its import: 69 MiB of every ingest's peak RSS (248 -> 179 MiB for a short log)
and ~0.3 s of every command's start-up (benchmarks/bench_log_ingest.py's floor, benchmarks/bench_gate.py's
`list`). A finder first on sys.meta_path answers `import pandas` with ModuleNotFoundError, as if pandas were not
installed, which DuckDB, pyarrow and polars all take in their stride (a `None` in sys.modules is not enough:
Cython's import hands pyarrow the None). Only the command line does this: a notebook or a script importing
receipts keeps its pandas, and the dashboard, which Streamlit builds on pandas, runs in its own process.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any


class _LeavePandasOut(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname == "pandas" or fullname.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {fullname!r} (the receipts command line leaves pandas out: "
                                      "receipts/cli/lean_imports.py)", name=fullname)
        return None  # not ours: the next finder looks


def leave_pandas_out() -> bool:
    """From now on `import pandas` fails in this process; False when pandas is already imported (it stays)."""
    if "pandas" in sys.modules:
        return False
    if not pandas_left_out():
        sys.meta_path.insert(0, _LeavePandasOut())
    return True


def pandas_left_out() -> bool:
    """Whether this process leaves pandas out (a worker process it starts should too)."""
    return any(isinstance(finder, _LeavePandasOut) for finder in sys.meta_path)


class pandas_allowed:
    """`with pandas_allowed():` lets pandas be found for a while: torch._dynamo asks importlib whether pandas is
    installed (find_spec, which expects None rather than an error) when `receipts estimate --model` imports
    PyTorch's memory tracker."""

    def __enter__(self) -> None:
        self.removed = [f for f in sys.meta_path if isinstance(f, _LeavePandasOut)]
        for finder in self.removed:
            sys.meta_path.remove(finder)

    def __exit__(self, *exc: object) -> None:
        if "pandas" not in sys.modules:
            sys.meta_path[:0] = self.removed
