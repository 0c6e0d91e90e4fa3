"""Every command is documented (docs/cli.md, generated from --help), with help text and an example, and the
README stays a front page (like sqlite-utils)."""

from __future__ import annotations

from pathlib import Path

import click
import typer.main

from receipts.cli.main import COMMAND_MODULES, app

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = {path.relative_to(ROOT).as_posix(): path.read_text() for path in sorted((ROOT / "docs").glob("*.md"))}


def _commands():
    group = typer.main.get_command(app)
    ctx = click.Context(group)
    for name in group.list_commands(ctx):  # commands load lazily (cli/main.py): ask the group, not .commands
        command = group.get_command(ctx, name)
        yield name, command
        for sub_name, sub in getattr(command, "commands", {}).items():
            yield f"{name} {sub_name}", sub


def test_every_command_module_exists():
    import importlib

    for name in COMMAND_MODULES:
        importlib.import_module(f"receipts.cli.{name}")


def test_every_command_is_in_the_cli_reference_with_help():
    names = dict(_commands())
    for required in ("ingest", "list", "show", "compare", "anatomy", "gate", "run", "preflight", "dashboard"):
        assert required in names, required
    for name, command in names.items():
        assert f"## `receipts {name}`" in DOCS["docs/cli.md"], f"`receipts {name}` missing from docs/cli.md"
        assert (command.help or "").strip(), f"`receipts {name}` has no help text"


def test_the_cli_reference_is_generated_from_the_commands_help():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "cli_docs.py"), "--check"], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr


def test_the_readme_is_a_front_page():
    """A newcomer reads it in five minutes: the reference lives in docs/."""
    lines = README.splitlines()
    assert len(README) <= 15_000, len(README)
    assert len(lines) <= 160, len(lines)
    assert max(len(line) for line in lines) <= 400
    for heading in ("## Install", "## Quick start", "## Documentation", "## Development"):
        assert heading in README, heading
    assert "bash demo/run.sh" in README and "bash scripts/test.sh" in README


def test_every_docs_link_resolves():
    import re

    for name, text in {"README.md": README, **DOCS}.items():
        base = (ROOT / name).parent
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if target.startswith(("http://", "https://")):
                continue
            assert (base / target).exists(), f"{name} links to {target}, which does not exist"


def test_every_leaf_command_carries_an_example():
    for name, command in _commands():
        if getattr(command, "commands", None):
            continue
        assert "Example:" in (command.help or ""), f"`receipts {name}` help has no 'Example:'"


def _options(command) -> set[str]:
    return {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}


def _readme_invocations():
    """Every `receipts ...` the README and docs/ show, inline or in a code block: (command path, its options)."""
    import re
    import shlex

    pages = [README, *(text for name, text in DOCS.items() if name != "docs/cli.md")]
    text = "\n".join(line.split("#")[0] for page in pages for line in page.splitlines())  # a trailing comment is not an option
    found = re.findall(r"`(receipts [^`\n]+)`", text) + re.findall(r"^\s*(?:\$ )?(receipts [^\n`]+)$", text, re.M)
    for snippet in found:
        try:
            words = shlex.split(snippet.split("|")[0].split("&&")[0].replace("…", "x").rstrip("\\"), posix=True)
        except ValueError:  # an unbalanced quote in prose: split on spaces
            words = snippet.split()
        yield snippet, words[1:]


def test_every_option_the_readme_shows_exists():
    """A renamed or removed option leaves the docs lying: every `--flag` shown after `receipts CMD` must be
    an option of CMD (or of `receipts` itself), every COMMAND a command."""
    group = typer.main.get_command(app)
    ctx = click.Context(group)
    global_options = _options(group)
    checked = 0
    for snippet, words in _readme_invocations():
        path = []
        command = group
        for word in words:
            if word.startswith("-") or word == "--":
                break
            sub = command.get_command(ctx, word) if hasattr(command, "get_command") else None
            if sub is None:
                break
            command, path = sub, [*path, word]
        if not path:
            continue
        for word in words:
            if word == "--":
                break  # what follows `--` belongs to the launched command (receipts run -- torchrun ...)
            if word.startswith("--"):
                option = word.split("=")[0]
                assert option in _options(command) | global_options, \
                    f"the docs show `{snippet}` but `receipts {' '.join(path)}` has no {option}"
                checked += 1
    assert checked >= 15, checked  # the README shows many; finding few means this parser broke


# Statements Python assembles: the only interpolations allowed, each a table/column name from the schema's own
# lists, a fixed SQL fragment chosen in code, an ATTACH path/DSN quoted as a literal (ATTACH takes no bound
# parameters), or a push's batch of the source store's own receipt ids quoted as literals (store/sync._quoted:
# DuckDB prunes a scan by constants, never by a bound list). A new interpolation of anything else (a value!)
# fails here until it becomes a parameter.
SQL_INTERPOLATIONS = {
    "store/sync.py": {"columns", "table", "where", "ids"},
    "duck.py": {"table", "columns"},
    "store/postgres_store.py": {"quoted", "column", "alias"},  # alias: pg_<n>, counted by the store
    "store/duckdb_store.py": {"table", "names", "placeholders", "column", "columns", "', '.join(columns)",
                              "', '.join(f'{c} = ?' for c in changes)", "sets"},  # sets: ReceiptFill's checked names
    "ingest/nsys_activity.py": {"pid", "KIND[kind]", "name if kind == 'kernel' else 'NULL'",
                                "short if kind == 'kernel' else 'NULL'", "copy if kind == 'memcpy' else 'NULL'",
                                "in_graph", "table", "str(path.resolve()).replace(chr(39), chr(39) * 2)", "_PID_MASK",
                                "domain", "text", "nvtx_table", "join", "stream", "gpu", "shape"},
    "ingest/nsys_schema.py": {"table", "', '.join(select)", "col"},
}


def test_sql_is_assembled_only_from_names_never_from_values():
    import ast
    import re

    root = Path(__file__).resolve().parents[1]
    keyword = re.compile(r"^\s*(SELECT|UPDATE|INSERT|CREATE|ATTACH|WITH|DELETE|ALTER|DROP|COPY)\b")  # SQL keywords are upper case here; prose ("attach one: ...") is not
    product = [p for d in ("analysis", "store", "cli", "dashboards", "ingest", "schema", "launch", "capture", "sql",
                                "pipeline") for p in (root / d).rglob("*.py")] + [root / f for f in ("lifecycle.py", "duck.py")]
    seen = 0
    for path in product:
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if not (isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant)
                    and isinstance(node.values[0].value, str) and keyword.match(node.values[0].value)):
                continue
            where = path.relative_to(root).as_posix()
            for part in node.values:
                if isinstance(part, ast.FormattedValue):
                    expr = ast.get_source_segment(source, part.value)
                    assert expr in SQL_INTERPOLATIONS.get(where, set()), \
                        f"{where}:{node.lineno} splices {expr!r} into SQL: pass a value as a parameter"
                    seen += 1
    assert seen > 10, seen
