"""The lane is one value (schema/lane.py): its fields are spelled in a few product files only, so adding one is one
change there (plus its columns and canonicalisation), and one stored key, receipts.lane_key, is what the lane
queries match."""

from __future__ import annotations

import re

import duckdb

from cli_helpers import cli
from conftest import REPO, write_native_log
from receipts.schema.lane import FIELDS, OPTION, RAW, Lane
from receipts.store.migrations.v0014_lane_key import BACKFILL

SPELLED = re.compile("|".join(FIELDS))
# The product files that may spell a field of the lane: the type itself, the records and tables that hold the
# fields as columns, their canonicalisation, the frozen schema revisions that created and filled the columns, the
# stored receipt read back, the launcher's own claim parameters, and an export that maps each field into another
# tool's format. Everything else asks schema/lane.py (FIELDS, RAW, OPTION, LABEL, Lane).
ALLOWED = {
    "schema/lane.py", "schema/identity.py", "schema/tables.py",
    "store/migrations/v0001_initial.py", "store/migrations/v0003_identity_lifecycle.py",
    "store/migrations/v0014_lane_key.py",
    "analysis/export.py",
}
# Dot folders (.venv, .pkgroot, a local .gpuwork copy) hold no product source of this checkout.
NOT_PRODUCT = ("tests/", "benchmarks/", "docs/", "examples/", "demo/", "scripts/", "build/", ".")


def _spelling_files() -> set[str]:
    found = set()
    for path in REPO.rglob("*"):
        rel = path.relative_to(REPO).as_posix()
        if path.suffix in (".py", ".sql", ".toml") and not rel.startswith(NOT_PRODUCT) and path.is_file() \
                and SPELLED.search(path.read_text(encoding="utf-8")):
            found.add(rel)
    return found


def test_the_lane_fields_are_spelled_in_a_few_files_only():
    """Adding a field to the identity is a change to schema/lane.py and the few files listed here, never a hunt
    through queries and views: a new file spelling a field fails here (ask schema/lane.py instead)."""
    found = _spelling_files()
    assert found - ALLOWED == set(), f"spell the lane's fields through schema/lane.py: {sorted(found - ALLOWED)}"
    assert ALLOWED - found == set(), f"no longer spelling a field, drop from ALLOWED: {sorted(ALLOWED - found)}"


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
