"""The shared PostgreSQL store against a real local server: races, crashes, migrations, and the same
answers as the DuckDB file over the bundled real data.

Needs a server: RECEIPTS_TEST_PG (a URL whose role may CREATE DATABASE; .ci/postgres_setup.sh prints
one). Skipped when none is reachable, unless RECEIPTS_REQUIRE_POSTGRES is set (CI), then it fails.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from receipts.analysis.listing import receipt_list
from receipts.errors import InputError, StoreError
from receipts.pipeline import ingest_paths
from receipts.schema.registry import load_registry
from receipts.schema.tables import SCHEMA_VERSION
from receipts.store import migrations, open_store

pytestmark = pytest.mark.postgres

HERE = Path(__file__).resolve()
REALDATA = HERE.parents[2] / "shared" / "realdata"
DEFAULT_PG = "postgresql://receipts:receipts@127.0.0.1:5432/receipts_test"
DEFAULT_READER = ("receipts_reader", "receipts_reader")
DEFAULT_WRITER = ("receipts_writer", "receipts_writer")
CLI = [sys.executable, "-m", "receipts.cli.main"]

sys.path.insert(0, str(HERE.parent))
from conftest import drop_test_database, write_native_log  # noqa: E402  (tests/ is not a package under importlib mode)


# ---- fixtures: one fresh database per test, created through the server named by RECEIPTS_TEST_PG --
@pytest.fixture(scope="session")
def pg_server():
    psycopg = pytest.importorskip("psycopg")

    url = os.environ.get("RECEIPTS_TEST_PG", DEFAULT_PG)
    try:
        admin = psycopg.connect(url, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        reason = (f"no PostgreSQL server reachable at RECEIPTS_TEST_PG={url!r} ({str(exc).strip()[:200]}); "
                  "run .ci/postgres_setup.sh and export the URL it prints")
        if os.environ.get("RECEIPTS_REQUIRE_POSTGRES"):
            pytest.fail(reason)
        pytest.skip(reason)
    prefix = f"receipts_t_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    made: list[str] = []

    def fresh_database() -> str:
        name = f"{prefix}_{len(made)}"
        admin.execute(f'CREATE DATABASE "{name}"')
        made.append(name)
        return _url_for(url, name)

    yield {"admin": admin, "fresh": fresh_database, "url": url}
    for name in made:
        drop_test_database(admin, name)
    admin.close()



def _url_for(url: str, dbname: str, *, user: str | None = None, password: str | None = None) -> str:
    from psycopg.conninfo import conninfo_to_dict

    p = {**conninfo_to_dict(url), **({"user": user, "password": password} if user else {})}
    auth = p.get("user", "") + (f":{p['password']}" if p.get("password") else "")
    host = p.get("host", "127.0.0.1") + (f":{p['port']}" if p.get("port") else "")
    return f"postgresql://{auth}@{host}/{dbname}"


@pytest.fixture
def pg_empty_url(pg_server) -> str:
    """A fresh, empty database."""
    return pg_server["fresh"]()


@pytest.fixture
def pg_url(pg_server) -> str:
    """A fresh database whose owner (the URL's role) has created the receipts schema (`db init`): writers never
    create it themselves."""
    url = pg_server["fresh"]()
    with migrations.open_target(url, create=True) as target:
        migrations.init(target)
    return url


def _psql(url: str, query: str, params=()):
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def _cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """The CLI in this process (no interpreter start-up, ~1 s of CPU each): its exit code, stdout and stderr."""
    from typer.testing import CliRunner

    from receipts.cli.main import app

    result = CliRunner().invoke(app, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    done = subprocess.CompletedProcess(["receipts", *args], result.exit_code, result.stdout, result.stderr)
    if check and done.returncode not in (0, 3):
        raise AssertionError(f"receipts {' '.join(args)} -> {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


def _cli_process(*args: str) -> subprocess.CompletedProcess:
    """The CLI as a process of its own: where what reaches the real stderr is under test (one line, exit 2)."""
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300)


def _run(*args: str) -> tuple[int, str]:
    """The CLI in this process: for the many read-only calls that compare answers."""
    done = _cli(*args, check=False)
    return done.returncode, done.stdout


def _logs(folder: Path, n: int, *, steps: int = 8) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    # Distinct step times make distinct content hashes, hence distinct receipts.
    return [write_native_log(folder / f"run_{i:04d}.log", [100.0 + i * 0.001 + s for s in range(steps)], warmup_steps=1)
            for i in range(n)]


# ---- races ---------------------------------------------------------------------------------------
# Warm writers (tests/warm_writers.py) start their ingests together: 10 logs each overlap from the first one (cold
# interpreters started over some 10 s on two cores needed 50 each to overlap at all).
@pytest.mark.slow
def test_16_concurrent_ingesters_store_every_receipt_exactly_once(pg_url, tmp_path, warm_writers):
    paths = _logs(tmp_path / "logs", 160)
    warm_writers.race([["--db", pg_url, "ingest", *map(str, paths[i::16])] for i in range(16)])
    assert _psql(pg_url, "SELECT count(*), count(DISTINCT content_sha256) FROM receipts") == [(160, 160)]
    assert _psql(pg_url, "SELECT count(*) FROM receipt_steps") == [(160 * 8,)]
    assert _psql(pg_url, "SELECT count(*) FROM (SELECT receipt_id FROM receipt_steps GROUP BY receipt_id "
                         "HAVING count(*) <> 8) odd") == [(0,)]


def test_same_file_by_8_processes_is_one_receipt(pg_url, tmp_path, warm_writers):
    (path,) = _logs(tmp_path, 1, steps=2000)
    outs = [out for _, out in warm_writers.race([["--db", pg_url, "ingest", str(path)]] * 8)]  # each exits 0
    assert sum(o.startswith("ingested") for o in outs) == 1, outs
    assert sum(o.startswith("unchanged") for o in outs) == 7, outs
    assert _psql(pg_url, "SELECT count(*) FROM receipts") == [(1,)]
    assert _psql(pg_url, "SELECT count(*) FROM receipt_steps") == [(2000,)]


def test_writer_killed_mid_copy_leaves_nothing_and_next_ingest_succeeds(pg_url, tmp_path):
    big = write_native_log(tmp_path / "big.log", [100.0 + (i % 97) * 0.01 for i in range(400_000)], warmup_steps=5)
    _cli("--db", pg_url, "db", "init")
    dbname = _psql(pg_url, "SELECT current_database()")[0][0]
    writer = subprocess.Popen([*CLI, "--db", pg_url, "ingest", str(big)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen_copy = False
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and writer.poll() is None:
        active = _psql(pg_url, "SELECT query FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid() "
                               "AND state = 'active' AND query LIKE 'COPY%%'", (dbname,))
        if active:
            seen_copy = True
            writer.send_signal(signal.SIGKILL)
            break
        time.sleep(0.01)
    writer.wait(timeout=60)
    assert seen_copy, "the writer finished before its COPY was seen; make the log bigger"
    assert writer.returncode == -signal.SIGKILL
    # The server aborts the dead client's transaction once it notices the closed socket.
    for _ in range(500):
        if not _psql(pg_url, "SELECT 1 FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid() "
                             "AND backend_type = 'client backend'", (dbname,)):
            break
        time.sleep(0.02)
    assert _psql(pg_url, "SELECT (SELECT count(*) FROM receipts), (SELECT count(*) FROM receipt_steps), "
                         "(SELECT count(*) FROM receipt_sources)") == [(0, 0, 0)]
    done = _cli("--db", pg_url, "ingest", str(big))
    assert done.stdout.startswith("ingested")
    assert _psql(pg_url, "SELECT (SELECT count(*) FROM receipts), (SELECT count(*) FROM receipt_steps)") == [(1, 400_000)]


# ---- reads see writes; read-only stores never write ---------------------------------------------
def test_reader_sees_commits_made_after_it_attached(pg_url, tmp_path):
    a, b = _logs(tmp_path, 2)
    registry = load_registry(None)
    with open_store(pg_url) as reader, open_store(pg_url) as writer:
        ingest_paths(writer, [a], registry=registry)
        first = reader.version()
        assert len(receipt_list(reader, include_superseded=True)) == 1
        ingest_paths(writer, [b], registry=registry)
        assert len(receipt_list(reader, include_superseded=True)) == 2          # rows: a fresh snapshot per query
        assert reader.version() != first
        # The extension caches the catalog: a column added since the attach must still be found.
        _psql(pg_url, "ALTER TABLE receipts ADD COLUMN probe_note TEXT")
        assert reader.sql("SELECT count(probe_note) AS n FROM receipts")["n"][0] == 0


def test_stores_open_at_once_each_read_their_own_database(pg_url, pg_server, tmp_path):
    """Readers share one DuckDB (the extension loads once per process), each over its own ATTACH: two databases
    open at once answer each for itself, and closing one leaves the other reading."""
    other = pg_server["fresh"]()
    with migrations.open_target(other, create=True) as target:
        migrations.init(target)
    a, b, c = _logs(tmp_path, 3)
    registry = load_registry(None)
    with open_store(pg_url) as one:
        ingest_paths(one, [a], registry=registry)
    with open_store(other) as two:
        ingest_paths(two, [b, c], registry=registry)
    first, second = open_store(pg_url, read_only=True), open_store(other, read_only=True)
    try:
        assert len(receipt_list(first, include_superseded=True)) == 1
        assert len(receipt_list(second, include_superseded=True)) == 2
        assert first._reader() is not second._reader()  # each its own cursor: its own USE and TEMP macros
        first.close()
        assert len(receipt_list(second, include_superseded=True)) == 2
        with open_store(pg_url, read_only=True) as again:  # a new attach after the first one was detached
            assert len(receipt_list(again, include_superseded=True)) == 1
    finally:
        second.close()
    from receipts.store.postgres_store import _scanner

    def attached() -> set[str]:
        return {r[0] for r in _scanner().execute("SELECT database_name FROM duckdb_databases()").fetchall()}

    before = attached()
    leaked = open_store(other, read_only=True)
    assert len(receipt_list(leaked, include_superseded=True)) == 2
    assert len(attached() - before) == 1
    del leaked  # never closed: its attach (and its server connections) go with it
    gc.collect()
    assert attached() == before


def test_the_dashboard_reads_a_postgres_store_session_after_session(pg_url, tmp_path, monkeypatch):
    """Each dashboard session opens the store read-only: sessions in turn each attach (and detach) over the one
    DuckDB the process keeps, and every view draws from PostgreSQL."""
    from streamlit.testing.v1 import AppTest

    from receipts.store.postgres_store import _scanner

    registry = load_registry(None)
    with open_store(pg_url) as store:
        ingest_paths(store, _logs(tmp_path, 2), registry=registry)
        a, b = [r["id"] for r in receipt_list(store, include_superseded=True)]
    monkeypatch.setenv("RECEIPTS_DB", pg_url)
    app = str(Path(__file__).resolve().parents[1] / "dashboards" / "app.py")
    for query in ({}, {"view": "receipt", "id": a}, {"view": "compare", "a": a, "b": b}, {"view": "receipt", "id": b}):
        at = AppTest.from_file(app, default_timeout=60)
        for k, v in query.items():
            at.query_params[k] = v
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert not at.error, [e.value for e in at.error]
        shown = " ".join([m.value for m in at.markdown] + [str(t.value) for t in at.title] + [str(h.value) for h in at.header]
                         + [str(h.value) for h in at.subheader] + [str(d.value) for d in at.dataframe])
        assert any(mark in shown for mark in ("run_0000", "run_0001", a, b)), (query, shown[:300])
    attached = {r[0] for r in _scanner().execute("SELECT database_name FROM duckdb_databases()").fetchall()}
    assert len({d for d in attached if d.startswith("pg_")}) <= 1  # sessions' stores closed: attaches not kept


def test_read_only_store_never_writes(pg_empty_url, tmp_path, pg_server):
    pg_url = pg_empty_url
    path, unseen = _logs(tmp_path, 2)
    with pytest.raises(StoreError, match="no receipts schema"):
        open_store(pg_url, read_only=True)                       # an empty database is not created read-only
    _cli("--db", pg_url, "db", "init")
    with open_store(pg_url, read_only=True) as store:
        with pytest.raises(StoreError, match="read-only"):
            ingest_paths(store, [path], registry=load_registry(None))
        assert receipt_list(store, include_superseded=True) == []
    # The dashboard's role, as docs/teams.md sets it up: SELECT only.
    import psycopg

    user, password = DEFAULT_READER
    if not _psql(pg_url, "SELECT 1 FROM pg_roles WHERE rolname = %s", (user,)):
        if os.environ.get("RECEIPTS_REQUIRE_POSTGRES"):
            pytest.fail(f"role {user} absent: run .ci/postgres_setup.sh")
        pytest.skip(f"role {user} absent (created by .ci/postgres_setup.sh)")
    _psql(pg_url, f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {user}")
    _cli("--db", pg_url, "ingest", str(path))
    reader_url = _url_for(pg_url, _psql(pg_url, "SELECT current_database()")[0][0], user=user, password=password)
    with open_store(reader_url, read_only=True) as store:
        assert len(receipt_list(store, include_superseded=True)) == 1
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        _psql(reader_url, "DELETE FROM receipts")
    done = _cli("--db", reader_url, "ingest", str(unseen), check=False)
    assert done.returncode == 2 and "permission denied" in done.stderr and "grant this role a writer's rights" in done.stderr
    # A file already stored needs no write: the reader is told so (lifecycle.already_stored), nothing is attempted.
    done = _cli("--db", reader_url, "ingest", str(path), check=False)
    assert done.returncode == 0 and "unchanged" in done.stdout


# ---- migrations on both backends ---------------------------------------------------------------
def _schema_shape(target) -> dict:
    columns = target.execute("SELECT table_name, column_name, data_type, is_nullable FROM information_schema.columns "
                             "WHERE table_schema = current_schema() ORDER BY table_name, column_name")
    if target.backend == "duckdb":
        indexes = target.execute("SELECT index_name FROM duckdb_indexes() ORDER BY 1")
    else:
        indexes = target.execute("SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
                                 "AND indexname LIKE 'ix_%' ORDER BY 1")
    return {"columns": [tuple(map(str, c)) for c in columns], "indexes": [i[0] for i in indexes]}


@pytest.mark.parametrize("backend", ["duckdb", "postgresql"])
def test_upgrade_from_first_release(backend, pg_server, tmp_path):
    old_url = pg_server["fresh"]() if backend == "postgresql" else str(tmp_path / "old.duckdb")
    new_url = pg_server["fresh"]() if backend == "postgresql" else str(tmp_path / "new.duckdb")
    with migrations.open_target(old_url, create=True) as target:
        assert migrations.init(target, version=1)
        target.execute("INSERT INTO receipts (id, content_sha256, run_name, source_format, ingested_at, "
                       "identity_complete, warmup_steps, window_rule, tags_json, features_json, software_json, "
                       "topology_json, provenance_json, phases_json, warnings_json, model_version) VALUES "
                       "('r1', 'sha-r1', 'old_run', 'native', '2026-01-01T00:00:00+00:00', true, 0, 'all', "
                       "'[]', '{}', '{}', '{}', '{}', '[]', '[]', 1)")
        assert migrations.status(target).schema_version == 1
        assert migrations.upgrade(target, to=migrations.head_version()) == list(range(2, migrations.head_version() + 1))
        assert migrations.upgrade(target, to=migrations.head_version()) == []      # idempotent
        st = migrations.status(target)
        assert (st.schema_version, st.receipts) == (migrations.head_version(), 1)
        assert {"ix_receipts_run_name", "ix_receipts_ingested_at"} <= set(_schema_shape(target)["indexes"])
    # Upgrading to the version this build speaks gives exactly the schema a fresh store gets.
    with migrations.open_target(old_url) as old, migrations.open_target(new_url, create=True) as new:
        migrations.init(new)
        if SCHEMA_VERSION == migrations.head_version():
            assert _schema_shape(old) == _schema_shape(new)
    if SCHEMA_VERSION == migrations.head_version():
        with open_store(old_url) as store:
            assert store.resolve("old_run") == "r1"


def test_tables_py_matches_migration_head():
    if SCHEMA_VERSION < migrations.head_version():
        pytest.xfail(f"schema/tables.py is at {SCHEMA_VERSION}; migration {migrations.head_version()} "
                     "awaits its Index lines and SCHEMA_VERSION bump")
    assert SCHEMA_VERSION == migrations.head_version()


def test_db_status_on_both_backends(pg_url, tmp_path):
    for url in (pg_url, str(tmp_path / "s.duckdb")):
        _cli("--db", url, "db", "init")
        out = json.loads(_cli("--db", url, "db", "status", "--json").stdout)
        assert (out["schema_version"], out["receipts"], out["state"]) == (SCHEMA_VERSION, 0, "up to date")
        assert "password" not in out["url"] and ":receipts@" not in out["url"]


# ---- the same answers on both stores, over the real data ----------------------------------------
def _ingest_real(store, registry) -> list[str]:
    logs = sorted((REALDATA / "logs").glob("*"))
    if not logs:
        pytest.skip(f"real data not present: {REALDATA / 'logs'}")
    ids = []
    for path in logs:
        try:
            ids += [o.receipt_id for o in ingest_paths(store, [path], registry=registry,
                                                       run_name=path.stem[:40])]
        except InputError:
            continue            # a format no parser reads yet; the DuckDB side skips it the same way
    exports = sorted((REALDATA / "nsys").glob("*.sqlite"))
    if ids and exports and (HERE.parents[1] / "ingest" / "nsys.py").exists():
        for export in exports:
            try:
                # another run's export (its GPU count may contradict the log): forced, to compare anatomy answers
                ingest_paths(store, [export], registry=registry, attach=ids[0], force=True)
            except InputError:
                continue
    return ids


def _normal(value):
    """What must match between the stores, and what may not:

    - floats: rounded to 12 significant digits, as DuckDB may sum in another order when it scans
      PostgreSQL in parallel;
    - rows tied on every ORDER BY key (e.g. two NVTX ranges with the same total_ms) come back in scan
      order, which differs between a DuckDB table and a PostgreSQL one: lists of rows are compared
      as sorted multisets."""
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()}
    if isinstance(value, list):
        items = [_normal(v) for v in value]
        return sorted(items, key=repr) if items and all(isinstance(v, dict) for v in items) else items
    if isinstance(value, float):
        return float(f"{value:.12g}")
    return value


def _every_query(store, ids: list[str]) -> dict:
    """Every sql/*.sql, with parameters taken from the receipts at hand (the dashboard's queries too)."""
    first = store.query("receipt", {"receipt_id": ids[0]}).to_dicts()[0] if "receipt" in _sql_params() else {}
    exports = store.sql("SELECT source_sha256 FROM anatomy_sources WHERE receipt_id = $id ORDER BY 1", {"id": ids[0]})
    values = {"receipt_id": ids[0], "a_id": ids[0], "b_id": ids[-1],
              "source_sha256": exports["source_sha256"][0] if exports.height else None,
              "host_lineage": first.get("host_lineage"), "preset_family": first.get("preset_family"),
              "launch_regime": first.get("launch_regime"), "ref": ids[0], "prefix": ids[0][:4] + "%"}
    out = {}
    for name, params in sorted(_sql_params().items()):
        try:
            frame = store.query(name, {p: values.get(p) for p in params})
        except Exception as exc:  # the same failure on both stores is the same answer
            out[name] = f"error {type(exc).__name__}"
            continue
        out[name] = sorted(_normal(frame.to_dicts()), key=repr)
    return out


def _sql_params() -> dict[str, set[str]]:
    import re

    return {p.stem: set(re.findall(r"\$([a-z0-9_]+)", p.read_text())) for p in (HERE.parents[1] / "sql").glob("*.sql")}


def _answers(url: str, ids: list[str]) -> dict:
    out = {"list": sorted(json.loads(_run("--db", url, "list", "--json")[1]), key=lambda r: r["id"])}
    # (one store opened by the test: on PostgreSQL each open loads DuckDB's postgres extension, ~0.35 s)
    with open_store(url, read_only=True) as store:
        out["queries"] = _every_query(store, ids)
        exports = store.sql("SELECT receipt_id, source_sha256 FROM anatomy_sources ORDER BY 2")
    for rid in ids:
        out[f"show {rid}"] = json.loads(_run("--db", url, "show", rid, "--json")[1])
        # Every export by its sha: without --source the newest is shown, and "newest" compares
        # ingested_at stamps (1 s resolution) that each store makes on its own.
        for sha in exports.filter(receipt_id=rid)["source_sha256"].to_list() or [None]:
            code, text = _run("--db", url, "anatomy", rid, "--json", *(("--source", sha) if sha else ()))
            out[f"anatomy {rid} {sha}"] = json.loads(text) if code == 0 else {"exit": code}
    for a, b in zip(ids, ids[1:]):
        code, text = _run("--db", url, "compare", a, b, "--json")
        assert code in (0, 3), text
        out[f"compare {a} {b}"] = json.loads(text)
    return _normal(out)


def _align_ingestion_times(duck, pg_url: str) -> None:
    """Each store stamps ingested_at itself (1 s resolution), and "newest export" / "newest first"
    answers follow it; give PostgreSQL the DuckDB stamps so every other column must match exactly."""
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn, conn.transaction(), conn.cursor() as cur:
        cur.executemany("UPDATE receipts SET ingested_at = %s WHERE id = %s",
                        duck.sql("SELECT ingested_at, id FROM receipts").rows())
        cur.executemany("UPDATE receipt_sources SET ingested_at = %s WHERE receipt_id = %s AND sha256 = %s",
                        duck.sql("SELECT ingested_at, receipt_id, sha256 FROM receipt_sources").rows())


@pytest.fixture(scope="module")
def real_duck(tmp_path_factory) -> tuple[Path, list[str]]:
    """A DuckDB store of the real data (_ingest_real) and its receipt ids, ingested once for the module."""
    path = tmp_path_factory.mktemp("real_duck") / "real.duckdb"
    with open_store(str(path)) as duck:
        ids = _ingest_real(duck, load_registry(None))
    return path, ids


def _copy_of(real_duck, tmp_path: Path) -> tuple[str, list[str]]:
    path, ids = real_duck
    copy = tmp_path / path.name
    shutil.copy(path, copy)
    return str(copy), ids


@pytest.mark.slow
def test_same_answers_on_duckdb_and_postgres_over_real_data(pg_url, tmp_path, real_duck):
    duck_url, duck_ids = _copy_of(real_duck, tmp_path)
    with open_store(duck_url) as duck, open_store(pg_url) as pg:
        pg_ids = _ingest_real(pg, load_registry(None))
        _align_ingestion_times(duck, pg_url)
    assert duck_ids == pg_ids and len(duck_ids) >= 2
    assert _answers(duck_url, duck_ids) == _answers(pg_url, pg_ids)


@pytest.mark.slow
def test_push_copies_everything_once_and_answers_match(pg_url, tmp_path, real_duck):
    duck_url, ids = _copy_of(real_duck, tmp_path)
    first = json.loads(_cli("--db", duck_url, "push", "--to", pg_url, "--json").stdout)
    assert (first["receipts_copied"], first["receipts_skipped"]) == (len(ids), 0)
    again = json.loads(_cli("--db", duck_url, "push", "--to", pg_url, "--json").stdout)
    assert (again["receipts_copied"], again["receipts_skipped"]) == (0, len(ids))
    # Pushed rows are copied as stored, ingested_at included, so even it matches.
    with open_store(duck_url, read_only=True) as duck, open_store(pg_url, read_only=True) as pg:
        for table in ("receipts", "receipt_steps", "receipt_env", "receipt_memory", "receipt_sources",
                      "anatomy_sources", "anatomy_rows", "anatomy_steps", "anatomy_nvtx"):
            query = f"SELECT * FROM {table}"
            left, right = duck.sql(query), pg.sql(query)
            assert left.sort(left.columns, nulls_last=True).equals(right.sort(right.columns, nulls_last=True)), table


@pytest.mark.postgres
def test_machine_facts_attach_once_on_postgres(pg_url):
    from cli_helpers import cli, cli_json
    from conftest import GPU_DATA

    assert cli(pg_url, "ingest", str(GPU_DATA / "fsdp2_2gpu_nsys" / "run.log")).exit_code == 0
    topo = GPU_DATA / "sysinfo" / "nvidia-smi_topo_m.txt"
    first = cli(pg_url, "ingest", str(topo), "--attach", "fsdp2_2gpu_nsys")
    second = cli(pg_url, "ingest", str(topo), "--attach", "fsdp2_2gpu_nsys")
    assert first.exit_code == second.exit_code == 0 and "unchanged" in second.stdout
    code, shown = cli_json(pg_url, "show", "fsdp2_2gpu_nsys")
    assert shown["topology"]["matrix"]["GPU0"]["GPU1"] == "NV18" and len(shown["sources"]) == 2


@pytest.mark.postgres
def test_concurrent_fact_attachments_to_one_receipt_all_land(pg_url, tmp_path):
    """Each writer reads the receipt's topology JSON, merges its facts and writes it back: the row lock
    makes the second writer read the first one's merge instead of overwriting it."""
    import threading

    from receipts.schema.model import SourceFile
    from receipts.store import open_store

    (path,) = _logs(tmp_path, 1)
    assert _run("--db", pg_url, "ingest", str(path))[0] == 0
    with open_store(pg_url) as store:
        receipt_id = store.resolve(path.stem)
    n = 12
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def attach(i: int) -> None:
        try:
            with open_store(pg_url) as store:
                source = SourceFile(f"topo_{i}.txt", f"{i:064x}", 10, "topology", "topology")
                barrier.wait(timeout=60)
                assert store.attach_facts(receipt_id, "topology", {f"fact_{i}": i}, source)
        except BaseException as exc:  # noqa: BLE001  (re-raised below, in the test's thread)
            errors.append(exc)

    threads = [threading.Thread(target=attach, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors[0]
    (topology,) = _psql(pg_url, "SELECT topology_json FROM receipts WHERE id = %s", (receipt_id,))[0]
    assert json.loads(topology) == {f"fact_{i}": i for i in range(n)}
    assert _psql(pg_url, "SELECT count(*) FROM receipt_sources WHERE role = 'topology'") == [(n,)]


def writer_url_for(pg_url: str, grants: list[str]) -> str:
    """Initialise the store in pg_url as the owner, give receipts_writer exactly `grants` (statements naming
    receipts_writer, e.g. those of docs/teams.md), and return a URL that connects as that role."""
    user, password = DEFAULT_WRITER
    if not _psql(pg_url, "SELECT 1 FROM pg_roles WHERE rolname = %s", (user,)):
        if os.environ.get("RECEIPTS_REQUIRE_POSTGRES"):
            pytest.fail(f"role {user} absent: run .ci/postgres_setup.sh")
        pytest.skip(f"role {user} absent (created by .ci/postgres_setup.sh)")
    _cli("--db", pg_url, "db", "init")
    for grant in grants:
        _psql(pg_url, grant)
    return _url_for(pg_url, _psql(pg_url, "SELECT current_database()")[0][0], user=user, password=password)


@pytest.mark.postgres
def test_a_writer_before_the_grants_is_told_to_ask_the_owner(pg_url, pg_server, tmp_path):
    """A writer role the owner has granted nothing: one line, exit 2, naming what it may not do and who grants it;
    no CREATE TABLE tried (the server's own InsufficientPrivilege on one was the answer). On an empty database: the
    owner's `db init`."""
    (log,) = _logs(tmp_path, 1)
    writer_url = writer_url_for(pg_url, [])
    done = _cli_process("--db", writer_url, "ingest", str(log))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "role receipts_writer may not SELECT from anatomy_gaps, anatomy_kernel_shapes, anatomy_kernels" in done.stderr
    assert "as the store's owner, grant this role a writer's rights" in done.stderr
    assert "InsufficientPrivilege" not in done.stderr and "CREATE" not in done.stderr
    assert _psql(pg_url, "SELECT count(*) FROM receipts") == [(0,)]
    user, password = DEFAULT_WRITER
    empty_url = pg_server["fresh"]()
    empty = _url_for(empty_url, _psql(empty_url, "SELECT current_database()")[0][0], user=user, password=password)
    done = _cli_process("--db", empty, "ingest", str(log))
    assert done.returncode == 2 and "has no receipts schema: its owner creates it once" in done.stderr
    assert _psql(empty_url, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == [(0,)]


@pytest.mark.postgres
def test_writer_role_of_the_teams_doc_can_ingest_and_attach_but_not_delete(pg_url):
    """The grants docs/teams.md gives receipts_writer, and nothing more, cover every ingest path."""
    import psycopg

    from conftest import GPU_DATA

    from test_identity_lifecycle import writer_grants

    writer_url = writer_url_for(pg_url, writer_grants())
    run = GPU_DATA / "fsdp2_2gpu_nsys"
    _cli("--db", writer_url, "ingest", str(run / "run.log"))
    _cli("--db", writer_url, "ingest", str(GPU_DATA / "fsdp2_2gpu_nsys.sqlite.gz"), "--attach", "fsdp2_2gpu_nsys")
    for facts in ("nvidia-smi_topo_m.txt", "collect_env.txt"):
        _cli("--db", writer_url, "ingest", str(GPU_DATA / "sysinfo" / facts), "--attach", "fsdp2_2gpu_nsys")
    assert _psql(pg_url, "SELECT count(*) FROM receipt_sources") == [(4,)]
    assert _psql(pg_url, "SELECT count(DISTINCT source_sha256) FROM anatomy_rows") == [(1,)]
    (topology, software), = _psql(pg_url, "SELECT topology_json, software_json FROM receipts")
    assert json.loads(topology)["matrix"]["GPU0"]["GPU1"] == "NV18" and json.loads(software)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        _psql(writer_url, "DELETE FROM receipts")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        _psql(writer_url, "UPDATE receipts SET content_sha256 = 'rewritten'")    # identity columns only (retag)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        _psql(writer_url, "UPDATE receipt_steps SET step_ms = 0")


@pytest.mark.postgres
def test_machine_facts_attached_after_a_push_travel_on_the_next_push(pg_url, tmp_path):
    from conftest import GPU_DATA

    duck_url = str(tmp_path / "node.duckdb")
    _cli("--db", duck_url, "ingest", str(GPU_DATA / "fsdp2_2gpu_nsys" / "run.log"))
    first = json.loads(_cli("--db", duck_url, "push", "--to", pg_url, "--json").stdout)
    assert (first["receipts_copied"], first["facts_copied"]) == (1, 0)
    for facts in ("nvidia-smi_topo_m.txt", "collect_env.txt"):
        _cli("--db", duck_url, "ingest", str(GPU_DATA / "sysinfo" / facts), "--attach", "fsdp2_2gpu_nsys")
    second = json.loads(_cli("--db", duck_url, "push", "--to", pg_url, "--json").stdout)
    assert (second["receipts_copied"], second["receipts_skipped"], second["facts_copied"]) == (0, 1, 2)
    third = json.loads(_cli("--db", duck_url, "push", "--to", pg_url, "--json").stdout)
    assert third["facts_copied"] == 0
    with open_store(duck_url, read_only=True) as duck, open_store(pg_url, read_only=True) as pg:
        for query in ("SELECT id, topology_json, software_json FROM receipts",
                      "SELECT receipt_id, sha256, role FROM receipt_sources ORDER BY sha256"):
            assert duck.sql(query).equals(pg.sql(query)), query


@pytest.mark.postgres
def test_keep_raw_on_postgres_needs_a_named_folder(pg_url, tmp_path):
    from cli_helpers import cli
    from test_raw_events import EXPORT, RUN_LOG, _check_parquet, _raw_paths, _sha256

    assert cli(pg_url, "ingest", str(RUN_LOG)).exit_code == 0
    refused = cli(pg_url, "ingest", str(EXPORT), "--attach", "fsdp2_1gpu_nsys", "--keep-raw")
    assert refused.exit_code == 2 and "--raw-dir" in refused.stderr
    assert _raw_paths(pg_url) == []                                   # nothing attached
    folder = tmp_path / "team_raw"
    done = cli(pg_url, "ingest", str(EXPORT), "--attach", "fsdp2_1gpu_nsys", "--keep-raw", "--raw-dir", str(folder))
    assert done.exit_code == 0, done.stdout + done.stderr
    expected = folder / f"{_sha256(EXPORT)}.parquet"
    assert _raw_paths(pg_url) == [str(expected)]
    _check_parquet(expected)


def test_db_upgrade_resummarises_stale_summaries_on_postgres(pg_url, tmp_path):
    """The PostgreSQL half of tests/test_summaries.py's re-summarise: rows replaced in one transaction."""
    from receipts.analysis.summary import RULE

    logs = _logs(tmp_path / "logs", 3)
    _cli("--db", pg_url, "ingest", *map(str, logs))
    before = _psql(pg_url, "SELECT receipt_id, rule, n_steady_steps, median_step_ms, summary_json "
                           "FROM receipt_summaries ORDER BY receipt_id")
    _psql(pg_url, "UPDATE receipt_summaries SET rule = 'steady-summary-v0', median_step_ms = 0")
    _psql(pg_url, "DELETE FROM receipt_summaries WHERE receipt_id = %s", (before[0][0],))
    done = _cli("--db", pg_url, "db", "upgrade")
    assert f"re-summarised 3 receipts under rule {RULE}" in done.stdout
    after = _psql(pg_url, "SELECT receipt_id, rule, n_steady_steps, median_step_ms, summary_json "
                          "FROM receipt_summaries ORDER BY receipt_id")
    assert after == before and len(after) == 3


def test_a_spilled_step_series_lands_the_same_in_both_backends(pg_url, tmp_path):
    # A nanochat log long enough for several bulk slices: its step rows wait in Parquet (ingest/spool.py) and
    # reach PostgreSQL by COPY slice by slice, DuckDB by one INSERT over Parquet slices: the same rows, in order.
    from receipts.store.rows import BULK_SLICE_ROWS

    real = (Path(__file__).resolve().parents[2] / "shared" / "realdata" / "logs" / "sft_run_gtx1660.log")
    if not real.is_file():
        pytest.skip("real data not present")
    lines = real.read_text().splitlines()
    steps = [line for line in lines if line.startswith("step ")]
    body = [f"step {i:05d}" + steps[i % len(steps)][len("step 00000"):] for i in range(1, 2 * BULK_SLICE_ROWS + 777)]
    log = tmp_path / "nanochat_long.log"
    log.write_text("\n".join([*lines[:lines.index(steps[0])], *body]) + "\n")
    registry = load_registry(None)
    with open_store(pg_url) as pg, open_store(str(tmp_path / "r.duckdb")) as duck:
        ingest_paths(pg, [log], registry=registry)
        ingest_paths(duck, [log], registry=registry)
        query = "SELECT * FROM receipt_steps ORDER BY step"
        a, b = pg.sql(query), duck.sql(query)
    assert a.height == len(body) and a.equals(b.cast(a.schema))
