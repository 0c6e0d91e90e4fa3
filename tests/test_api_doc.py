"""docs/api.md runs as written: its Python blocks in order, in one namespace, from a folder where `tests/` is this
repository's (the page's paths are relative to the root) and the store is new; each block's printed output is the
text block under it, exactly. The page's numbers are the real runs' (tests/data/explain, tests/data/memory)."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from conftest import REPO

PAGE = REPO / "docs" / "api.md"
BLOCK = re.compile(r"```(python|text)\n(.*?)```", re.S)


def examples() -> list[tuple[str, str | None]]:
    """(code, the output printed under it, or None when no text block follows) of each Python block."""
    blocks = BLOCK.findall(PAGE.read_text(encoding="utf-8"))
    out: list[tuple[str, str | None]] = []
    for n, (kind, body) in enumerate(blocks):
        if kind == "python":
            follows = blocks[n + 1] if n + 1 < len(blocks) else None
            out.append((body, follows[1] if follows and follows[0] == "text" else None))
    return out


def test_the_page_has_an_example_for_each_entry_point():
    code = "\n".join(body for body, _ in examples())
    for call in ("ingest_paths(", "compare_in_store(", "explain_in_store(", "estimate("):
        assert call in code, call


@pytest.mark.slow  # ingests two nsys exports and five logs (~5 s here)
def test_the_api_page_runs_and_prints_what_it_shows(tmp_path, monkeypatch):
    (tmp_path / "tests").symlink_to(REPO / "tests")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "api_doc"}
    for n, (code, shown) in enumerate(examples(), start=1):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(code, f"{PAGE.name} example {n}", "exec"), namespace)  # noqa: S102 - the page's own code
        assert printed.getvalue() == (shown or ""), f"example {n}"
