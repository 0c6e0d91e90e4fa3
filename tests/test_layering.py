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


def test_the_library_names_no_flag_of_the_command_line():
    """The library states the parameter an error is about and what would get past it (errors.Remedy); only
    cli/ words them as flags and command lines (cli/words.py). A string of analysis/, ingest/, pipeline/ or
    lifecycle.py that names one of the CLI's own options fails here; other tools' flags (nsys, pip, dask) are
    theirs to name."""
    import ast
    import re

    import click
    import typer.main

    from receipts.cli.main import app

    def options(command: click.Command, ctx: click.Context) -> set[str]:
        found = {o for p in command.params for o in p.opts if o.startswith("--")}
        if hasattr(command, "list_commands"):  # commands load lazily (cli/main.py): ask the group
            for name in command.list_commands(ctx):
                found |= options(command.get_command(ctx, name), ctx)
        return found

    group = typer.main.get_command(app)
    ours = options(group, click.Context(group)) - {"--help"}
    assert {"--attach", "--force", "--workers", "--tag"} <= ours
    flag = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, sorted(ours, key=len, reverse=True))) + r")(?![\w-])")
    found = []
    for path in [*(p for d in ("analysis", "ingest", "pipeline") for p in (REPO / d).rglob("*.py")),
                 REPO / "lifecycle.py"]:
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                    and not re.search(r"\b(nsys|pip install|dask scheduler)\b", node.value)
                    and flag.search(node.value)):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value[:80]!r}")
    assert found == [], found
