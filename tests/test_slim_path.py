"""The gate and check path imports nothing of the dashboard or capture stacks: a CI job that only judges
runs needs neither Streamlit and Altair (the [dashboard] extra) nor torch and nvtx (the [capture] extra),
and not pyarrow either (only reading an nsys export needs it: DuckDB hands its rows over as Arrow batches).

Each command runs as CI runs it, in a fresh interpreter, twice: once to list what it imported, once with
those stacks made unimportable (`None` in sys.modules is Python's "not installed"), where it must still
give the same answer."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.cli_helpers import cli
from tests.conftest import REPO

NOISE = REPO / "tests" / "data" / "noise"
CLAIMS = REPO / "examples" / "claims"
STACKS = ("streamlit", "altair", "torch", "nvtx", "pyarrow", "pandas", "receipts.dashboards", "receipts.capture",
          "receipts.launch")

RUN = """
import io, json, sys
block = {block}
for name in block:
    sys.modules[name] = None
out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
real, sys.stdout = sys.stdout, out
from receipts.cli.main import main
sys.argv = ["receipts", *{argv!r}]
try:
    main()
except SystemExit as done:
    code = done.code
sys.stdout = real
out.flush()
loaded = sorted(m for m in sys.modules if sys.modules[m] is not None and any(m == s or m.startswith(s + ".") for s in {stacks!r}))
print(json.dumps({{"code": code, "loaded": loaded, "out": out.buffer.getvalue().decode()}}))
"""


def _run(argv: list[str], *, block: tuple[str, ...] = ()) -> dict:
    done = subprocess.run([sys.executable, "-c", RUN.format(block=list(block), argv=argv, stacks=STACKS)],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    db = str(tmp_path_factory.mktemp("slim") / "slim.duckdb")
    runs = [str(NOISE / n / "run.log") for n in ("aa_01", "aa_02", "aa_03", "aa_04", "slow_1", "slow_2")]
    assert cli(db, "ingest", *runs).exit_code == 0
    assert cli(db, "ingest", *map(str, sorted((CLAIMS / "receipts").glob("*.log")))).exit_code == 0
    return db


@pytest.mark.slow
@pytest.mark.parametrize("argv", [
    ["check", "tag:pr-slow", "--against", "tag:main", "--json"],
    ["gate", str(CLAIMS / "true_claims.yaml"), "--json"],
    ["list", "--json"],
], ids=["check", "gate", "list"])
def test_the_judging_commands_import_no_dashboard_capture_or_arrow(store, argv):
    seen = _run(["--db", store, *argv])
    assert seen["code"] in (0, 1, 3) and seen["loaded"] == [], seen["loaded"]
    blocked = _run(["--db", store, *argv], block=STACKS)
    assert blocked["code"] == seen["code"] and json.loads(blocked["out"]) == json.loads(seen["out"])
