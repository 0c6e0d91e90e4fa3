"""The command line leaves pandas out (receipts/cli/lean_imports.py): DuckDB's client would import it, and pyarrow,
before binding any parameter. Commands still work, and read the same frames through the Arrow C stream
(duck.query_frame) as through the client's pyarrow path. Reads open the store without SQLAlchemy, and `list --json`
without polars or numpy."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone

import duckdb
import pytest
from polars.testing import assert_frame_equal

from conftest import REALDATA, REPO
from receipts.duck import query_frame

LOG = REALDATA / "logs" / "sft_run_gtx1660.log"

RUN_CLI = """
import sys
from receipts.cli.main import main
sys.argv = ["receipts", *sys.argv[1:]]
try:
    main()
except SystemExit as done:
    code = done.code
else:
    code = 0
print("IMPORTED", " ".join(sorted(m for m in {watched!r} if m in sys.modules)), file=sys.stderr)
sys.exit(code)
"""


def _cli(tmp_path, *args: str, watched: tuple[str, ...] = ("pandas", "pyarrow", "sqlalchemy")
         ) -> subprocess.CompletedProcess[str]:
    """The CLI in a fresh interpreter; its last stderr line names the `watched` modules it imported."""
    return subprocess.run([sys.executable, "-c", RUN_CLI.format(watched=watched), "--db", str(tmp_path / "r.duckdb"),
                           *args], capture_output=True, text=True, cwd=REPO, timeout=300)


def test_ingest_show_and_list_run_without_pandas_or_pyarrow(tmp_path):
    # SQLAlchemy builds a new store's tables and writes rows; reads open the store without it (schema/version.py)
    for args, imported in ((("ingest", str(LOG)), ["sqlalchemy"]), (("show", "sft_run_gtx1660"), []),
                           (("list", "--json"), []), (("ingest", str(LOG)), [])):
        done = _cli(tmp_path, *args)
        assert done.returncode == 0, done.stderr
        assert done.stderr.splitlines()[-1].split() == ["IMPORTED", *imported], (args, done.stderr)
    assert "unchanged" in done.stdout


def test_list_json_loads_neither_polars_nor_numpy(tmp_path):
    """`list --json` goes store -> plain rows -> orjson (analysis/listing.py): importing polars and numpy was
    ~0.15 s of its 0.68 s over 10,000 receipts (benchmarks/bench_gate.py). The table's rich loads for the table."""
    assert _cli(tmp_path, "ingest", str(LOG)).returncode == 0
    done = _cli(tmp_path, "list", "--json", watched=("polars", "numpy", "rich.table", "receipts.schema.model"))
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[-1].split() == ["IMPORTED"], done.stderr
    assert [r["run_name"] for r in json.loads(done.stdout)] == ["sft_run_gtx1660"]


def test_a_finder_answers_import_pandas_as_not_installed():
    code = ("from receipts.cli.lean_imports import leave_pandas_out, pandas_left_out\n"
            "assert leave_pandas_out() and pandas_left_out()\n"
            "import importlib.util, duckdb, polars as pl\n"
            "try:\n    import pandas\nexcept ModuleNotFoundError as e:\n    print('refused', e.name)\n"
            "print(duckdb.connect().execute('SELECT ? AS a', ['x']).fetchall())\n"
            "print(pl.DataFrame({'a': [1]}).to_dicts())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout.split("\n")[:3] == ["refused pandas", "[('x',)]", "[{'a': 1}]"]


def test_once_pandas_is_imported_it_stays():
    pytest.importorskip("pandas")
    code = ("import pandas\nfrom receipts.cli.lean_imports import leave_pandas_out, pandas_left_out\n"
            "print(leave_pandas_out(), pandas_left_out())\nimport pandas.api\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout.split() == ["False", "False"]


def test_query_frame_reads_what_the_clients_pyarrow_path_reads():
    con = duckdb.connect()
    con.execute("CREATE TABLE t (i INTEGER, b BIGINT, u UBIGINT, f DOUBLE, s VARCHAR, ts TIMESTAMPTZ, d DATE, "
                "dec DECIMAL(10, 2), j JSON, l INTEGER[], ok BOOLEAN)")
    con.execute("INSERT INTO t VALUES (1, 2, 3, 1.5, 'x', ?, DATE '2026-11-24', 1.25, '{\"a\": 1}', [1, 2], true),"
                " (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
                [datetime(2026, 11, 24, tzinfo=timezone.utc)])
    for query, params in (("SELECT * FROM t ORDER BY i", None), ("SELECT * FROM t WHERE s = ?", ["x"]),
                          ("SELECT * FROM t WHERE s = $s", {"s": "nothing"}), ("SELECT count(*) AS n FROM t", [])):
        expected = con.execute(query, params or []).pl()
        assert_frame_equal(query_frame(con, query, params), expected)
