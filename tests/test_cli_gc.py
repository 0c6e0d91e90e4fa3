"""The command line's process freezes what it has loaded out of the garbage collector's way (cli/main.py main()):
Typer and the command list at start-up, then the command's modules once imported; a library caller keeps the
collector as it was. gc.get_objects() lists the objects the collector still walks: a frozen one is not among them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO

CHILD = """
import gc, sys
from receipts.cli import main as cli
frozen_before = gc.get_freeze_count()
sys.argv = ["receipts", "gate", "--help"]
try:
    cli.main()
except SystemExit:
    pass
import receipts.cli.gate_cmd as command
walked = {id(o) for o in gc.get_objects()}
print(frozen_before, gc.get_freeze_count() > 0, id(cli.main) in walked, id(command.register) in walked)
"""


@pytest.mark.slow  # a subprocess of the CLI
def test_the_command_line_freezes_start_up_and_the_commands_modules():
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, cwd=REPO, check=True)
    before, frozen, main_walked, command_walked = done.stdout.split()[-4:]
    assert before == "0"  # importing receipts freezes nothing: only main() does
    assert (frozen, main_walked, command_walked) == ("True", "False", "False")
