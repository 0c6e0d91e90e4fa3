"""`receipts push` reads the source in batches of receipts (store/sync.py): whatever the batches, the target holds
exactly the rows a receipt-by-receipt copy gives, superseding and attached anatomy included; a push with nothing
to copy reads the source in a few queries; the command says its progress."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import polars as pl
import pytest

from cli_helpers import cli, cli_json
from conftest import GPU_DATA, realdata
from receipts.store import open_store
from receipts.store import sync
from receipts.schema.tables import metadata

TABLES = [t for t in metadata.tables if t != "schema_meta"]


def _fill(tmp_path, db: str) -> str:
    for name in ("sft_run_gtx1660.log", "megatron-deepspeed__gpt3-0.125B-tokendropping-graduallyIncrease-lr-3.0e-4-"
                 "baseline.log", "nanochat_pr147_a100_mfu.txt"):
        assert cli(db, "ingest", str(realdata("logs", name))).exit_code == 0
    assert cli(db, "ingest", str(GPU_DATA / "fsdp2_2gpu_nsys" / "run.log")).exit_code == 0
    assert cli(db, "ingest", "--attach", "fsdp2_2gpu_nsys", str(GPU_DATA / "fsdp2_2gpu_nsys.sqlite.gz")).exit_code == 0
    # a receipt superseded by a later ingest of its run, and a retag
    (tmp_path / "live").mkdir()
    live, whole = tmp_path / "live" / "run.log", (GPU_DATA / "fsdp2_1gpu_rev" / "run.log").read_bytes()
    live.write_bytes(whole[:6000])  # the real run ingested while in progress, then when finished
    assert cli(db, "ingest", str(live)).exit_code == 0
    live.write_bytes(whole)
    code, grown = cli_json(db, "ingest", str(live))
    assert code == 0 and grown[0]["supersedes"], grown
    assert cli(db, "retag", "sft_run_gtx1660", "--tag", "v1", "--why", "test").exit_code == 0
    return db


@pytest.fixture(scope="module")
def built_source(tmp_path_factory) -> Path:
    """The source store (_fill), ingested once for the module's pushes (~2 s each time)."""
    folder = tmp_path_factory.mktemp("push_source")
    return Path(_fill(folder, str(folder / "source.duckdb")))


@pytest.fixture
def source(built_source, tmp_path) -> str:
    """A copy of the source store of its own for each test."""
    copy = tmp_path / "source.duckdb"
    shutil.copy(built_source, copy)
    return str(copy)


def _dump(url: str) -> dict[str, pl.DataFrame]:
    """Every table's rows, its columns in the schema's order (an upgraded store holds added ones at the end)."""
    with open_store(url, read_only=True) as store:
        return {t: (f := store.sql("SELECT " + ", ".join(f'"{c.name}"' for c in metadata.tables[t].columns)
                                   + f" FROM {t}")).sort(f.columns, nulls_last=True) for t in TABLES}


@pytest.mark.parametrize("receipts, step_rows", [(1, 1), (2, 500)])
def test_any_batching_copies_the_same_rows(tmp_path, source, monkeypatch, receipts, step_rows):
    one_batch = str(tmp_path / "one.duckdb")
    with open_store(source, read_only=True) as local, open_store(one_batch) as target:
        result = sync.push(local, target)
    assert result.receipts_copied == 6 and result.receipts_skipped == 0
    monkeypatch.setattr(sync, "BATCH_RECEIPTS", receipts)
    monkeypatch.setattr(sync, "BATCH_STEP_ROWS", step_rows)
    small = str(tmp_path / "small.duckdb")
    seen: list[tuple[int, int]] = []
    with open_store(source, read_only=True) as local, open_store(small) as target:
        assert sync.push(local, target, progress=lambda done, total: seen.append((done, total))).receipts_copied == 6
    # Called before each batch, with the receipts done so far: at most `receipts` apart, all of them done at the end.
    done = [d for d, _ in seen]
    assert {t for _, t in seen} == {6} and done[0] == 0 and done == sorted(set(done))
    assert all(0 < b - a <= receipts for a, b in zip(done, [*done[1:], 6]))
    mine, theirs, original = _dump(one_batch), _dump(small), _dump(source)
    for table in TABLES:
        assert mine[table].equals(theirs[table]), table
        if table not in ("identity_history",):  # a pushed receipt's rows are the source's, as stored
            assert mine[table].equals(original[table]), table
    assert cli_json(small, "list", "--all")[1] == cli_json(source, "list", "--all")[1]


def test_pushing_again_copies_nothing_and_reads_the_source_in_a_few_queries(tmp_path, source, monkeypatch):
    target_url = str(tmp_path / "team.duckdb")
    with open_store(source, read_only=True) as local, open_store(target_url) as target:
        sync.push(local, target)
        queries: list[str] = []
        real = type(local).sql
        monkeypatch.setattr(type(local), "sql", lambda self, q, p=None: (queries.append(q), real(self, q, p))[1])
        again = sync.push(local, target)
    assert again.receipts_copied == 0 and again.receipts_skipped == 6 and again.anatomy_copied == 0
    # (one per receipt would take 8 s over 10,000 receipts)
    assert len(queries) < 12, queries


def test_the_push_command_copies_and_says_so(tmp_path, source):
    out = cli(source, "push", "--to", str(tmp_path / "team.duckdb"))
    assert out.exit_code == 0 and "6 receipts copied, 0 skipped" in out.stdout


def test_a_duckdb_target_takes_a_batch_in_one_transaction_and_each_content_once(tmp_path, source, monkeypatch):
    """DuckdbStore.copy_receipts_rows: a receipt whose content is already there, or comes twice in one call, is
    copied once; a failure inside the batch leaves none of the batch behind."""
    with open_store(source, read_only=True) as local:
        ids = local.sql("SELECT id, content_sha256 FROM receipts ORDER BY ingested_at, id").rows()
        rows = sync._payloads(local, ids)
    target = str(tmp_path / "target.duckdb")
    with open_store(target) as store:
        assert store.copy_receipts_rows(rows[:2]) == [True, True]
        assert store.copy_receipts_rows([rows[1], rows[2], rows[2], rows[3]]) == [False, True, False, True]
        broken = rows[4]._replace(small={**rows[4].small, "receipt_env": [{"receipt_id": None}]})  # NOT NULL
        with pytest.raises(duckdb.ConstraintException):
            store.copy_receipts_rows([rows[5], broken])
        assert store.copy_receipts_rows(rows[4:]) == [True, True]
    mine, original = _dump(target), _dump(source)
    for table in TABLES:
        if table != "identity_history":
            assert mine[table].equals(original[table]), table


def test_ids_written_into_a_query_stay_values():
    """sync._quoted writes a batch's ids into the SQL as literals (a scan is pruned by constants): a quote in one
    doubles, so whatever an id holds it is matched as the value it is and never read as SQL."""
    con = duckdb.connect()
    odd = ["plain", "it's", "x'); DROP TABLE t; --", "''"]
    con.execute("CREATE TABLE t (id VARCHAR)")
    con.executemany("INSERT INTO t VALUES (?)", [[v] for v in [*odd, "other"]])
    found = con.execute(f"SELECT id FROM t WHERE id IN ({sync._quoted(odd)}) ORDER BY id").fetchall()
    assert sorted(v for (v,) in found) == sorted(odd) and con.execute("SELECT count(*) FROM t").fetchone() == (5,)



def test_the_batched_insert_names_its_columns():
    """Columns a migration added sit at the end of an upgraded store's tables (v0003's receipts.superseded_by,
    v0004's ranks_traced), not where the schema lists them: duck.insert_frame inserts by name, so the order the
    table's columns lie in does not matter, and each column is cast to the table's type."""
    from receipts.duck import insert_frame

    con = duckdb.connect()
    con.execute("CREATE TABLE t (added INTEGER, id VARCHAR NOT NULL, note VARCHAR)")
    insert_frame(con, "t", pl.DataFrame({"id": ["a", "b"], "note": [None, "x"], "added": [7, None]}))
    assert con.execute("SELECT id, note, added FROM t ORDER BY id").fetchall() == [("a", None, 7), ("b", "x", None)]


def test_a_push_into_a_first_release_store_lands_every_value_in_its_column(tmp_path, source):
    """A team store created by the first release and upgraded on open holds the columns later migrations added at
    the end of its tables: a push into it (batched, by column name) gives the source's rows."""
    from receipts.store import migrations

    target = str(tmp_path / "first_release.duckdb")
    con = duckdb.connect(target)
    migrations.init(migrations.DuckDBTarget(con, target), version=1)
    con.close()
    with open_store(source, read_only=True) as local, open_store(target) as store:
        moved = [c for (c, *_) in store.con.execute("DESCRIBE receipts").fetchall()]
        assert moved != [c.name for c in metadata.tables["receipts"].columns]  # the case under test
        assert sync.push(local, store).receipts_copied == 6
    mine, original = _dump(target), _dump(source)
    for table in TABLES:
        if table != "identity_history":
            assert mine[table].equals(original[table]), table


def test_the_push_counts_the_exports_its_receipts_carry(tmp_path, db):
    """The real 2-GPU run with its nsys export attached, pushed once: one export copied (with its receipt), and said."""
    assert cli(db, "ingest", str(GPU_DATA / "fsdp2_2gpu_nsys" / "run.log")).exit_code == 0
    assert cli(db, "ingest", "--attach", "fsdp2_2gpu_nsys", str(GPU_DATA / "fsdp2_2gpu_nsys.sqlite.gz")).exit_code == 0
    target = str(tmp_path / "team.duckdb")
    code, out = cli_json(db, "push", "--to", target)
    assert code == 0 and (out["receipts_copied"], out["anatomy_copied"], out["anatomy_skipped"]) == (1, 1, 0)
    with open_store(target, read_only=True) as there:
        assert there.sql("SELECT count(*) AS n FROM anatomy_sources")["n"][0] == 1
    again = cli(db, "push", "--to", target)
    assert "0 anatomy exports copied, 1 skipped" in again.stdout


def test_a_receipt_retagged_here_only_is_not_said_to_be_retagged_both_sides(tmp_path, db):
    """The target got the same export on its own, ingested with an identity; it was retagged only here. The push
    leaves the target as it is and says why, without claiming a retag there."""
    export = GPU_DATA / "fsdp2_1gpu_nsys.sqlite.gz"
    target = str(tmp_path / "team.duckdb")
    lane = ("--host-lineage", "h200-device-x1", "--preset", "toy_fsdp2_v1", "--regime", "fsdp2/no-compile")
    assert cli(target, "ingest", str(export), *lane).exit_code == 0
    assert cli(db, "ingest", str(export)).exit_code == 0
    assert cli(db, "retag", "fsdp2_1gpu_nsys", "--tag", "v19c", "--why", "March wave").exit_code == 0
    out = cli(db, "push", "--to", target)
    assert out.exit_code == 0
    assert "retagged both here and there" not in out.stderr
    assert "retags made here not copied" in out.stderr and "another identity" in out.stderr
    code, js = cli_json(db, "push", "--to", target)
    assert js["retags_diverged"] == [] and len(js["retags_refused"]) == 1
