"""Layering is checked, not hoped for: the import-linter contracts in pyproject.toml."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    result = subprocess.run([exe, "--config", str(REPO / "pyproject.toml")], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 3 kept, 0 broken" in result.stdout


def test_push_copies_through_the_stores_public_api():
    """store/sync.py (`receipts push`) once called the backends' private `_write` and `_merge_json`: it uses
    Store.copy_receipt_rows / copy_attachment_rows / copy_facts now, and no `_`-prefixed Store member."""
    import ast

    tree = ast.parse((REPO / "store" / "sync.py").read_text())
    private = sorted({n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr.startswith("_")
                      and isinstance(n.value, ast.Name) and n.value.id in ("source", "target", "store")})
    assert private == [], private
