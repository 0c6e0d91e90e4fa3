"""The identity lifecycle: schema 3, retag with an append-only history, superseded receipts,
conflicting re-ingests, typo warnings and strict mode, attach checks. On DuckDB, and on PostgreSQL as the
writer role of docs/teams.md."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import duckdb
import pytest

from test_postgres import pg_empty_url, pg_server, pg_url  # noqa: F401  (fixtures shared with the PostgreSQL suite)
from receipts.schema.lane import Lane
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
        assert migrations.upgrade(target) == list(range(3, SCHEMA_VERSION + 1))
        rows = dict(target.execute("SELECT id, run_key FROM receipts ORDER BY id"))
        assert rows == {"native1": "node-1@2026-03-19T10:00:00.123+00:00", "nano1": None, "native_nohost": None}
        assert target.execute("SELECT count(*) FROM receipts WHERE superseded_by IS NULL") == [(3,)]
        assert target.execute("SELECT count(*) FROM identity_history") == [(0,)]
        assert migrations.status(target).schema_version == SCHEMA_VERSION
        # 0004: the GPU counts apart; older receipts read null for both new ones
        assert target.execute("SELECT count(*) FROM receipts WHERE ranks_traced IS NULL AND gpus_on_host IS NULL") == [(3,)]


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
def test_schema_3_upgrade_from_v2_on_postgresql(pg_empty_url):
    _upgrade_from_v2(pg_empty_url)
    with open_store(pg_empty_url) as store:
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




# ---- retag -----------------------------------------------------------------------------------------
from cli_helpers import cli, cli_json  # noqa: E402
from conftest import GPU_DATA  # noqa: E402

LANE_1GPU = ("--host-lineage", "h200-device-x1", "--preset", "toy_fsdp2_v1", "--regime", "fsdp2/no-compile")


def test_a_rumor_retagged_to_complete_then_compares(db):
    """The real 1-GPU toy profiled under nsys, ingested on its own (the export carries no identity), is a
    rumor; retagged into the lane of the real unprofiled run of the same script, it compares."""
    assert cli(db, "ingest", str(GPU_DATA / "fsdp2_1gpu_nsys.sqlite.gz")).exit_code == 0
    assert cli(db, "ingest", str(GPU_DATA / "fsdp2_1gpu_rev" / "run.log")).exit_code == 0
    assert cli(db, "compare", "fsdp2_1gpu_rev", "fsdp2_1gpu_nsys").exit_code == 3
    done = cli(db, "retag", "fsdp2_1gpu_nsys", *LANE_1GPU, "--why", "profiled toy run; the export has no identity")
    assert done.exit_code == 0, done.output
    assert "identity_complete: False -> True" in done.stdout
    code, out = cli_json(db, "compare", "fsdp2_1gpu_rev", "fsdp2_1gpu_nsys")
    assert code == 0 and out["comparable"] is True and out["ratio"]["value"] > 1
    code, shown = cli_json(db, "show", "fsdp2_1gpu_nsys")
    (entry,) = shown["identity_history"]
    assert entry["seq"] == 1 and entry["why"] == "profiled toy run; the export has no identity" and entry["changed_by"]
    assert entry["old"]["identity_complete"] is False and entry["old"]["preset_family"] is None
    assert entry["new"]["launch_regime"] == "fsdp2/no-compile"
    assert entry["new"]["identity_complete"] is True
    # the hostname note of the old, unmatched lineage is gone; the notes of the new values are there
    assert not any(n.startswith("hostname") for n in shown["identity"]["resolution"])
    assert "retag #1" in cli(db, "show", "fsdp2_1gpu_nsys").stdout


def test_retag_of_the_preset_swaps_its_feature_bundle_and_keeps_the_logs_own(tmp_path, db):
    log = write_native_log(tmp_path / "run_a.log", [100.0 + i for i in range(10)], features={"seq_len": 4096})
    cli(db, "ingest", str(log))
    assert cli_json(db, "show", "run_a")[1]["features"]["mhc"] is True
    assert cli(db, "retag", "run_a", "--preset", "nam52_h200_dense_no_mhc_recovery_v1", "--tag", "v19c",
               "--why", "launched with the mHC-off recovery preset").exit_code == 0
    shown = cli_json(db, "show", "run_a")[1]
    assert shown["identity"]["preset_family"] == "nam52_h200_dense_no_mhc_recovery_v1"
    assert shown["features"]["mhc"] is False and shown["features"]["seq_len"] == 4096
    assert "mhc_n_streams" not in shown["features"]                # only the old preset implied it
    assert shown["tags"] == ["v19c"]
    assert cli(db, "retag", "run_a", "--untag", "v19c", "--run-name", "run_a2", "--why", "tag was wrong").exit_code == 0
    shown = cli_json(db, "show", "run_a2")[1]
    assert [h["seq"] for h in shown["identity_history"]] == [1, 2]
    assert shown["identity_history"][1]["old"]["tags"] == ["v19c"] and shown["identity_history"][1]["new"]["tags"] == []
    assert shown["identity_history"][1]["new"]["run_name"] == "run_a2"


def test_retag_refuses_without_why_or_change(tmp_path, db):
    cli(db, "ingest", str(write_native_log(tmp_path / "run_a.log", [100.0] * 5)))
    assert cli(db, "retag", "run_a", "--preset", "x").exit_code == 2                       # --why is required
    out = cli(db, "retag", "run_a", "--preset", "x", "--why", "  ")
    assert out.exit_code == 2 and "--why" in out.output
    out = cli(db, "retag", "run_a", "--why", "nothing")
    assert out.exit_code == 2 and "something to change" in out.output
    out = cli(db, "retag", "run_a", "--preset", "nam52_h200_dense_ref_v1", "--why", "same")
    assert out.exit_code == 2 and "already has that identity" in out.output
    with open_store(db) as store:
        assert store.sql("SELECT count(*) FROM identity_history").item() == 0


def test_a_retag_computed_from_stale_values_writes_nothing(tmp_path, db):
    from receipts.errors import StoreError
    from receipts.store.base import RETAG_COLUMNS

    cli(db, "ingest", str(write_native_log(tmp_path / "run_a.log", [100.0] * 5)))
    with open_store(db) as store:
        rid = store.resolve("run_a")
        stored = store.query("receipt", {"receipt_id": rid}).row(0, named=True)
        stale = {k: stored[k] for k in RETAG_COLUMNS} | {"run_name": "someone_else_renamed_it"}
        with pytest.raises(StoreError, match="changed by someone else"):
            store.retag(rid, expected=stale, changes={"run_name": "mine"}, why="race")
        assert store.sql("SELECT count(*) FROM identity_history").item() == 0
        assert store.sql("SELECT run_name FROM receipts").item() == "run_a"


@pytest.mark.postgres
def test_retag_on_postgresql_as_the_writer_role_keeps_history_it_cannot_rewrite(pg_url):
    import psycopg

    from test_postgres import _psql, writer_url_for

    writer_url = writer_url_for(pg_url, writer_grants())
    assert cli(writer_url, "ingest", str(GPU_DATA / "fsdp2_1gpu_nsys.sqlite.gz")).exit_code == 0
    assert cli(writer_url, "ingest", str(GPU_DATA / "fsdp2_1gpu_rev" / "run.log")).exit_code == 0
    done = cli(writer_url, "retag", "fsdp2_1gpu_nsys", *LANE_1GPU, "--why", "the export has no identity")
    assert done.exit_code == 0, done.output
    assert cli(writer_url, "compare", "fsdp2_1gpu_rev", "fsdp2_1gpu_nsys").exit_code == 0
    (entry,) = cli_json(writer_url, "show", "fsdp2_1gpu_nsys")[1]["identity_history"]
    assert entry["changed_by"] == "receipts_writer" and entry["new"]["identity_complete"] is True
    for statement in ("UPDATE identity_history SET why = 'nothing happened'", "DELETE FROM identity_history"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            _psql(writer_url, statement)
    assert _psql(pg_url, "SELECT count(*) FROM identity_history") == [(1,)]


# ---- re-ingest with other identity flags -------------------------------------------------------------
REV_LOG = GPU_DATA / "fsdp2_1gpu_rev" / "run.log"


def test_reingest_with_other_flags_reports_the_conflict_and_the_retag_command(db):
    assert cli(db, "ingest", str(REV_LOG)).exit_code == 0
    out = cli(db, "ingest", str(REV_LOG), "--preset", "nam52_h200_dense_ref_v1", "--tag", "v19c")
    assert out.exit_code == 0 and "unchanged" in out.stdout
    assert "identity conflict" in out.stderr and "preset_family 'toy_fsdp2_v1'" in out.stderr
    assert "receipts retag 3a107a8980d87dd4 --preset nam52_h200_dense_ref_v1 --tag v19c --why" in out.stderr
    code, (outcome,) = cli_json(db, "ingest", str(REV_LOG), "--preset", "nam52_h200_dense_ref_v1")
    assert code == 0 and outcome["created"] is False
    assert outcome["identity_conflict"]["stored"] == {"preset_family": "toy_fsdp2_v1"}
    assert outcome["identity_conflict"]["asked"] == {"preset_family": "nam52_h200_dense_ref_v1"}
    # the suggested command does what it says
    command = shlex.split(outcome["identity_conflict"]["retag"])[2:-2]
    assert cli(db, "retag", *command, "--why", "launched with the NAM52 preset").exit_code == 0
    code, (again,) = cli_json(db, "ingest", str(REV_LOG), "--preset", "nam52_h200_dense_ref_v1")
    assert again["identity_conflict"] is None
    # the same flags as stored are no conflict; no flags are no conflict
    assert cli_json(db, "ingest", str(REV_LOG))[1][0]["identity_conflict"] is None


def test_the_incomplete_warning_describes_the_stored_receipt(tmp_path, db):
    log = write_native_log(tmp_path / "run_a.log", [100.0] * 5, regime=None)
    assert "identity incomplete" in cli(db, "ingest", str(log)).stderr
    cli(db, "retag", "run_a", "--regime", "fsdp2/regional-compile", "--why", "known from the launcher")
    again = cli(db, "ingest", str(log))                 # this parse alone is still a rumor; the stored one is not
    assert "unchanged" in again.stdout and "identity incomplete" not in again.stderr
    assert cli_json(db, "ingest", str(log))[1][0]["complete"] is True


# ---- growing logs: one current receipt per run -------------------------------------------------------
def _grow(path: Path, source: Path, n_bytes: int | None) -> Path:
    data = source.read_bytes()
    path.write_bytes(data if n_bytes is None else data[:n_bytes])
    return path


def test_a_growing_log_supersedes_its_prefix(tmp_path, db):
    """The real 1-GPU run ingested while in progress (its first 6000 bytes), then again when finished."""
    (tmp_path / "live").mkdir()
    log = _grow(tmp_path / "live" / "run.log", REV_LOG, 6000)
    first = cli_json(db, "ingest", str(log), "--host-lineage", "h200-device-x1")[1][0]
    assert first["created"] and first["ended_early"]
    _grow(log, REV_LOG, None)
    code, (second,) = cli_json(db, "ingest", str(log))
    assert code == 0 and second["created"] and second["supersedes"] == [first["receipt_id"]]
    listed = cli_json(db, "list")[1]
    assert [r["id"] for r in listed] == [second["receipt_id"]]
    everything = {r["id"]: r["superseded_by"] for r in cli_json(db, "list", "--all")[1]}
    assert everything == {first["receipt_id"]: second["receipt_id"], second["receipt_id"]: None}
    assert "superseded" in cli(db, "list", "--all", "--format", "table").stdout
    assert "superseded" not in cli(db, "list", "--format", "table").stdout.split("\n", 1)[1]
    assert cli_json(db, "show", "live")[1]["id"] == second["receipt_id"]          # a run name means the current one
    assert cli_json(db, "show", first["receipt_id"])[1]["superseded_by"] == second["receipt_id"]
    # the gate refuses the superseded receipt as evidence and names its successor
    claims = tmp_path / "claims.yaml"
    claims.write_text(f"version: 1\nclaims:\n  - name: grown\n    baseline: {first['receipt_id']}\n"
                      f"    candidate: live\n    metric: step_time\n    speedup: 1.0\n    tolerance: 0.5\n")
    gate = cli(db, "gate", str(claims))
    assert gate.exit_code != 0 and f"superseded by {second['receipt_id']}" in gate.output
    # ingesting the prefix again changes nothing: it is already stored (and superseded)
    _grow(tmp_path / "old.log", REV_LOG, 6000)
    assert cli_json(db, "ingest", str(tmp_path / "old.log"))[1][0]["created"] is False


def test_a_receipt_header_with_the_same_run_key_supersedes(tmp_path, db):
    """Not a byte prefix (the earlier copy was cut mid-line and the later one rewritten), same header."""
    lines = REV_LOG.read_text().splitlines(keepends=True)
    early = tmp_path / "early.log"
    early.write_text("".join(lines[:12]).replace("\n", "\r\n"))              # another byte stream, same run
    a = cli_json(db, "ingest", str(early), "--run-name", "rev")[1][0]
    b = cli_json(db, "ingest", str(REV_LOG), "--run-name", "rev")[1][0]
    assert b["supersedes"] == [a["receipt_id"]]
    # and the shorter view ingested after the longer one is stored already superseded
    c = cli_json(db, "ingest", str(_grow(tmp_path / "c.log", REV_LOG, 7000)))[1][0]
    assert c["created"] and c["superseded_by"] == b["receipt_id"] and c["supersedes"] == []
    assert [r["id"] for r in cli_json(db, "list")[1]] == [b["receipt_id"]]


def test_a_retagged_partial_log_keeps_its_identity_when_it_grows(tmp_path, db):
    log = write_native_log(tmp_path / "run.log", [100.0 + i for i in range(40)], preset=None)
    full = log.read_bytes()
    log.write_bytes(full[:full.index(b'"step": 20,')].rsplit(b"\n", 1)[0] + b"\n")
    cli(db, "ingest", str(log))
    cli(db, "retag", log.parent.name, "--preset", "nam52_h200_dense_ref_v1", "--why", "known")
    log.write_bytes(full)
    code, (grown,) = cli_json(db, "ingest", str(log))
    assert grown["supersedes"] and grown["complete"] is True
    shown = cli_json(db, "show", grown["receipt_id"])[1]
    assert shown["identity"]["preset_family"] == "nam52_h200_dense_ref_v1"
    assert any("carried over" in n for n in shown["identity"]["resolution"])


def test_lanes_and_lane_history_leave_superseded_receipts_out(tmp_path, db):
    log = tmp_path / "live" / "run.log"
    log.parent.mkdir()
    _grow(log, REV_LOG, 6000)
    cli(db, "ingest", str(log))
    _grow(log, REV_LOG, None)
    cli(db, "ingest", str(log))
    with open_store(db) as store:
        lanes = store.query("dash_lanes", {"lane_filter": None, "tag": None,
                                           "since": None, "until": None, "search": None, "unsummarised": []})
        history = store.query("lane_history", {"lane_key": Lane("h200-device-x1", "toy_fsdp2_v1", "fsdp2/no-compile").key,
                                               "unsummarised": []})
        assert lanes.height == 1 and history.height == 1 and lanes["n_steady_steps"][0] == 17


# ---- run names ----------------------------------------------------------------------------------------
def test_one_run_name_for_several_files_or_a_taken_one_needs_a_tag(tmp_path, db):
    a = write_native_log(tmp_path / "a.log", [100.0] * 5)
    b = write_native_log(tmp_path / "b.log", [101.0] * 5)
    out = cli(db, "ingest", str(a), str(b), "--run-name", "same")
    assert out.exit_code == 2 and "--run-name 'same' with several files" in out.output
    assert cli(db, "ingest", str(a), "--run-name", "same").exit_code == 0
    out = cli(db, "ingest", str(b), "--run-name", "same")
    assert out.exit_code == 2 and "already used by current receipt" in out.output
    assert cli(db, "ingest", str(a), "--run-name", "same").exit_code == 0            # its own name: unchanged
    assert cli(db, "ingest", str(b), "--run-name", "same", "--tag", "rerun").exit_code == 0
    assert len(cli_json(db, "list")[1]) == 2


# ---- typos and strict mode ---------------------------------------------------------------------------
def test_a_typo_inside_a_compile_mode_names_the_typo_once_with_the_whole_regime_corrected(tmp_path, db):
    # 'no-compil' splits into 'no' (a word of 'no-compile', stranded) and 'compil' (the typo): one warning, about
    # the typo, never "did you mean 'no'?".
    log = write_native_log(tmp_path / "run_a.log", [100.0] * 5, regime=None)
    out = cli(db, "ingest", str(log), "--regime", "fsdp2/no-compil")
    assert out.exit_code == 0
    said = [line for line in out.stderr.splitlines() if "unrecognised word" in line]
    assert said == ["warning: regime 'fsdp2/no-compil' has the unrecognised word 'compil'; "
                    f"did you mean 'fsdp2/no-compile'? ({log})"], out.stderr


def test_registry_notes_are_said_once_with_the_one_that_matters_first(db):
    """Real logs into a store without a registry of its own: the regime that names no engine (every comparison
    with these runs will be refused) comes first; the host and preset kept as given are one note, once."""
    logs = [str(HERE.parents[1] / "tests" / "data" / "noise" / name / "run.log") for name in ("aa_01", "aa_02")]
    out = cli(db, "ingest", *logs, "--regime", "pipeline/no-compile")
    assert out.exit_code == 0, out.stderr
    said = [line for line in out.stderr.splitlines() if not line.startswith("  ")]
    assert said[0].startswith("warning: regime 'pipeline/no-compile' names no engine"), said
    assert said[1:] == ["note: host lineage 'h100-device-x1' and preset 'toy_fsdp2_v1' are not in the registry, kept "
                        f"as given (no entry is close; receipts.toml names a team's) (2 files: {', '.join(logs)})"]


def test_typos_get_a_did_you_mean_and_strict_refuses_them(tmp_path, db):
    log = write_native_log(tmp_path / "run_a.log", [100.0] * 5, host_lineage=None, regime=None)
    out = cli(db, "ingest", str(log), "--strict", "--host-lineage", "h200-usw1c-bench-1",
              "--regime", "fsdp2/regional-compil")
    assert out.exit_code == 2 and "did you mean 'h200-usw1c-bench-01'?" in out.output
    assert "did you mean 'fsdp2/regional-compile'?" in out.output
    assert not Path(db).exists() or cli_json(db, "list")[1] == []
    out = cli(db, "ingest", str(log), "--host-lineage", "h200-usw1c-bench-1", "--regime", "fsdp2/regional-compil")
    assert out.exit_code == 0 and "did you mean 'h200-usw1c-bench-01'?" in out.stderr
    # said once at ingest; show and compare do not repeat it
    assert "not in the registry" not in cli(db, "show", "run_a").stdout
    assert not any("registry" in n for n in cli_json(db, "show", "run_a")[1]["identity"]["resolution"])
    out = cli(db, "retag", "run_a", "--host-lineage", "h200-usw1c-bench-O1", "--why", "typo", "--strict")
    assert out.exit_code == 2 and "did you mean 'h200-usw1c-bench-01'" in out.output
    assert cli(db, "retag", "run_a", "--host-lineage", "h200-usw1c-bench-01", "--regime", "fsdp2/regional-compile",
               "--why", "fix the typos").exit_code == 0
    assert cli_json(db, "show", "run_a")[1]["identity"]["complete"] is True


def test_strict_true_in_the_registry_file_refuses_unknown_values(tmp_path, db):
    registry = tmp_path / "reg.toml"
    registry.write_text("version = 1\nstrict = true\n")
    log = write_native_log(tmp_path / "run_a.log", [100.0] * 5, preset="nam52_h200_dense_ref_v2")
    out = CliRunner().invoke(app, ["--db", db, "--registry", str(registry), "ingest", str(log)])
    assert out.exit_code == 2 and "did you mean 'nam52_h200_dense_ref_v1'?" in out.output
    registry.write_text("version = 1\nstrict = 'yes'\n")
    out = CliRunner().invoke(app, ["--db", db, "--registry", str(registry), "ingest", str(log)])
    assert out.exit_code == 2 and "`strict` must be true or false" in out.output


from typer.testing import CliRunner  # noqa: E402

from receipts.cli.main import app  # noqa: E402


# ---- regime canonicalisation invents nothing ---------------------------------------------------------
def test_a_real_megatron_deepspeed_log_is_its_own_engine_with_compile_unknown(db):
    from conftest import realdata

    log = realdata("logs", "megatron-deepspeed__gpt3-0.125B-tokendropping-graduallyIncrease-lr-3.0e-4-baseline.log")
    assert cli(db, "ingest", str(log), "--run-name", "mds").exit_code == 0
    regime = cli_json(db, "show", "mds")[1]["identity"]["regime"]
    assert regime["engine"] == "megatron-deepspeed" and regime["compile_mode"] == "unknown"
    assert cli_json(db, "show", "mds")[1]["identity"]["launch_regime"] == "megatron-deepspeed/unknown-compile/dp8"


def test_a_regime_the_user_gave_that_cannot_be_used_says_why(db):
    from conftest import realdata

    log = realdata("logs", "sft_run_gtx1660.log")
    out = cli(db, "ingest", str(log), "--host-lineage", "h200-usw1c-bench-01", "--preset", "nam52_h200_dense_ref_v1",
              "--regime", "tp2 pp2")
    assert out.exit_code == 0
    assert "regime 'tp2 pp2' names no engine (ddp, deepspeed, fsdp, fsdp2, megatron, megatron-deepspeed, single)" in out.stderr
    assert "without launch_regime" in out.stderr and "give --regime" not in out.stderr
    # a single-GPU run (a GTX 1660, one device) is complete with the engine `single`
    done = cli(db, "retag", "sft_run_gtx1660", "--regime", "single", "--why", "one GPU, no parallel wrapper")
    assert done.exit_code == 0 and cli_json(db, "show", "sft_run_gtx1660")[1]["identity"]["complete"] is True


# ---- attachments must be of the receipt's machine ----------------------------------------------------
def test_an_export_or_facts_of_another_machine_are_refused_unless_forced(db):
    from conftest import realdata

    assert cli(db, "ingest", str(REV_LOG)).exit_code == 0          # 1 x H200, world size 1
    with open_store(db) as store:
        before = store.sql("SELECT count(*) FROM receipt_sources").item(), store.sql("SELECT count(*) FROM anatomy_rows").item()
    out = cli(db, "ingest", str(GPU_DATA / "fsdp2_1gpu_nsys.sqlite.gz"), "--attach", "fsdp2_1gpu_rev")
    assert out.exit_code == 2 and "GPU count 2 in the file vs 1 on the receipt" in out.stderr   # the 2-GPU machine
    out = cli(db, "ingest", str(GPU_DATA / "fsdp2_2gpu_kineto" / "traces"), "--attach", "fsdp2_1gpu_rev")
    assert out.exit_code == 2 and "2 ranks traced vs world size 1" in out.stderr
    out = cli(db, "ingest", str(realdata("sysinfo", "vllm_issue11959_collect_env_8xH100_excerpt.txt")),
              "--attach", "fsdp2_1gpu_rev")
    assert out.exit_code == 2 and "'NVIDIA H100 80GB HBM3' in the file vs 'NVIDIA H200' on the receipt" in out.stderr
    out = cli(db, "ingest", str(GPU_DATA / "sysinfo" / "nvidia-smi_topo_m.txt"), "--attach", "fsdp2_1gpu_rev")
    assert out.exit_code == 2 and "GPU count 2 in the file vs 1" in out.stderr
    with open_store(db) as store:
        after = store.sql("SELECT count(*) FROM receipt_sources").item(), store.sql("SELECT count(*) FROM anatomy_rows").item()
    assert after == before
    forced = cli(db, "ingest", str(GPU_DATA / "fsdp2_1gpu_nsys.sqlite.gz"), "--attach", "fsdp2_1gpu_rev", "--force")
    assert forced.exit_code == 0 and "attached with --force despite: GPU count 2" in forced.stderr
    sources = cli_json(db, "show", "fsdp2_1gpu_rev")[1]["sources"]
    assert [s["forced"] for s in sources] == [None, "GPU count 2 in the file vs 1 on the receipt"]
    assert "attached with --force" in cli(db, "show", "fsdp2_1gpu_rev").stdout


def test_the_export_of_the_same_run_attaches_without_force(db):
    assert cli(db, "ingest", str(GPU_DATA / "fsdp2_1gpu_nsys" / "run.log")).exit_code == 0
    out = cli(db, "ingest", str(GPU_DATA / "fsdp2_1gpu_nsys.sqlite.gz"), "--attach", "fsdp2_1gpu_nsys")
    assert out.exit_code == 0 and "anatomy attached" in out.stdout
    assert all(s["forced"] is None for s in cli_json(db, "show", "fsdp2_1gpu_nsys")[1]["sources"])


def test_a_header_run_id_names_the_run(tmp_path, db):
    """Two logs of one run_id supersede even when neither is a byte prefix of the other (and no started_at)."""
    first = write_native_log(tmp_path / "a.log", [100.0] * 5)
    second = write_native_log(tmp_path / "b.log", [100.0] * 9)
    for path in (first, second):
        path.write_text(path.read_text().replace('"kind": "header",', '"kind": "header", "run_id": "job-4711",'))
    a = cli_json(db, "ingest", str(first))[1][0]
    b = cli_json(db, "ingest", str(second))[1][0]
    assert b["supersedes"] == [a["receipt_id"]]
    other = write_native_log(tmp_path / "c.log", [100.0] * 12)                          # no run_id: its own run
    assert cli_json(db, "ingest", str(other))[1][0]["supersedes"] == []


@pytest.mark.postgres
def test_a_growing_log_supersedes_its_prefix_on_postgresql_as_the_writer(pg_url, tmp_path):
    from test_postgres import writer_url_for

    writer_url = writer_url_for(pg_url, writer_grants())
    (tmp_path / "live").mkdir()
    log = _grow(tmp_path / "live" / "run.log", REV_LOG, 6000)
    first = cli_json(writer_url, "ingest", str(log))[1][0]
    _grow(log, REV_LOG, None)
    second = cli_json(writer_url, "ingest", str(log))[1][0]
    assert second["supersedes"] == [first["receipt_id"]]
    assert [r["id"] for r in cli_json(writer_url, "list")[1]] == [second["receipt_id"]]
    assert {r["id"]: r["superseded_by"] for r in cli_json(writer_url, "list", "--all")[1]} == {
        first["receipt_id"]: second["receipt_id"], second["receipt_id"]: None}


def test_push_carries_identity_history_and_superseding(tmp_path, db):
    from receipts.store.sync import push

    (tmp_path / "live").mkdir()
    log = _grow(tmp_path / "live" / "run.log", REV_LOG, 6000)
    first = cli_json(db, "ingest", str(log))[1][0]
    target_url = str(tmp_path / "team.duckdb")
    with open_store(db) as local, open_store(target_url) as target:
        assert push(local, target).receipts_copied == 1                 # pushed while still current
    _grow(log, REV_LOG, None)
    second = cli_json(db, "ingest", str(log))[1][0]
    assert cli(db, "retag", "live", "--tag", "v19c", "--why", "the March wave").exit_code == 0
    with open_store(db) as local, open_store(target_url) as target:
        assert push(local, target).receipts_copied == 1
    assert [r["id"] for r in cli_json(target_url, "list")[1]] == [second["receipt_id"]]
    assert cli_json(target_url, "show", first["receipt_id"])[1]["superseded_by"] == second["receipt_id"]
    (entry,) = cli_json(target_url, "show", "live")[1]["identity_history"]
    assert entry["why"] == "the March wave" and entry["new"]["tags"] == ["v19c"]


def test_retag_to_a_run_name_in_use_is_allowed_and_says_so(tmp_path, db):
    cli(db, "ingest", str(write_native_log(tmp_path / "a.log", [100.0] * 5)))
    cli(db, "ingest", str(write_native_log(tmp_path / "b.log", [101.0] * 5)))
    out = cli(db, "retag", "b", "--run-name", "a", "--why", "the same experiment, rerun")
    assert out.exit_code == 0 and "also used by current receipt" in out.stderr
    assert cli(db, "show", "a").exit_code == 2                           # ambiguous now, by name


def test_retags_made_after_a_push_travel_on_the_next_one_unless_the_target_was_retagged_too(tmp_path, db):
    from receipts.store.sync import push

    cli(db, "ingest", str(GPU_DATA / "fsdp2_1gpu_nsys.sqlite.gz"))        # a rumor
    target_url = str(tmp_path / "team.duckdb")
    with open_store(db) as local, open_store(target_url) as target:
        push(local, target)
    cli(db, "retag", "fsdp2_1gpu_nsys", *LANE_1GPU, "--why", "the export has no identity")
    cli(db, "retag", "fsdp2_1gpu_nsys", "--tag", "v19c", "--why", "March wave")
    with open_store(db) as local, open_store(target_url) as target:
        result = push(local, target)
        assert (result.receipts_copied, result.retags_copied, result.retags_diverged) == (0, 2, [])
        assert push(local, target).retags_copied == 0                     # idempotent
    there = cli_json(target_url, "show", "fsdp2_1gpu_nsys")[1]
    here = cli_json(db, "show", "fsdp2_1gpu_nsys")[1]
    assert there["identity"] == here["identity"] and there["tags"] == ["v19c"]
    assert there["identity_history"] == here["identity_history"]          # who/when/why as recorded here
    # retagged on both sides since: nothing is overwritten, the push says so
    cli(db, "retag", "fsdp2_1gpu_nsys", "--tag", "local", "--why", "here")
    cli(target_url, "retag", "fsdp2_1gpu_nsys", "--tag", "team", "--why", "there")
    out = cli(db, "push", "--to", target_url)
    assert out.exit_code == 0 and "retagged both here and there" in out.stderr
    assert cli_json(target_url, "show", "fsdp2_1gpu_nsys")[1]["tags"] == ["team", "v19c"]


@pytest.mark.postgres
def test_retags_made_on_a_node_reach_the_team_store_as_the_writer(pg_url, tmp_path, db):
    from test_postgres import writer_url_for

    writer_url = writer_url_for(pg_url, writer_grants())
    cli(db, "ingest", str(GPU_DATA / "fsdp2_1gpu_nsys.sqlite.gz"))
    assert cli(db, "push", "--to", writer_url).exit_code == 0
    cli(db, "retag", "fsdp2_1gpu_nsys", *LANE_1GPU, "--why", "the export has no identity")
    code, out = cli_json(db, "push", "--to", writer_url)
    assert code == 0 and out["retags_copied"] == 1 and out["retags_diverged"] == []
    there = cli_json(writer_url, "show", "fsdp2_1gpu_nsys")[1]
    assert there["identity"]["complete"] is True
    assert there["identity_history"] == cli_json(db, "show", "fsdp2_1gpu_nsys")[1]["identity_history"]
