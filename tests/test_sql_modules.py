"""SQL as checked modules: every sql/*.sql has a header saying what it answers, what it reads and
what it returns; every file is used by the code; and the tables a header names exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from receipts.schema.tables import metadata

REPO = Path(__file__).resolve().parents[1]
SQL = sorted((REPO / "sql").glob("*.sql"))
CODE = [p for d in ("analysis", "cli", "dashboards", "store", "ingest", "pipeline") for p in (REPO / d).rglob("*.py")] + \
       [REPO / "lifecycle.py"]


def header(path: Path) -> str:
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("--"):
            break
        lines.append(line[2:].strip())
    return "\n".join(lines)


def body(path: Path) -> str:
    """The SQL of a file without its comments."""
    return "\n".join(line.split("--")[0] for line in path.read_text().splitlines())


@pytest.mark.parametrize("path", SQL, ids=lambda p: p.name)
def test_header_says_what_it_answers_reads_and_returns(path):
    text = header(path)
    assert text and not text.startswith(("Reads", "Columns")), f"{path.name}: first say what it answers"
    assert re.search(r"^Reads", text, re.M), f"{path.name}: no 'Reads:' line"
    assert re.search(r"^Columns:", text, re.M), f"{path.name}: no 'Columns:' line"


@pytest.mark.parametrize("path", [p for p in SQL if not p.name.startswith("_")], ids=lambda p: p.name)
def test_the_tables_a_header_reads_exist(path):
    reads = re.search(r"^Reads:(.*?)(?:Params:|$)", header(path), re.M | re.S).group(1)
    reads = re.sub(r"\([^)]*\)", "", reads)  # asides in parentheses are prose
    named = set(re.findall(r"\b([a-z][a-z_]+)\b", reads.split(".")[0]))
    tables = {t for t in named if "_" in t or t == "receipts"}
    assert tables, f"{path.name}: 'Reads:' names no table"
    missing = tables - set(metadata.tables)
    assert not missing, f"{path.name}: reads {sorted(missing)}, which schema/tables.py does not define"


def test_every_sql_file_is_used():
    code = "\n".join(p.read_text() for p in CODE)
    unused = [p.name for p in SQL if not re.search(rf"""["']{re.escape(p.stem)}["']""", code)]
    assert not unused, f"sql files no code loads: {unused}"


def test_a_steps_time_is_defined_once_in_sql():
    """"A step's time is its slowest rank's" lives in sql/_macros.sql only (a macro every store connection
    creates); the queries call steady_step_times(...) instead of grouping receipt_steps themselves."""
    grouping = re.compile(r"max\(\s*(\w+\.)?step_ms\s*\)", re.I)
    owners = [p.name for p in SQL if grouping.search(p.read_text())]
    assert owners == ["_macros.sql"], owners


@pytest.mark.parametrize("fragment", [r"AS\s+TIMESTAMPTZ|TRY_CAST\(\s*\w+\s+AS\s+TIMESTAMP",  # the run date
                                      r"receipt_summaries",                               # the run medians
                                      r"from_json\(\s*\w*\.?tags_json",                    # a receipt's tags
                                      r"'\$\.git_rev'",                                   # its source revision
                                      r"'rumor'"])                                        # its lane label
def test_a_rule_queries_share_is_written_once_in_the_macros(fragment):
    """The run date, the run medians and the other fragments several queries need are macros of sql/_macros.sql
    (two spellings of one rule can disagree, as a cast to TIMESTAMP and one to TIMESTAMPTZ do by an offset's
    hours); the queries call them."""
    owners = [p.name for p in SQL if re.search(fragment, body(p), re.I)
              and p.stem not in ("receipt_summaries_many", "stale_summaries", "unsummarised_receipts")]
    assert owners == ["_macros.sql"], owners


def test_the_macro_and_the_ingest_time_series_agree_on_a_multi_rank_run(tmp_path):
    """Its in-memory twin, analysis.summary.steady_series (the summary computed at ingest, before anything is
    stored), gives the same per-step series as the macro over the stored rows, on a real 2-rank log."""
    import numpy as np

    from cli_helpers import cli
    from conftest import GPU_DATA
    from receipts.analysis.summary import steady_series
    from receipts.store import open_store

    db = str(tmp_path / "s.duckdb")
    assert cli(db, "ingest", str(GPU_DATA / "fsdp2_2gpu_nsys" / "run.log")).exit_code == 0
    store = open_store(db, read_only=True)
    try:
        rid = store.resolve("fsdp2_2gpu_nsys")
        steps = store.sql("SELECT step, rank, step_ms, tokens_per_s, warmup FROM receipt_steps WHERE receipt_id = $id",
                          {"id": rid})
        assert steps["rank"].n_unique() == 2
        from_sql = store.query("steady_steps_many", {"ids": [rid]})
    finally:
        store.close()
    step_ms, tokens = steady_series(steps)
    assert from_sql.height == step_ms.size > 10
    assert np.array_equal(from_sql["step_ms"].to_numpy(), step_ms)
    assert np.array_equal(from_sql["tokens_per_s"].drop_nulls().to_numpy(), tokens)
