"""The identity lifecycle (issue 11): schema 3, retag with an append-only history, superseded receipts,
conflicting re-ingests, typo warnings and strict mode, attach checks. On DuckDB, and on PostgreSQL as the
writer role of docs/teams.md."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import duckdb
import pytest

from receipts.schema.tables import SCHEMA_VERSION
from receipts.store import migrations, open_store

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
from conftest import write_native_log  # noqa: E402  (tests/ is not a package under importlib mode)

TEAMS_DOC = HERE.parents[1] / "docs" / "teams.md"


def writer_grants() -> list[str]:
    """The GRANT statements docs/teams.md gives receipts_writer, as written there (so doc and test agree)."""
    text = TEAMS_DOC.read_text()
    statements = re.findall(r"^(GRANT [^;]*?TO receipts_writer[^;]*);", text, flags=re.M | re.S)
    return [" ".join(s.split()) for s in statements]


def _insert_v2_receipt(target, rid: str, *, fmt: str = "receipt", hostname: str | None = "node-1",
                       started_at: str | None = "2026-03-19T10:00:00.123+00:00") -> None:
    target.execute("INSERT INTO receipts (id, content_sha256, run_name, source_format, ingested_at, started_at, "
                   "hostname, identity_complete, warmup_steps, window_rule, tags_json, features_json, software_json, "
                   "topology_json, provenance_json, phases_json, warnings_json, model_version) VALUES "
                   "(?, ?, ?, ?, '2026-01-01T00:00:00+00:00', ?, ?, true, 0, 'all', '[]', '{}', '{}', '{}', '{}', "
                   "'[]', '[]', 1)", [rid, "sha-" + rid, "run_" + rid, fmt, started_at, hostname])


# ---- schema 3 --------------------------------------------------------------------------------------
def _upgrade_from_v2(url: str) -> None:
    with migrations.open_target(url, create=True) as target:
        assert migrations.init(target, version=2)
        _insert_v2_receipt(target, "native1")
        _insert_v2_receipt(target, "nano1", fmt="nanochat")
        _insert_v2_receipt(target, "native_nohost", hostname=None)
        assert migrations.upgrade(target) == [3]
        rows = dict(target.execute("SELECT id, run_key FROM receipts ORDER BY id"))
        assert rows == {"native1": "node-1@2026-03-19T10:00:00.123+00:00", "nano1": None, "native_nohost": None}
        assert target.execute("SELECT count(*) FROM receipts WHERE superseded_by IS NULL") == [(3,)]
        assert target.execute("SELECT count(*) FROM identity_history") == [(0,)]
        assert migrations.status(target).schema_version == 3


def test_schema_3_upgrade_from_v2_on_duckdb(tmp_path):
    url = str(tmp_path / "v2.duckdb")
    _upgrade_from_v2(url)
    with open_store(url) as store:
        assert store.resolve("run_native1") == "native1"
        assert store.sql("SELECT superseded_by FROM receipts WHERE id = 'nano1'").item() is None


def test_a_v2_duckdb_store_is_upgraded_to_3_on_open(tmp_path):
    url = str(tmp_path / "v2.duckdb")
    con = duckdb.connect(url)
    target = migrations.DuckDBTarget(con, url)
    migrations.init(target, version=2)
    _insert_v2_receipt(target, "native1")
    con.close()
    with open_store(url) as store:
        assert store.sql("SELECT value FROM schema_meta WHERE key = 'schema_version'").item() == str(SCHEMA_VERSION)
        assert store.sql("SELECT run_key FROM receipts").item() == "node-1@2026-03-19T10:00:00.123+00:00"


def test_writer_grants_in_the_teams_doc_cover_the_identity_columns():
    grants = writer_grants()
    update = next(g for g in grants if g.startswith("GRANT UPDATE"))
    for column in ("superseded_by", "run_name", "tags_json", "host_lineage", "raw_host_lineage", "preset_family",
                   "raw_preset", "launch_regime", "raw_regime", "identity_complete", "resolution_json"):
        assert column in update
    assert not any("identity_history" in g or "DELETE" in g for g in grants)


@pytest.mark.postgres
def test_schema_3_upgrade_from_v2_on_postgresql(pg_url):
    _upgrade_from_v2(pg_url)
    with open_store(pg_url) as store:
        assert store.resolve("run_native1") == "native1"


@pytest.mark.postgres
def test_writer_role_may_append_history_and_update_identity_but_not_rewrite_history(pg_url):
    import psycopg

    from test_postgres import _psql, writer_url_for

    writer_url = writer_url_for(pg_url, writer_grants())
    with migrations.open_target(pg_url) as target:
        _insert_v2_receipt(target, "r1")
    _psql(writer_url, "UPDATE receipts SET host_lineage = 'x', superseded_by = NULL WHERE id = 'r1'")
    _psql(writer_url, "INSERT INTO identity_history (receipt_id, seq, changed_at, changed_by, why) "
                      "VALUES ('r1', 1, '2026-01-01T00:00:00+00:00', current_user, 'test')")
    for statement in ("UPDATE identity_history SET why = 'rewritten'", "DELETE FROM identity_history",
                      "DELETE FROM receipts", "UPDATE receipts SET content_sha256 = 'x'"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            _psql(writer_url, statement)
    assert _psql(pg_url, "SELECT why, changed_by FROM identity_history") == [("test", "receipts_writer")]


from test_postgres import pg_server, pg_url  # noqa: E402,F401  (fixtures shared with the PostgreSQL suite)
