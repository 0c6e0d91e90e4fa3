"""Ingest hygiene and "never a traceback", end to end through the CLI on real files.

A batch reports every file and goes on past a bad one; folders of logs and of `receipts run` directories
ingest each; a run directory with traces beside run.log ingests (it used to recurse until RecursionError);
read commands never create a store; any unexpected error is exit 2 with one line; user text with rich
markup is printed as text; crashed runs are flagged wherever they are shown.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import cli, cli_json
from conftest import GPU_DATA, drop_test_database, realdata

CLI = [sys.executable, "-m", "receipts.cli.main"]
LANE = ["--host-lineage", "gtx1660-desk", "--preset", "nanochat-d20", "--regime", "single/no-compile"]
KINETO_RUN = GPU_DATA / "fsdp2_2gpu_kineto"


def _receipt_names(db: str) -> list[str]:
    code, rows = cli_json(db, "list")
    assert code == 0
    return sorted(r["run_name"] for r in rows)


def _no_traceback(text: str) -> None:
    # Not a bare substring test: a real log quotes a crash's 'Traceback (...)' line in its ended-early note.
    assert not any(line.startswith("Traceback") for line in text.splitlines()), text


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    _no_traceback(stderr)
    return lines[0]


def _cut_log(src: Path, dst: Path, marker: bytes) -> Path:
    """A real log cut in the middle of a line, as a crash leaves it: another run of the same job, so its first
    line's clock is a second later (a byte prefix of the stored log would be an earlier view of that run, and
    stored superseded by it)."""
    data = src.read_bytes()
    first = data.index(b"\n")
    head = data[:first].replace(b":30,775", b":31,775", 1)
    assert head != data[:first]
    dst.write_bytes(head + data[first:data.index(marker) + 30])
    return dst


# ---- a batch: each file reported, the bad one skipped, a summary, exit 2 -------------------------
def test_batch_reports_each_file_goes_on_past_a_bad_one_and_stores_the_good_ones(tmp_path, db):
    good_a = realdata("logs", "nanochat_pr147_a100_mfu.txt")
    good_c = realdata("logs", "torchtitan_pr1287_dcp_zoc_steps200-250.txt")
    bad = realdata("logs", "v4.0__Dell_systems_XE9680x8H100-SXM-80GB.json")   # an MLPerf system description, not a log
    result = cli(db, "ingest", str(good_a), str(bad), str(good_c), str(tmp_path / "missing.log"))
    assert result.exit_code == 2
    out = result.stdout.splitlines()
    assert out[0].startswith(f"ingested {good_a} -> receipt ")
    assert out[1].startswith(f"ingested {good_c} -> receipt ")
    failed = [line for line in result.stderr.splitlines() if line.startswith("FAILED")]
    assert failed == [f"FAILED {bad}: unknown log format: " + failed[0].split(": unknown log format: ")[1],
                      f"FAILED {tmp_path / 'missing.log'}: does not exist"]
    assert result.stderr.strip().splitlines()[-1] == "2 ingested, 0 unchanged, 2 failed; the other 2 files are stored"
    _no_traceback(result.stderr)
    assert _receipt_names(db) == ["nanochat_pr147_a100_mfu", "torchtitan_pr1287_dcp_zoc_steps200-250"]

    # Again, as JSON: the two are unchanged, the failures carry their errors.
    result = cli(db, "ingest", str(good_a), str(bad), str(good_c), "--json")
    assert result.exit_code == 2
    rows = json.loads(result.stdout)
    assert [r["status"] for r in rows] == ["unchanged", "failed", "unchanged"]
    assert rows[1]["path"] == str(bad) and rows[1]["error"]["type"] == "InputError"
    assert rows[1]["error"]["path"] == str(bad) and "unknown log format" in rows[1]["error"]["message"]
    assert rows[0]["receipt_id"] and rows[2]["run_name"] == "torchtitan_pr1287_dcp_zoc_steps200-250"


def test_a_batch_of_good_files_ends_with_a_summary_and_exit_0(db):
    logs = [realdata("logs", "sft_run_gtx1660.log"), realdata("logs", "torchtitan_pr1437_flex_debug.txt")]
    result = cli(db, "ingest", *map(str, logs))
    assert result.exit_code == 0
    assert result.stdout.strip().splitlines()[-1] == "2 ingested, 0 unchanged, 0 failed"
    result = cli(db, "ingest", *map(str, logs))
    assert result.exit_code == 0
    assert result.stdout.strip().splitlines()[-1] == "0 ingested, 2 unchanged, 0 failed"


# ---- folders ------------------------------------------------------------------------------------
def _mixed_tree(root: Path) -> Path:
    """top/: a real log, a real nsys report with its export, two `receipts run` directories, and a sub-folder
    holding another real log."""
    top = root / "top"
    (top / "older").mkdir(parents=True)
    (top / "a.log").symlink_to(realdata("logs", "sft_run_gtx1660.log"))
    (top / "older" / "b.log").symlink_to(realdata("logs", "torchtitan_pr1437_flex_debug.txt"))
    (top / "run_nsys").symlink_to(GPU_DATA / "fsdp2_1gpu_nsys")
    (top / "run_rev").symlink_to(GPU_DATA / "fsdp2_1gpu_rev")
    (top / "receipt.toml").write_text('tags = ["batch"]\n')  # a sidecar is read beside its log, not ingested
    # A report beside its own export is one profile: the export is read, the report (which needs nsys) is not.
    (top / "export.nsys-rep").symlink_to(GPU_DATA / "fsdp2_2gpu_nsys.nsys-rep")
    (top / "export.sqlite.gz").symlink_to(GPU_DATA / "fsdp2_2gpu_nsys.sqlite.gz")
    return top


def test_a_folder_ingests_each_log_and_run_directory_and_recursive_descends(tmp_path, db):
    top = _mixed_tree(tmp_path)
    result = cli(db, "ingest", str(top))
    assert result.exit_code == 0, result.stderr
    assert _receipt_names(db) == ["a", "export", "run_nsys", "run_rev"]
    assert "b.log" not in result.stdout
    assert result.stdout.strip().splitlines()[-1].endswith(", 0 failed")

    (top / "older" / "loop").symlink_to(top)  # a symlink back up the tree is read once, not forever
    result = cli(db, "ingest", "-r", str(top))
    assert result.exit_code == 0, result.stderr
    assert _receipt_names(db) == ["a", "b", "export", "run_nsys", "run_rev"]
    assert result.stdout.count("unchanged:") >= 3
    assert f"ingested {top / 'older' / 'b.log'}" in result.stdout


def test_a_folder_of_traces_is_still_one_profile(tmp_path, db):
    result = cli(db, "ingest", str(KINETO_RUN / "traces"), "--run-name", "traces")
    assert result.exit_code == 0, result.stderr
    code, rows = cli_json(db, "list")
    assert [r["run_name"] for r in rows] == ["traces"] and rows[0]["source_format"] == "kineto"
    # ... also when met inside a folder read recursively
    (tmp_path / "wrap").mkdir()
    (tmp_path / "wrap" / "rank_traces").symlink_to(KINETO_RUN / "traces")
    result = cli(db, "ingest", "-r", str(tmp_path / "wrap"))
    assert result.exit_code == 0, result.stderr
    assert "unchanged:" in result.stdout and len(_receipt_names(db)) == 1


def test_a_folder_with_nothing_to_ingest_says_so(tmp_path, db):
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    result = cli(db, "ingest", str(tmp_path / "empty"))
    assert result.exit_code == 2
    line = _one_line(result.stderr)
    assert str(tmp_path / "empty") in line and "sub-folders are read with -r" in line


def test_real_log_folder_ingests_the_logs_and_names_each_file_it_cannot_read(tmp_path, db):
    folder = realdata("logs")
    result = cli(db, "ingest", str(folder))
    assert result.exit_code == 2
    _no_traceback(result.stderr)
    failed = [line for line in result.stderr.splitlines() if line.startswith("FAILED")]
    # JSON exports (Megatron golden values, MLPerf system descriptions, HF trainer state) are not logs.
    assert failed and all(line.startswith(f"FAILED {folder}/") for line in failed)
    assert any("golden_values_dev_dgx_h100.json" in line for line in failed)
    names = _receipt_names(db)
    assert "sft_run_gtx1660" in names and "track_1_short_2025-09-10_Yarn__ef66c943-e262-400f-822f-068d397a1dc9" in names
    summary = result.stderr.strip().splitlines()[-1]
    assert summary == f"{len(names)} ingested, 0 unchanged, {len(failed)} failed; the other {len(names)} files are stored"


# ---- non-regular files are refused without being opened ----------------------------------------
def test_a_fifo_is_refused_up_front_and_never_hangs(tmp_path, db):
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    good = realdata("logs", "sft_run_gtx1660.log")
    done = subprocess.run([*CLI, "--db", db, "ingest", str(fifo), str(good), "/dev/null"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2
    assert f"FAILED {fifo}: is a named pipe (FIFO), not a regular file or folder" in done.stderr
    assert "FAILED /dev/null: is a character device" in done.stderr
    _no_traceback(done.stderr)
    assert _receipt_names(db) == ["sft_run_gtx1660"]
    # A FIFO inside a folder is refused the same way.
    done = subprocess.run([*CLI, "--db", db, "ingest", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and f"FAILED {fifo}: is a named pipe" in done.stderr


# ---- a run directory with profiler traces at its top level --------------------------------------
def test_run_directory_with_traces_beside_run_log_ingests_with_the_same_anatomy(tmp_path, db):
    flat = tmp_path / "flat_run"
    flat.mkdir()
    shutil.copy(KINETO_RUN / "run.log", flat / "run.log")
    for trace in (KINETO_RUN / "traces").iterdir():
        shutil.copy(trace, flat / trace.name)
    (flat / "notes.json").write_text("{}")  # other JSON beside run.log is not a trace
    result = cli(db, "ingest", str(flat))
    assert result.exit_code == 0, result.stderr
    assert "RecursionError" not in result.stderr + result.stdout
    assert f"ingested {flat} -> anatomy attached to" in result.stdout and "(flat_run)" in result.stdout
    code, flat_anatomy = cli_json(db, "anatomy", "flat_run")
    assert code == 0

    # The same run in its own layout (traces in a sub-folder): the same export (sha256) and the same numbers.
    other = str(tmp_path / "other.duckdb")
    assert cli(other, "ingest", str(KINETO_RUN)).exit_code == 0
    code, nested = cli_json(other, "anatomy", KINETO_RUN.name)
    assert code == 0
    assert flat_anatomy["source"]["sha256"] == nested["source"]["sha256"]
    assert flat_anatomy["window"] == nested["window"]


# ---- read commands never create a store --------------------------------------------------------
def test_read_commands_on_a_missing_store_exit_2_naming_it_and_create_nothing(tmp_path):
    db = str(tmp_path / "absent.duckdb")
    claims = tmp_path / "claims.yaml"
    claims.write_text("version: 1\nclaims:\n  - name: x\n    metric: step_time\n    baseline: a\n"
                      "    candidate: b\n    speedup: 1.1\n    tolerance: 0.05\n")
    for args in (["list"], ["show", "a"], ["compare", "a", "b"], ["anatomy", "a"], ["gate", str(claims)],
                 ["dashboard"], ["list", "--json"], ["history", "a"], ["check", "a", "--against", "tag:main"],
                 ["retag", "a", "--tag", "t", "--why", "a typo"]):
        result = cli(db, *args)
        assert result.exit_code == 2, (args, result.stdout, result.stderr)
        line = _one_line(result.stderr)
        assert db in line and "does not exist" in line and "receipts ingest" in line and "db init" in line, line
        assert not Path(db).exists(), args
        assert not list(tmp_path.glob("absent*")), args


def test_read_commands_leave_an_existing_store_byte_for_byte(tmp_path, db):
    assert cli(db, "ingest", str(realdata("logs", "sft_run_gtx1660.log")), *LANE).exit_code == 0
    before = Path(db).read_bytes()
    for args in (["list"], ["show", "sft_run_gtx1660"], ["compare", "sft_run_gtx1660", "sft_run_gtx1660"]):
        assert cli(db, *args).exit_code == 0, args
    assert Path(db).read_bytes() == before


# ---- never a traceback, never exit 1 -----------------------------------------------------------
def test_an_unexpected_exception_is_exit_2_with_one_line_and_debug_shows_the_traceback(db, monkeypatch):
    assert cli(db, "ingest", str(realdata("logs", "sft_run_gtx1660.log"))).exit_code == 0

    def broken(store, receipt_id):
        raise ZeroDivisionError("float division by zero\nsecond line of the message")

    monkeypatch.setattr("receipts.analysis.report.receipt_report", broken)
    result = cli(db, "show", "sft_run_gtx1660")
    assert result.exit_code == 2
    line = _one_line(result.stderr)
    assert line == ("error: ZeroDivisionError: float division by zero second line of the message "
                    "(run with --debug for the traceback)")
    result = cli(db, "--debug", "show", "sft_run_gtx1660")
    assert result.exit_code == 2
    assert "Traceback (most recent call last)" in result.stderr and "in broken" in result.stderr
    assert result.stderr.strip().splitlines()[-1] == ("error: ZeroDivisionError: float division by zero second "
                                                      "line of the message")


def test_every_command_turns_errors_into_one_line():
    """A command without handle_errors would let an exception out as Python's exit 1 (the gate's 'rejected')."""
    import click
    import typer

    from receipts.cli.main import app

    def commands(group, prefix=""):
        ctx = click.Context(group)
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            if hasattr(command, "list_commands"):
                yield from commands(command, f"{prefix}{name} ")
            else:
                yield f"{prefix}{name}", command

    found = dict(commands(typer.main.get_command(app)))
    assert {"ingest", "list", "show", "compare", "anatomy", "gate", "dashboard", "db init"} <= set(found)
    unguarded = [name for name, command in found.items() if not getattr(command.callback, "handles_errors", False)]
    assert unguarded == []


def test_an_unexpected_exception_in_one_file_of_a_batch_is_that_files_failure(tmp_path, db):
    """A corrupt deflate stream inside a gzipped trace escapes the sniffer as zlib.error: the batch names the
    file, goes on, and exits 2 (not 1, not a traceback)."""
    trace = next((KINETO_RUN / "traces").iterdir())
    data = bytearray(trace.read_bytes())
    for i in range(200, 260):
        data[i] ^= 0xFF
    broken = tmp_path / "rank0.pt.trace.json.gz"
    broken.write_bytes(bytes(data))
    good = realdata("logs", "sft_run_gtx1660.log")
    result = cli(db, "ingest", str(broken), str(good))
    assert result.exit_code == 2
    failed = [line for line in result.stderr.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 1 and str(broken) in failed[0]
    _no_traceback(result.stderr)
    assert _receipt_names(db) == ["sft_run_gtx1660"]


# ---- .sqlite.gz errors name the user's file ----------------------------------------------------
def test_a_damaged_sqlite_gz_names_the_users_file_not_the_temporary_copy(tmp_path, db):
    real = gzip.decompress((GPU_DATA / "fsdp2_1gpu_nsys.sqlite.gz").read_bytes())
    cut = tmp_path / "cut.sqlite.gz"
    cut.write_bytes(gzip.compress(real[: len(real) // 2]))          # an export cut short, then gzipped
    result = cli(db, "ingest", str(cut))
    assert result.exit_code == 2
    line = _one_line(result.stderr)
    assert line.startswith(f"FAILED {cut}: SQLite file cut short"), line
    assert "receipts-nsys-" not in line

    corrupt = bytearray((GPU_DATA / "fsdp2_1gpu_nsys.sqlite.gz").read_bytes())
    for i in range(len(corrupt) // 2, len(corrupt) // 2 + 64):
        corrupt[i] ^= 0x5A                                         # a damaged deflate stream past the header
    bad = tmp_path / "bad.sqlite.gz"
    bad.write_bytes(bytes(corrupt))
    result = cli(db, "ingest", str(bad))
    assert result.exit_code == 2
    line = _one_line(result.stderr)
    assert line.startswith(f"FAILED {bad}: gzip stream is corrupt or cut short"), line
    assert not Path(db).exists() or _receipt_names(db) == []


# ---- rich markup in user text is text ----------------------------------------------------------
def test_markup_in_run_names_and_attach_refs_is_printed_as_text(tmp_path, db):
    log = realdata("logs", "sft_run_gtx1660.log")
    result = cli(db, "ingest", str(log), "--run-name", "[/]", "--tag", "[bold]", *LANE)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith(f"ingested {log} -> receipt ") and "([/])" in result.stdout
    assert _receipt_names(db) == ["[/]"]
    for args in (["list"], ["show", "[/]"], ["compare", "[/]", "[/]"]):
        result = cli(db, *args)
        assert result.exit_code == 0, (args, result.stderr)
        assert "[/]" in result.stdout
    # Attached (committed), then reported: the report must not be what fails. (The traces are of another
    # machine, 2 x H200 vs the log's GTX 1660: --force attaches them anyway, the contradiction recorded.)
    result = cli(db, "ingest", str(KINETO_RUN / "traces"), "--attach", "[/]")
    assert result.exit_code == 2 and "'NVIDIA H200' in the file vs 'NVIDIA GeForce GTX 1660 SUPER'" in result.stderr
    result = cli(db, "ingest", str(KINETO_RUN / "traces"), "--attach", "[/]", "--force")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith(f"ingested {KINETO_RUN / 'traces'} -> anatomy attached to ") and "([/])" in result.stdout
    result = cli(db, "ingest", str(KINETO_RUN / "traces"), "--attach", "[/]x")
    assert result.exit_code == 2
    assert "no receipt matches '[/]x'" in _one_line(result.stderr)
    result = cli(db, "show", "[red]nope[/red]")
    assert result.exit_code == 2 and "'[red]nope[/red]'" in _one_line(result.stderr)


# ---- crashed runs are flagged ------------------------------------------------------------------
def test_a_crashed_run_is_flagged_by_show_and_compare(tmp_path, db):
    full = realdata("logs", "sft_run_gtx1660.log")
    cut = _cut_log(full, tmp_path / "crashed.log", b"step 00080")
    assert cli(db, "ingest", str(full), str(cut), *LANE).exit_code == 0
    shown = cli(db, "show", "crashed")
    assert shown.stdout.splitlines()[1].startswith("ENDED EARLY crashed: line 187 is cut short")
    assert "ENDED EARLY" not in cli(db, "show", "sft_run_gtx1660").stdout
    compared = cli(db, "compare", "sft_run_gtx1660", "crashed")
    assert compared.exit_code == 0
    assert compared.stdout.splitlines()[0].startswith("B: ENDED EARLY crashed: line 187 is cut short")
    assert not any(line.startswith("A: ENDED EARLY") for line in compared.stdout.splitlines())


def test_the_dashboard_warns_about_a_crashed_run_on_receipt_and_compare(tmp_path, db, monkeypatch):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    full = realdata("logs", "sft_run_gtx1660.log")
    cut = _cut_log(full, tmp_path / "crashed.log", b"step 00080")
    code, rows = cli_json(db, "ingest", str(full), str(cut), *LANE)
    ids = {r["run_name"]: r["receipt_id"] for r in rows}
    app = Path(__file__).resolve().parents[1] / "dashboards" / "app.py"
    monkeypatch.setenv("RECEIPTS_DB", db)
    for query in ({"view": "receipt", "id": ids["crashed"]}, {"view": "compare", "a": ids["sft_run_gtx1660"],
                                                             "b": ids["crashed"]}):
        at = AppTest.from_file(str(app), default_timeout=60)
        for k, v in query.items():
            at.query_params[k] = v
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        warnings = [w.value for w in at.warning if "Ended early" in w.value]
        assert len(warnings) == 1 and "crashed" in warnings[0] and "line 187 is cut short" in warnings[0], query
    at = AppTest.from_file(str(app), default_timeout=60)
    at.query_params["view"], at.query_params["id"] = "receipt", ids["sft_run_gtx1660"]
    at.run()
    assert not [w.value for w in at.warning if "Ended early" in w.value]


# ---- PostgreSQL: a role without SELECT is one line, exit 2 ---------------------------------------
def _subprocess_cli(db: str, *args: str) -> subprocess.CompletedProcess:
    """A separate process, so every PostgreSQL connection it opened is gone when it returns."""
    return subprocess.run([*CLI, "--db", db, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.postgres
def test_a_postgres_role_without_select_gets_one_line_naming_the_tables(tmp_path):
    psycopg = pytest.importorskip("psycopg")
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    admin_url = os.environ.get("RECEIPTS_TEST_PG", "postgresql://receipts:receipts@127.0.0.1:5432/receipts_test")
    try:
        admin = psycopg.connect(admin_url, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        if os.environ.get("RECEIPTS_REQUIRE_POSTGRES"):
            pytest.fail(str(exc))
        pytest.skip(f"no PostgreSQL server reachable: {exc}")
    name = f"receipts_hyg_{os.getpid()}"
    reader, password = "receipts_reader", "receipts_reader"   # created by .ci/postgres_setup.sh
    drop_test_database(admin, name)
    admin.execute(f'CREATE DATABASE "{name}"')
    try:
        if not admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (reader,)).fetchall():
            pytest.skip(f"role {reader} absent (created by .ci/postgres_setup.sh)")
        params = conninfo_to_dict(admin_url)
        owner_url = make_conninfo(**{**params, "dbname": name})
        reader_url = "postgresql://{}:{}@{}:{}/{}".format(reader, password, params.get("host", "127.0.0.1"),
                                                          params.get("port", 5432), name)
        owner_uri = "postgresql://{}:{}@{}:{}/{}".format(params["user"], params.get("password", ""),
                                                         params.get("host", "127.0.0.1"), params.get("port", 5432), name)
        # An empty database read by a command: refused, and nothing is created in it.
        result = _subprocess_cli(owner_uri, "list")
        assert result.returncode == 2 and "has no receipts schema" in _one_line(result.stderr)
        with psycopg.connect(owner_url, autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()[0] == 0
        # Nor by an ingest: the schema is the owner's to create.
        result = _subprocess_cli(owner_uri, "ingest", str(realdata("logs", "sft_run_gtx1660.log")))
        assert result.returncode == 2 and "its owner creates it once" in _one_line(result.stderr)
        # the owner's set-up in this process (its connections closed with the store); the refusals above and below
        # are processes of their own: one line on the process's stderr, whoever writes it
        assert cli(owner_uri, "db", "init").exit_code == 0
        assert cli(owner_uri, "ingest", str(realdata("logs", "sft_run_gtx1660.log"))).exit_code == 0
        # The reader role before any GRANT: it sees no table (information_schema hides them), but is told why.
        for args in (["list"], ["show", "sft_run_gtx1660"], ["compare", "a", "b"]):
            result = _subprocess_cli(reader_url, *args)
            assert result.returncode == 2, args
            line = _one_line(result.stderr)
            assert "permission denied: role receipts_reader may not SELECT from" in line and "receipts," in line
            assert f":{password}@" not in line  # never the password
        with psycopg.connect(owner_url, autocommit=True) as conn:
            conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {reader}")
            conn.execute(f"REVOKE SELECT ON receipt_env FROM {reader}")
        line = _one_line(_subprocess_cli(reader_url, "show", "sft_run_gtx1660").stderr)
        assert line.endswith("may not SELECT from receipt_env; grant it the reader role's privileges (docs/teams.md)")
        with psycopg.connect(owner_url, autocommit=True) as conn:
            conn.execute(f"GRANT SELECT ON receipt_env TO {reader}")
        result = _subprocess_cli(reader_url, "show", "sft_run_gtx1660")
        assert result.returncode == 0 and result.stdout.startswith("sft_run_gtx1660")
    finally:
        drop_test_database(admin, name)
        admin.close()


def test_a_reader_that_goes_away_is_exit_141_not_the_gates_1(db):
    """`receipts show RUN | head -1`: rich and Python's documented default exit 1 here, which means 'rejected'."""
    assert cli(db, "ingest", str(realdata("logs", "sft_run_gtx1660.log"))).exit_code == 0
    for args in (["show", "sft_run_gtx1660"], ["list", "--json"], ["list"]):
        proc = subprocess.Popen([*CLI, "--db", db, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        proc.stdout.close()                       # the reader is gone before the first write
        stderr = proc.communicate(timeout=120)[1].decode()
        assert proc.returncode == 141, (args, proc.returncode, stderr)
        assert stderr == "", (args, stderr)


def test_ctrl_c_stops_the_batch_with_a_summary_and_what_was_reported_is_stored(tmp_path, db):
    import signal

    real = realdata("logs", "track_1_short_2025-09-10_Yarn__ef66c943-e262-400f-822f-068d397a1dc9.txt").read_text()
    folder = tmp_path / "many"
    folder.mkdir()
    # distinct content (a trailing note), so each is a receipt of its own; enough of them (~55 ms each here) that the
    # batch is still running when the signal comes, however long a loaded machine takes to send it (at 40, one run
    # in CI finished all of them first: exit 0)
    for i in range(200):
        (folder / f"run_{i:03d}.txt").write_text(real + f"copy {i}\n")
    proc = subprocess.Popen([*CLI, "--db", db, "ingest", str(folder)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    first = proc.stdout.readline()
    assert first.startswith("ingested "), first
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, (proc.returncode, err[-2000:])
    _no_traceback(err)
    summary = err.strip().splitlines()[-1]
    reported = 1 + out.count("\ningested ") + out.startswith("ingested ")
    assert summary.startswith(f"{reported} ingested, 0 unchanged, 0 failed; interrupted"), (summary, out)
    assert len(_receipt_names(db)) == reported < 200
