"""Run the real CLI in-process and parse its JSON."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from receipts.cli.main import app


def cli(db: str, *args: str):
    result = CliRunner().invoke(app, ["--db", db, *args], catch_exceptions=False)
    return result


def cli_json(db: str, *args: str):
    result = cli(db, *args, "--json")
    return result.exit_code, json.loads(result.stdout)
