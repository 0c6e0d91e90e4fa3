"""The receipt contract end to end on the embedded store: ingest, list, show, compare, refusal."""

from __future__ import annotations


import duckdb
import numpy as np

from cli_helpers import cli, cli_json
from conftest import write_native_log
from receipts.schema.tables import SCHEMA_VERSION


def _steps(n: int, mean: float, seed: int, warm: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return [5000.0] * warm + list(rng.normal(mean, mean * 0.01, n))


def test_ingest_is_idempotent_and_says_so(tmp_path, db):
    log = write_native_log(tmp_path / "run_a.log", _steps(30, 200, 1))
    first = cli(db, "ingest", str(log))
    second = cli(db, "ingest", str(log))
    assert first.exit_code == second.exit_code == 0
    assert "unchanged" in second.stdout and "already in the store" in second.stdout
    code, listed = cli_json(db, "list")
    assert code == 0 and len(listed) == 1
    assert listed[0]["run_name"] == "run_a" and listed[0]["identity"]["complete"] is True


def test_show_json_contract(tmp_path, db):
    log = write_native_log(tmp_path / "run_b.log", _steps(40, 150, 2, warm=3), warmup_steps=3)
    cli(db, "ingest", str(log))
    code, shown = cli_json(db, "show", "run_b")
    assert code == 0
    assert shown["identity"] == shown["identity"] | {"host_lineage": "h200-usw1c-bench-01",
                                                      "preset_family": "nam52_h200_dense_ref_v1",
                                                      "launch_regime": "fsdp2/regional-compile", "complete": True}
    steady = shown["steady_state"]
    assert steady["n_steps"] == 40 and steady["warmup_steps"] == 3
    assert steady["first_step"] == 4 and steady["last_step"] == 43
    assert steady["window_rule"] == "marker:compile"
    assert 140 < steady["median_step_ms"] < 160  # the 5000 ms compile steps are excluded
    assert shown["memory"]["peak_allocated_bytes"] == 40 << 30
    assert shown["memory"]["peak_reserved_bytes"] == 48 << 30
    # id prefix addresses the same receipt
    code, again = cli_json(db, "show", shown["id"][:6])
    assert again["id"] == shown["id"]


def test_aliases_of_one_preset_are_comparable(tmp_path, db):
    a = write_native_log(tmp_path / "run_a.log", _steps(50, 200, 3), preset="nam52_h200_moe_no_dsa_ref_v1",
                         regime="fsdp2/regional-compile")
    b = write_native_log(tmp_path / "run_b.log", _steps(50, 180, 4), preset="nam52_h200_dense_ref_v1",
                         regime="FSDP2, regional compile")
    cli(db, "ingest", str(a))
    cli(db, "ingest", str(b))
    code, out = cli_json(db, "compare", "run_a", "run_b")
    assert code == 0 and out["comparable"] is True
    ratio = out["ratio"]
    assert ratio["metric"] == "step_time" and ratio["ci_low"] <= ratio["value"] <= ratio["ci_high"]
    assert 0.85 < ratio["value"] < 0.95 and ratio["ci_high"] < 1.0
    assert out["verdict"] == "faster"
    assert any("alias" in note for note in out["resolution"])


def test_different_host_lineage_is_refused(tmp_path, db):
    a = write_native_log(tmp_path / "run_a.log", _steps(30, 200, 5))
    c = write_native_log(tmp_path / "run_c.log", _steps(30, 200, 6), host_lineage="h200-euw4a-canonical")
    cli(db, "ingest", str(a))
    cli(db, "ingest", str(c))
    code, out = cli_json(db, "compare", "run_a", "run_c")
    assert code == 3 and out["comparable"] is False
    assert [d["field"] for d in out["differences"]] == ["host_lineage"]
    assert out["differences"][0]["a"] == "h200-usw1c-bench-01"
    text = cli(db, "compare", "run_a", "run_c")
    assert text.exit_code == 3 and "REFUSED" in text.stdout and "host_lineage" in text.stdout


def test_preset_sharing_a_word_is_refused(tmp_path, db):
    a = write_native_log(tmp_path / "run_a.log", _steps(30, 200, 7))
    d = write_native_log(tmp_path / "run_d.log", _steps(30, 200, 8), preset="nam52_h200_dense_no_mhc_recovery_v1")
    cli(db, "ingest", str(a))
    cli(db, "ingest", str(d))
    code, out = cli_json(db, "compare", "run_a", "run_d")
    assert code == 3 and [d["field"] for d in out["differences"]] == ["preset_family"]


def test_missing_regime_is_refused_as_a_rumor(tmp_path, db):
    a = write_native_log(tmp_path / "run_a.log", _steps(30, 200, 9))
    e = write_native_log(tmp_path / "run_e.log", _steps(30, 200, 10), regime=None)
    cli(db, "ingest", str(a))
    ingested = cli(db, "ingest", str(e))
    assert "rumor" in ingested.stderr
    code, out = cli_json(db, "compare", "run_a", "run_e")
    assert code == 3 and "rumor" in out["reason"]
    assert {"field": "launch_regime", "a": "fsdp2/regional-compile", "b": None, "note": "missing"} in out["differences"]


def test_flags_complete_an_identity_the_log_lacks(tmp_path, db):
    e = write_native_log(tmp_path / "run_e.log", _steps(30, 200, 11), regime=None)
    cli(db, "ingest", str(e), "--regime", "fsdp2/regional-compile")
    code, shown = cli_json(db, "show", "run_e")
    assert shown["identity"]["complete"] is True


def test_sidecar_receipt_toml_supplies_identity(tmp_path, db):
    e = write_native_log(tmp_path / "run_f.log", _steps(30, 200, 12), host_lineage=None, preset=None, regime=None)
    (tmp_path / "receipt.toml").write_text('host_lineage = "usw1c-bench-01"\npreset = "nam52_h200_dense_ref_v1"\n'
                                           'regime = "ddp"\ntags = ["v19c"]\n')
    cli(db, "ingest", str(e))
    code, shown = cli_json(db, "show", "run_f")
    assert shown["identity"]["host_lineage"] == "h200-usw1c-bench-01" and shown["identity"]["complete"]
    assert shown["tags"] == ["v19c"]


def test_drift_is_sorted(tmp_path, db):
    a = write_native_log(tmp_path / "run_a.log", _steps(30, 200, 13), software={"torch": "2.12.0+cu132", "driver": "590.48"},
                         env={"NCCL_ALGO": "Ring"}, features={"seq_len": 4096})
    b = write_native_log(tmp_path / "run_b.log", _steps(30, 200, 14), software={"torch": "2.12.0+cu130", "driver": "590.60"},
                         env={"NCCL_ALGO": None}, features={"seq_len": 8192})
    cli(db, "ingest", str(a))
    cli(db, "ingest", str(b))
    code, out = cli_json(db, "compare", "run_a", "run_b")
    fields = {k: [d["field"] for d in v] for k, v in out["drift"].items()}
    assert fields["recipe"] == ["features.seq_len"]
    assert fields["runtime"] == ["software.torch", "env.NCCL_ALGO"]
    assert fields["infrastructure"] == ["software.driver"]


def test_unknown_reference_is_an_input_error(tmp_path, db):
    a = write_native_log(tmp_path / "run_a.log", _steps(30, 200, 15))
    cli(db, "ingest", str(a))
    result = cli(db, "show", "nope")
    assert result.exit_code == 2 and "no receipt matches 'nope' (use an id" in result.stderr  # nothing close
    typo = cli(db, "compare", "run_a", "rn_a")
    assert typo.exit_code == 2 and "no receipt matches 'rn_a'; did you mean 'run_a'?" in typo.stderr


def test_a_mistyped_command_is_answered_with_the_ones_spelled_like_it(db):
    result = cli(db, "histroy", "x")
    assert result.exit_code == 2 and "No such command 'histroy'; did you mean 'history'?" in result.stderr
    assert "did you mean" not in cli(db, "frobnicate").stderr


def _store_bytes(db: str) -> list:
    con = duckdb.connect(db, read_only=True)
    try:
        return [con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall()
                for t in ("receipts", "receipt_steps", "receipt_env", "receipt_memory", "receipt_sources")]
    finally:
        con.close()


def test_bad_inputs_give_one_message_and_leave_the_store_unchanged(tmp_path, db):
    good = write_native_log(tmp_path / "good.log", _steps(30, 200, 16))
    cli(db, "ingest", str(good))
    before = _store_bytes(db)
    empty = tmp_path / "empty.log"
    empty.write_text("")
    binary = tmp_path / "blob.log"
    binary.write_bytes(b"\x00\x01\x02" * 100)
    unknown = tmp_path / "notes.txt"
    unknown.write_text("hello\nworld\n")
    malformed = write_native_log(tmp_path / "malformed.log", _steps(10, 200, 17))
    lines = malformed.read_text().splitlines()
    lines[4] = 'RECEIPT {"v":1,"kind":"step","step":3,"step_ms":'
    malformed.write_text("\n".join(lines) + "\n")
    cases = {
        empty: "is empty",
        binary: "looks binary",
        unknown: "unknown log format",
        malformed: "malformed.log:5: malformed RECEIPT line",
        tmp_path / "missing.log": "does not exist",
    }
    for path, expected in cases.items():
        result = cli(db, "ingest", str(path))
        assert result.exit_code == 2, path
        assert expected in result.stderr, (path, result.stderr)
        assert "Traceback" not in result.stderr + result.stdout
        assert len(result.stderr.strip().splitlines()) == 1
    assert _store_bytes(db) == before


def test_a_log_cut_short_is_evidence(tmp_path, db):
    log = write_native_log(tmp_path / "killed.log", _steps(30, 200, 18), footer=False)
    text = log.read_text()
    log.write_text(text + 'RECEIPT {"v":1,"kind":"step","step":31,"ra')  # killed mid-write
    result = cli(db, "ingest", str(log))
    assert result.exit_code == 0 and "ended early" in result.stderr and "line 33" in result.stderr
    code, shown = cli_json(db, "show", "killed")
    assert shown["steady_state"]["last_step"] == 30 and shown["ended_early"]


def test_unreadable_directory_as_log(tmp_path, db):
    result = cli(db, "ingest", str(tmp_path))
    assert result.exit_code == 2 and "Traceback" not in result.stderr


def test_store_records_schema_version(tmp_path, db):
    write_native_log(tmp_path / "a.log", _steps(5, 100, 19))
    cli(db, "ingest", str(tmp_path / "a.log"))
    con = duckdb.connect(db, read_only=True)
    assert con.execute("SELECT value FROM schema_meta WHERE key='schema_version'").fetchone() == (str(SCHEMA_VERSION),)
    con.close()


def test_a_first_release_duckdb_store_is_upgraded_on_open(tmp_path, db):
    from receipts.store import migrations

    con = duckdb.connect(db)
    migrations.init(migrations.DuckDBTarget(con, db), version=1)
    con.close()
    write_native_log(tmp_path / "a.log", _steps(5, 100, 20))
    assert cli(db, "ingest", str(tmp_path / "a.log")).exit_code == 0
    con = duckdb.connect(db, read_only=True)
    assert con.execute("SELECT value FROM schema_meta WHERE key='schema_version'").fetchone() == (str(SCHEMA_VERSION),)
    con.close()


def test_read_log_keeps_every_line_and_its_number(tmp_path):
    from receipts.ingest.textlog import read_log

    cases = {b"a\n\nb\n": ["a", "", "b"], b"\na\r\nb": ["", "a", "b"], b"x\x1fy\nz\n": ["x\x1fy", "z"],
             b'"q\nbar 10%\rbar 100%\n': ['"q', "bar 100%"]}
    for data, expected in cases.items():
        path = tmp_path / "l.log"
        path.write_bytes(data)
        log = read_log(path)
        assert log.lines.to_list() == expected, data
        assert log.unterminated_last == (not data.endswith(b"\n"))


def test_list_table_shows_the_newest_and_says_how_many_are_left_out(tmp_path, db, monkeypatch):
    from receipts.cli import read_cmds

    monkeypatch.setattr(read_cmds, "TABLE_ROWS", 2)
    for seed, name in enumerate(("run_a", "run_b", "run_c")):
        cli(db, "ingest", str(write_native_log(tmp_path / f"{name}.log", _steps(10, 100, seed))))
    newest_first = [r["run_name"] for r in cli_json(db, "list")[1]]  # --json: every receipt unless asked
    assert sorted(newest_first) == ["run_a", "run_b", "run_c"]
    table = cli(db, "list", "--format", "table").stdout
    assert "3 receipts" in table and "the newest 2 shown (--limit N, --limit 0 for all)" in table
    assert newest_first[0] in table and newest_first[1] in table and newest_first[2] not in table
    assert newest_first[2] in cli(db, "list", "--format", "table", "--limit", "0").stdout
    assert len(cli(db, "list").stdout.splitlines()) == 1 + 3  # piped: TSV, a header and every receipt
    assert [r["run_name"] for r in cli_json(db, "list", "--limit", "1")[1]] == newest_first[:1]
