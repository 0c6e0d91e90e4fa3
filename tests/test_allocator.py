"""The command line sets polars' allocator option before polars loads (receipts/cli/allocator.py), and leaves
a value the user set alone; too late (polars already loaded, its own options set) it says so."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO

PROBE = """
import os, sys
from receipts.cli.allocator import JEMALLOC_CONF, return_freed_memory_at_once
{before}
took = return_freed_memory_at_once()
print(took, os.environ.get("_RJEM_MALLOC_CONF"))
"""


def _probe(before: str = "", env: dict[str, str] | None = None) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    done = subprocess.run([sys.executable, "-c", PROBE.format(before=before)], capture_output=True, text=True,
                          check=True, cwd=REPO, env={**clean, **(env or {})})
    return done.stdout.strip()


def test_the_option_is_set_before_polars_loads():
    from receipts.cli.allocator import JEMALLOC_CONF

    assert _probe() == f"True {JEMALLOC_CONF}"


def test_a_value_the_user_set_wins():
    assert _probe(env={"_RJEM_MALLOC_CONF": "narenas:2"}) == "False narenas:2"


def test_after_polars_loaded_it_is_too_late_and_says_so():
    from receipts.cli.allocator import JEMALLOC_CONF

    took, value = _probe(before="import polars").split()
    assert took == "False" and JEMALLOC_CONF not in value  # polars' own defaults, set as it loaded


def test_the_cli_sets_it_for_the_commands_it_runs(tmp_path):
    # `receipts` itself, then a command that loads polars: the option was in place by then
    script = ("import os, sys; sys.argv = ['receipts', '--version']\n"
              "from receipts.cli.main import main\n"
              "try:\n    main()\nexcept SystemExit:\n    pass\n"
              "print(os.environ.get('_RJEM_MALLOC_CONF'), 'polars' in sys.modules)")
    clean = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=REPO,
                         env=clean).stdout.split()
    from receipts.cli.allocator import JEMALLOC_CONF

    assert out[-2:] == [JEMALLOC_CONF, "False"]
