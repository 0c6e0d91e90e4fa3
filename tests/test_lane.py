"""The lane is one value (schema/lane.py): its fields are spelled in a few product files only, so adding one is one
change there (plus its columns and canonicalisation), and one stored key, receipts.lane_key, is what the lane
queries match."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import sys
import tokenize
import types

import duckdb
import pytest
import typer
from typer.testing import CliRunner

from cli_helpers import cli
from conftest import REPO, write_native_log
from receipts.schema.lane import FIELDS, OPTION, RAW, IdentityClaim, Lane
from receipts.store.migrations.v0014_lane_key import BACKFILL

SPELLED = re.compile("|".join(FIELDS))
# The short spellings of the same three: `host`/`host_lineage`, `preset`, `regime` as names of code (parameters,
# keywords, variables) close together, the way a hand-written claim spells them (`IdentityClaim(host, preset,
# regime)`, three Typer options). Names only: prose, help text and messages that mention the three are strings
# and comments, which tokenize tells apart.
SHORT_HOST, SHORT_REST, SHORT_WINDOW = {"host", "host_lineage"}, {"preset", "regime"}, 20
# The product files that may spell a field of the lane: the type itself (with the claim, IdentityClaim), the
# tables that hold the fields as columns, their canonicalisation, the frozen schema revisions that created and
# filled the columns, and an export that maps particular fields into another tool's format (PyTorch's model name
# and backend; every field also goes into its extra_info through Lane.as_dict). Everything else asks
# schema/lane.py (FIELDS, RAW, OPTION, LABEL, Lane, IdentityClaim, display); the command-line options come from
# cli/claim_options.py.
ALLOWED = {
    "schema/lane.py", "schema/identity.py", "schema/tables.py",
    "store/migrations/v0001_initial.py", "store/migrations/v0003_identity_lifecycle.py",
    "store/migrations/v0014_lane_key.py", "analysis/export.py",
}
# Dot folders (.venv, .pkgroot, a local .gpuwork copy) hold no product source of this checkout.
NOT_PRODUCT = ("tests/", "benchmarks/", "docs/", "examples/", "demo/", "build/", ".")


def _short_triple(source: str) -> bool:
    names = [t.string for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.NAME]
    return any(SHORT_REST <= (near := set(names[i:i + SHORT_WINDOW])) and near & SHORT_HOST
               for i in range(len(names)))


def _spelling_files() -> set[str]:
    found = set()
    for path in REPO.rglob("*"):
        rel = path.relative_to(REPO).as_posix()
        if path.suffix in (".py", ".sql", ".toml") and not rel.startswith(NOT_PRODUCT) and path.is_file():
            text = path.read_text(encoding="utf-8")
            if SPELLED.search(text) or (path.suffix == ".py" and _short_triple(text)):
                found.add(rel)
    return found


def test_the_lane_fields_are_spelled_in_a_few_files_only():
    """Adding a field to the identity is a change to schema/lane.py and the few files listed here, never a hunt
    through queries, views and commands: a new file spelling a field, by its name or as a host/preset/regime
    triple, fails here (ask schema/lane.py instead)."""
    found = _spelling_files()
    assert found - ALLOWED == set(), f"spell the lane's fields through schema/lane.py: {sorted(found - ALLOWED)}"
    assert ALLOWED - found == set(), f"no longer spelling a field, drop from ALLOWED: {sorted(ALLOWED - found)}"


def test_the_short_spelling_check_sees_a_hand_written_claim_and_not_prose():
    assert _short_triple("claim = IdentityClaim(host, preset, regime, hostname)\n")
    assert _short_triple("def f(host_lineage=None,\n      preset=None,\n      regime=None): pass\n")
    assert not _short_triple('msg = "a host lineage, preset, regime or tag"  # host, preset, regime\n')
    assert not _short_triple("host = 1\n" + "x = 0\n" * 30 + "preset = regime = 2\n")


def test_the_claim_spells_each_field_by_its_option():
    assert [f.name for f in dataclasses.fields(IdentityClaim)] == [OPTION[f] for f in FIELDS] + ["hostname"]
    claim = IdentityClaim.of_options({"preset": "p", "regime": "r", "other": "x"}, hostname="h")
    assert claim == IdentityClaim(None, "p", "r", "h") and claim.options() == {OPTION[f]: v for f, v in
                                                                                 zip(FIELDS, (None, "p", "r"))}
    assert claim.merged(IdentityClaim(regime="s")) == IdentityClaim(None, "p", "s", "h")


def test_what_a_retag_records_and_rewrites_follows_the_fields():
    from receipts.schema.version import IDENTITY_FIELDS
    from receipts.store.base import RETAG_COLUMNS

    for field in FIELDS:
        assert {field, RAW[field]} <= set(IDENTITY_FIELDS) and {field, RAW[field]} <= set(RETAG_COLUMNS)
    assert "lane_key" in RETAG_COLUMNS and set(OPTION) == set(FIELDS)


def test_the_key_is_canonical_in_python_and_in_sql():
    """Lane.key, which ingest and retag write, is the text the migration's SQL writes for the receipts stored
    before it, for awkward values too; it reads back to the same lane."""
    lanes = [Lane("h200-usw1c-bench-01", "nam52_h200_dense_ref_v1", "fsdp2/regional-compile"),
             Lane('é "quoted" \\ back', None, "tab\there\nnewline \x01"), Lane(None, None, None)]
    con = duckdb.connect()
    con.execute("CREATE TABLE receipts (host_lineage VARCHAR, preset_family VARCHAR, launch_regime VARCHAR, "
                "lane_key VARCHAR)")
    con.executemany("INSERT INTO receipts VALUES (?, ?, ?, NULL)", [list(lane.as_dict().values()) for lane in lanes])
    con.execute(BACKFILL)
    keys = [r[0] for r in con.execute("SELECT lane_key FROM receipts ORDER BY rowid").fetchall()]
    assert keys == [lane.key for lane in lanes]
    assert [Lane.from_key(k) for k in keys] == lanes
    assert str(lanes[0]) == "h200-usw1c-bench-01 · nam52_h200_dense_ref_v1 · fsdp2/regional-compile"
    assert lanes[1].missing == ["preset_family"] and not lanes[1].complete and lanes[0].complete


def test_ingest_and_retag_keep_the_stored_key_with_the_fields(tmp_path, db):
    log = write_native_log(tmp_path / "a.log", [100.0] * 6, preset=None)
    assert cli(db, "ingest", str(log)).exit_code == 0
    done = cli(db, "retag", "a", "--preset", "nam52_h200_dense_ref_v1", "--why", "the header lacked it")
    assert done.exit_code == 0, done.output
    con = duckdb.connect(db, read_only=True)
    row = con.execute(f"SELECT lane_key, {', '.join(FIELDS)} FROM receipts").fetchone()
    con.close()
    assert row[0] == Lane(*row[1:]).key and Lane.from_key(row[0]).complete


# ---- adding a field is one change -----------------------------------------------------------------------------
def _lane_module_with(field: str, option: str, label: str, url: str) -> types.ModuleType:
    """schema/lane.py as it reads after adding `field` to the lane: its line in Lane and in IdentityClaim, and its
    entries in RAW, OPTION, LABEL and URL_PARAM; nothing else edited."""
    source = (REPO / "schema" / "lane.py").read_text(encoding="utf-8")
    edits = [(rf"^(    {FIELDS[-1]}: str \| None\n)", rf"\1    {field}: str | None\n"),
             (r"^(    hostname: str \| None = None\n)", rf"    {option}: str | None = None\n\1")]
    edits += [(rf"^({table} = {{.*)}}$", rf'\1, "{field}": "{value}"}}')
              for table, value in (("RAW", f"raw_{field}"), ("OPTION", option), ("LABEL", label), ("URL_PARAM", url))]
    edited = source
    for pattern, replacement in edits:
        edited, n = re.subn(pattern, replacement, edited, flags=re.M)
        assert n == 1, f"schema/lane.py no longer has one place matching {pattern!r}: update this test's edit"
    module = types.ModuleType("lane_with_a_field")
    sys.modules[module.__name__] = module  # dataclasses resolve the module's annotations through sys.modules
    try:
        exec(compile(edited, "schema/lane.py (a field added)", "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    return module


def test_a_field_added_to_schema_lane_py_reaches_key_display_sql_claim_and_options():
    """The key, display, URL parameters, the SQL macros that read the stored key, the claim and the command-line
    options all follow a fourth field added in schema/lane.py alone."""
    lane4 = _lane_module_with("numerics", "numerics", "numerics", "numerics")
    assert lane4.FIELDS == (*FIELDS, "numerics") and len(lane4.RAW) == len(lane4.OPTION) == len(lane4.LABEL) == 4
    lanes = [lane4.Lane("h200-usw1c-bench-01", "nam52_h200_dense_ref_v1", "fsdp2/regional-compile", "bf16"),
             lane4.Lane("a · b", "é \"q\"", "x", None)]
    for lane in lanes:
        assert lane4.Lane.from_key(lane.key) == lane and lane4.Lane.from_url(lane.url_params()) == lane
        assert lane.key == json.dumps(list(lane.values()), separators=(",", ":"), ensure_ascii=False)
    assert str(lanes[0]) == "h200-usw1c-bench-01 · nam52_h200_dense_ref_v1 · fsdp2/regional-compile · bf16"
    assert lanes[1].missing == ["numerics"] and not lanes[1].complete and lanes[0].complete
    assert lane4.Lane.of({**lanes[0].as_dict(), "other": 1}) == lanes[0]

    # sql/_macros.sql: lane_values / lane_label read any number of fields from the stored key
    macros = (REPO / "sql" / "_macros.sql").read_text(encoding="utf-8")
    con = duckdb.connect()
    for statement in re.findall(r"^CREATE OR REPLACE TEMP MACRO lane_\w+\(.*?;$", macros, flags=re.M | re.S):
        con.execute(statement)
    for lane in lanes:
        values, label = con.execute("SELECT lane_values(?), lane_label(?, ?)", [lane.key, lane.complete, lane.key]
                                    ).fetchone()
        assert tuple(values) == lane.values() and label == (str(lane) if lane.complete else "rumor")

    # the claim, and the command-line options cli/claim_options.py declares from it
    claim = lane4.IdentityClaim.of_options({"host_lineage": "h", "numerics": "bf16"}, hostname="box")
    assert claim.raw() == lane4.Lane("h", None, None, "bf16") and list(claim.options()) == list(lane4.OPTION.values())
    from receipts.cli import claim_options as options_module

    seen = []
    app = typer.Typer()
    with pytest.MonkeyPatch.context() as mp:
        for name in ("FIELDS", "OPTION", "IdentityClaim"):
            mp.setattr(options_module, name, getattr(lane4, name))

        @app.command()
        @options_module.claim_options("host", "preset", "regime", "The run's lowest numerical precision.")
        def ingest(path: str = typer.Argument(...), claim: IdentityClaim = IdentityClaim()) -> None:
            seen.append((path, claim))

        shown = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "120"})
        done = CliRunner().invoke(app, ["a.log", "--numerics", "fp8", "--preset", "p"])
    assert "--numerics" in shown.output and "lowest numerical precision" in shown.output
    assert done.exit_code == 0, done.output
    assert seen == [("a.log", lane4.IdentityClaim(None, "p", None, "fp8"))]
