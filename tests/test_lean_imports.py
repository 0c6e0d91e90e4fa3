"""The command line leaves pandas out (receipts/cli/lean_imports.py): DuckDB's client would import it, and pyarrow,
before binding any parameter. Commands still work, and read the same frames through the Arrow C stream
(duck.query_frame) as through the client's pyarrow path. Reads open the store without SQLAlchemy, and `list --json`
without polars or numpy. Each command imports what it uses: `show` reads stored figures as plain rows (no polars,
numpy or SciPy), `compare` of runs without a profile too (its Student's t is analysis/student_t.py), no command
imports pydantic for the values Typer would check with it, `compare` / `explain` leave the claims file's YAML to the
gate, and no module of receipts imports SciPy (the tests' oracle only). Profiled runs too: `compare` and `explain`
judge from plain rows, without polars or numpy; a command's --help loads none of its engine."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import List, Optional

import duckdb
import pytest
from polars.testing import assert_frame_equal

from conftest import EXPLAIN_DATA, REALDATA, REPO
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


def _cli(tmp_path, *args: str, watched: tuple[str, ...] = ("pandas", "pyarrow", "sqlalchemy"), db: str | None = None
         ) -> subprocess.CompletedProcess[str]:
    """The CLI in a fresh interpreter on `db` (tmp_path's r.duckdb by default); its last stderr line names the
    `watched` modules it imported."""
    return subprocess.run([sys.executable, "-c", RUN_CLI.format(watched=watched), "--db", db or str(tmp_path / "r.duckdb"),
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


HEAVY = ("pandas", "pyarrow", "sqlalchemy", "polars", "numpy", "scipy", "yaml", "pydantic")


@pytest.fixture(scope="module")
def small_lane(tmp_path_factory):
    """The logs of four real runs of one lane (tests/data/explain: base_1..base_3 tagged main, attn_1): its noise
    floor is measured (four runs)."""
    from cli_helpers import cli

    folder = tmp_path_factory.mktemp("lean")
    runs = [EXPLAIN_DATA / run / "run.log" for run in ("base_1", "base_2", "base_3", "attn_1")]
    result = cli(str(folder / "r.duckdb"), "ingest", *map(str, runs))
    assert result.exit_code == 0, result.output
    return folder


def _imported(done: subprocess.CompletedProcess[str]) -> list[str]:
    return done.stderr.splitlines()[-1].split()[1:]


def test_show_imports_no_frame_statistics_yaml_or_pydantic(small_lane):
    """`show` prints stored figures (the summary made at ingest, the lane's floor from a few run medians): plain
    rows from the store, no polars, numpy or SciPy; Typer's pydantic is not asked about a str it would return."""
    for args in (("show", "base_1"), ("show", "base_1", "--json")):
        done = _cli(small_lane, *args, watched=HEAVY)
        assert done.returncode == 0, done.stderr
        assert _imported(done) == [], (args, done.stderr)
    assert json.loads(done.stdout)["noise_floor"]["source"] == "lane"


def test_compare_and_explain_leave_yaml_and_pydantic_out(small_lane):
    """`compare` judges against the measured floor, `explain` refuses runs without a profile; neither reads a
    claims file (YAML), a pydantic-checked value or an Arrow table, nor imports SciPy."""
    for args, code in ((("compare", "base_1", "attn_1"), 0), (("explain", "attn_1", "--against", "tag:main"), 3)):
        done = _cli(small_lane, *args, watched=HEAVY)
        assert done.returncode == code, done.stderr
        assert not {"yaml", "pydantic", "pyarrow", "pandas", "sqlalchemy", "scipy"} & set(_imported(done)), \
            (args, done.stderr)


def test_compare_without_profiles_imports_no_frame_or_statistics_library(small_lane):
    """Two log-only runs: the verdict against the lane's measured floor (Student's t from analysis/student_t.py, the
    floor from a few run medians), drift, memory and the straggler reports, all from plain rows; the explanation's
    frames and numpy load only when both runs have a profile (analysis/explain_run.py). No polars, numpy, SciPy."""
    for args in (("compare", "base_1", "attn_1"), ("compare", "base_1", "attn_1", "--json")):
        done = _cli(small_lane, *args, watched=HEAVY)
        assert done.returncode == 0, done.stderr
        assert _imported(done) == [], (args, done.stderr)
    answer = json.loads(done.stdout)
    assert answer["noise_floor"]["source"] == "lane" and answer["verdict"] == "slower" and answer["explain"] is None


PACKAGE_FOLDERS = [p.parent for p in REPO.glob("*/__init__.py") if p.parent.name not in ("tests", "benchmarks")]


def test_no_module_of_receipts_imports_scipy():
    """SciPy is the tests' oracle (tests/test_student_t.py), never a command's import: scipy.special alone was ~0.17 s
    of CPU on every verdict. Every import statement of the package, at any depth of a function."""
    importing = re.compile(r"^\s*(?:import|from)\s+scipy\b", re.MULTILINE)
    files = [REPO / "lifecycle.py", *(f for folder in PACKAGE_FOLDERS for f in folder.rglob("*.py"))]
    assert len(files) > 100 and REPO / "analysis" / "verdict.py" in files
    assert not [str(f.relative_to(REPO)) for f in files if importing.search(f.read_text(encoding="utf-8"))]


@pytest.mark.slow  # the explain lane's fourteen nsys exports, ingested once per test run
def test_profiled_show_compare_and_explain_import_no_frame_or_array_library(explain_lane, tmp_path):
    """Profiled runs: `show`, `compare` and `explain` (pairwise, and against a tag's profiled runs, the lane's prior
    fitted) read a few hundred plain rows (analysis/explain_inputs.py) and judge in plain floats: no polars, NumPy,
    pandas or SciPy, nor YAML, pydantic or an Arrow table. A category's kind comes from the rules the runs kept
    (schema/category_kinds.py), not from reading the shipped rules' TOML (schema/categories.py)."""
    for args in (("show", "attn_1"), ("compare", "base_1", "attn_1"), ("explain", "attn_1", "--against", "tag:main"),
                 ("explain", "attn_1", "--against", "base_1", "--json")):
        done = _cli(tmp_path, *args, watched=(*HEAVY, "receipts.schema.categories"), db=explain_lane)
        assert done.returncode == 0, done.stderr
        assert _imported(done) == [], (args, done.stderr)
    answer = json.loads(done.stdout)
    assert answer["mode"] == "pairwise" and answer["verdict"] == "slower" and answer["components"]


def test_a_commands_help_loads_no_engine(tmp_path):
    """`gate --help` shows the options Typer holds: the claims' YAML, the gate's statistics and DuckDB load when a
    claim is judged; so for the reading commands and `retag` (ingest, anatomy, run, push and db still load polars)."""
    for command in ("gate", "compare", "explain", "check", "show", "history", "report", "retag"):
        done = _cli(tmp_path, command, "--help", watched=(*HEAVY, "duckdb"))
        assert done.returncode == 0 and "Usage" in done.stdout, done.stderr
        assert _imported(done) == [], (command, done.stderr)


def test_a_value_typer_would_check_is_checked_as_typer_checks_it(small_lane, tmp_path):
    """Typer's own coercion still answers what needs it: a number typed on the command line (and its bounds), a
    path (here a registry the ingest reads and refuses, naming it); a str or an in-bounds default passes as it is."""
    done = _cli(small_lane, "explain", "attn_1", "--against", "tag:main", "--last", "0", watched=HEAVY)
    assert done.returncode == 2 and "--last" in done.stderr and "greater than or equal to 1" in done.stderr, done.stderr
    (tmp_path / "broken.toml").write_text("[hosts\n")
    done = _cli(small_lane, "--registry", str(tmp_path / "broken.toml"), "ingest", str(LOG), watched=HEAVY)
    assert done.returncode == 2 and "broken.toml" in done.stderr, done.stderr


def test_plain_values_first_hands_a_command_what_typer_would(monkeypatch):
    """The same command, with and without plain_values_first, receives the same values of the same types, and
    refuses the same values with the same message: strs, lists, numbers in and out of bounds, paths, defaults."""
    import typer
    from typer.testing import CliRunner

    from receipts.cli.lean_imports import plain_values_first

    def make(lean: bool):
        seen: list = []

        def command(name: str = typer.Argument(...), tag: Optional[List[str]] = typer.Option(None, "--tag"),
                    last: int = typer.Option(10, "--last", min=1), share: float = typer.Option(0.5, "--share"),
                    count: int = typer.Option(3, "--count"), where: Optional[Path] = typer.Option(None, "--where"),
                    fmt: Optional[str] = typer.Option(None, "--format"), flag: bool = typer.Option(False, "--flag")):
            seen.append([(v, type(v)) for v in (name, tag, last, share, count, where, fmt, flag)])

        app = typer.Typer()
        app.command()(command)
        return app, seen

    def invoke(app, argv: list[str], *, lean: bool):
        built = typer.main.get_command(app)
        if lean:
            plain_values_first(built)
            assert all(type(p.get_runtime_param()).__name__ == "_PlainFirst" for p in built.params)
        monkeypatch.setattr(typer.testing, "_get_command", lambda _: built)
        return CliRunner().invoke(app, argv)

    for argv in (["run_a"], ["run_a", "--tag", "x", "--tag", "y", "--last", "4", "--share", "1", "--count", "7",
                             "--where", "a/b.toml", "--format", "tsv", "--flag"],
                 ["run_a", "--last", "0"], ["run_a", "--count", "x"], ["run_a", "--share", "many"]):
        (plain, plain_seen), (lean, lean_seen) = make(False), make(True)
        expected, got = invoke(plain, argv, lean=False), invoke(lean, argv, lean=True)
        assert (got.exit_code, got.output, lean_seen) == (expected.exit_code, expected.output, plain_seen), argv


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
