"""The repository root is the import package `receipts` (pyproject.toml, setup.py): its hazards, removed.

Python started in the root puts the root on sys.path, where `errors`, `analysis` ... are importable under
bare names: a second copy of each module whose classes are not receipts.*'s (an `except InputError` that
never catches). Such an import is refused with the right name. Static tools resolve `receipts.*` from a
checkout without installing, through the link .pkgroot/receipts -> the root (mypy_path in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BARE = ["errors", "pipeline", "lifecycle", "duck", "analysis.stats", "ingest.nanochat", "store", "schema.model",
        "sql", "cli.main", "capture", "launch", "dashboards.views", "store.migrations"]


def _python(code: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *flags, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("bare", BARE)
def test_a_bare_import_from_the_root_is_refused_with_the_right_name(bare):
    done = _python(f"import {bare}")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    top = bare.split(".")[0]  # a package's __init__ runs first and refuses
    assert last == f"ImportError: import receipts.{top}, not {top}: the repository root is the package `receipts`"


def test_from_the_root_receipts_has_one_copy_of_each_module():
    done = _python("import receipts.errors, receipts.ingest.nanochat as n, sys\n"
                   "assert n.InputError is receipts.errors.InputError\n"
                   "print(sorted(m for m in sys.modules if m.split('.')[0] in "
                   "('errors', 'ingest', 'schema', 'analysis', 'store')))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_checkout_resolves_receipts_without_installing():
    # -I: isolated, no site-packages, so no editable install's finder: only the .pkgroot link can answer.
    done = _python("import sys; sys.path.insert(0, '.pkgroot')\n"
                   "import receipts.errors, receipts.schema.receipt_format as f\n"
                   "import os; print(os.path.realpath(receipts.errors.__file__)); print(f.RECORD_VERSION)", "-I")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == str((REPO / "errors.py").resolve())
