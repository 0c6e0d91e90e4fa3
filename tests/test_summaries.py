"""Stored steady-state summaries: computed once at ingest, read by show / list / compare, and equal to
the last bit to what the recompute path (every steady step row through analysis.stats) gives."""

from __future__ import annotations

import json

import pytest

from receipts.analysis import summary
from receipts.analysis.record import load_many
from receipts.store import open_store
from tests.cli_helpers import cli, cli_json
from tests.conftest import GPU_DATA, REPO, realdata

NOISE = REPO / "tests" / "data" / "noise"


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> tuple[str, list[str]]:
    db = str(tmp_path_factory.mktemp("sum") / "s.duckdb")
    logs = [GPU_DATA / "fsdp2_2gpu_nsys" / "run.log", GPU_DATA / "straggler" / "straggler_plant_plain" / "run.log",
            NOISE / "aa_01" / "run.log", NOISE / "slow_1" / "run.log",
            REPO / "tests" / "data" / "mlperf" / "v5.1__Dell_1xXE9680x8H200-SXM-141GB_retinanet_result_0.txt",
            realdata("logs", "nanochat_pr147_a100_mfu.txt"),
            realdata("logs", "megatron-deepspeed__gpt3-0.125B-tokendropping-graduallyIncrease-lr-3.0e-4-baseline.log")]
    code, out = cli_json(db, "ingest", *map(str, logs))
    assert code == 0, out
    with open_store(db) as s:
        ids = s.sql("SELECT id FROM receipts ORDER BY id")["id"].to_list()
    return db, ids


def test_every_receipt_gets_a_summary_equal_to_the_recompute(store):
    db, ids = store
    with open_store(db, read_only=True) as s:
        rows = {r["receipt_id"]: json.loads(r["summary_json"]) for r in s.sql("SELECT * FROM receipt_summaries").iter_rows(named=True)}
        loaded = load_many(s, ids, series=True)
    assert set(rows) == set(ids)
    for rid, r in loaded.items():
        recomputed = summary.summarise(r.steady_step_ms, r.steady_tokens_per_s)
        assert rows[rid] == json.loads(json.dumps(recomputed)), rid  # exact: floats round-trip through JSON


def _without_summaries(db: str, tmp_path, rule: str | None = None) -> str:
    """A copy of the store whose summaries are gone (schema < 6) or made under another rule."""
    import shutil

    copy = str(tmp_path / "copy.duckdb")
    shutil.copyfile(db, copy)
    with open_store(copy) as s:
        if rule is None:
            s.sql("DELETE FROM receipt_summaries")
        else:
            s.sql("UPDATE receipt_summaries SET summary_json = replace(summary_json, $old, $new)",
                  {"old": summary.RULE, "new": rule})
    return copy


@pytest.mark.parametrize("rule", [None, "steady-summary-v0"], ids=["no summary (older store)", "another rule"])
def test_show_list_and_compare_are_the_same_without_a_stored_summary(store, tmp_path, rule):
    db, ids = store
    other = _without_summaries(db, tmp_path, rule)
    for rid in ids:
        a, b = cli_json(db, "show", rid)[1], cli_json(other, "show", rid)[1]
        assert a["steady_state"] == b["steady_state"]
    assert [(r["id"], r["median_step_ms"], r["n_steady_steps"]) for r in cli_json(db, "list")[1]] == \
           [(r["id"], r["median_step_ms"], r["n_steady_steps"]) for r in cli_json(other, "list")[1]]
    pair = ("aa_01", "slow_1")
    x, y = cli_json(db, "compare", *pair)[1], cli_json(other, "compare", *pair)[1]
    assert x["ratio"] == y["ratio"] and x["a"]["steady_state"] == y["a"]["steady_state"] and x["verdict"] == y["verdict"]


def test_show_reads_no_step_rows_when_a_summary_is_stored(store, monkeypatch):
    """The point of storing them: `show` and `compare` never query the step series of a summarised receipt."""
    db, ids = store
    from receipts.store.duckdb_store import DuckDBStore

    asked: list[str] = []
    for method in ("query", "query_rows"):  # a named query read as a frame or as plain rows
        def spy(self, name, params=None, original=getattr(DuckDBStore, method)):
            asked.append(name)
            return original(self, name, params)

        monkeypatch.setattr(DuckDBStore, method, spy)
    assert cli(db, "show", ids[0]).exit_code == 0
    assert cli(db, "compare", "aa_01", "slow_1").exit_code == 0
    assert "steady_steps_many" not in asked and "receipt_summaries_many" in asked


@pytest.mark.parametrize("stale", ["missing", "older rule"])
def test_db_upgrade_resummarises_under_the_current_rule(store, tmp_path, stale):
    """Summaries are versioned by the rule that made them: `receipts db upgrade` makes every missing
    or older-rule summary again from the stored steps, to exactly what ingest stores today, so the SQL readers
    (list, lane floors, the dashboard) never read another rule's numbers."""
    import shutil

    db, ids = store
    with open_store(db, read_only=True) as s:
        before = s.sql("SELECT * FROM receipt_summaries ORDER BY receipt_id").rows()
    copy = str(tmp_path / "stale.duckdb")
    shutil.copyfile(db, copy)
    with open_store(copy) as s:
        if stale == "missing":
            s.sql("DELETE FROM receipt_summaries WHERE receipt_id IN (SELECT id FROM receipts ORDER BY id LIMIT 3)")
        else:
            s.sql("UPDATE receipt_summaries SET rule = 'steady-summary-v0', median_step_ms = median_step_ms * 2, "
                  "summary_json = replace(summary_json, $old, 'steady-summary-v0')", {"old": summary.RULE})
    result = cli(copy, "db", "upgrade")
    assert result.exit_code == 0, result.stderr
    assert f"re-summarised {3 if stale == 'missing' else len(ids)} receipts under rule {summary.RULE}" in result.stdout
    with open_store(copy, read_only=True) as s:
        after = s.sql("SELECT * FROM receipt_summaries ORDER BY receipt_id").rows()
    assert after == before
    assert "re-summarised" not in cli(copy, "db", "upgrade").stdout  # nothing stale the second time


def test_throughput_that_no_step_reports_is_unknown_on_a_multi_rank_profile(tmp_path):
    """Two ranks of a real Kineto profile (HTA's trace_filter pair) carry no token counts: the median tokens/s is
    unknown (null), as on a one-rank profile, never 0 (a sum over ranks of nothing). The stored summary and the
    recompute from the step rows say the same."""
    folder = tmp_path / "two_ranks"
    folder.mkdir()
    for rank in (0, 1):  # the real files where they lie, one per rank, as a profile folder holds them
        (folder / f"sampled_rank-{rank}.json.gz").symlink_to(realdata("kineto", f"trace_filter__sampled_rank-{rank}.json.gz"))
    db = str(tmp_path / "t.duckdb")
    code, out = cli_json(db, "ingest", str(folder), "--run-name", "two")
    assert code == 0, out
    code, shown = cli_json(db, "show", "two")
    assert code == 0, shown
    assert shown["steady_state"]["n_steps"] == 2
    assert shown["steady_state"]["median_tokens_per_s"] is None
    copy = _without_summaries(db, tmp_path)
    code, recomputed = cli_json(copy, "show", "two")
    assert recomputed["steady_state"]["median_tokens_per_s"] is None
