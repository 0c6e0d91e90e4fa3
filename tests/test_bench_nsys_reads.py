"""benchmarks/bench_nsys_ingest.py times the nsys parse against a bare scan of exactly the columns the parse reads
(its READS). That list is a copy; this holds it to the parse, on real exports: an export whose four large tables
keep the values of READS alone (every other column there all NULL) parses to the same anatomy as the whole export
(nothing else is read), and one that loses the values of any column of READS does not (none fewer)."""

from __future__ import annotations

import dataclasses
import gzip
import importlib.util
import shutil
import sqlite3
from pathlib import Path

import polars as pl
import pytest

from receipts.ingest import nsys
from receipts.schema.categories import load_category_rules

TESTS = Path(__file__).resolve().parent
EXPORTS = {  # real H200 exports: an FSDP2 run, and a CUDA-graph loop traced with --cuda-graph-trace=node
    "fsdp2": TESTS / "data" / "explain" / "base_1" / "profile.sqlite.gz",
    "graph_nodes": TESTS / "data" / "gpu" / "cudagraph" / "graphs_nsys_node.sqlite.gz",
}
# Where each column's "none fewer" is shown: graphNodeId is NULL in every row of an export without graph nodes,
# and the graph export is read for it alone (a parse per column costs; one export shows the rest).
GRAPH_ONLY = {("CUPTI_ACTIVITY_KIND_KERNEL", "graphNodeId")}


def _reads() -> dict[str, tuple[str, ...]]:
    path = TESTS.parent / "benchmarks" / "bench_nsys_ingest.py"
    spec = importlib.util.spec_from_file_location("bench_nsys_ingest", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.READS


def _cut(whole: Path, to: Path, reads: dict[str, tuple[str, ...]]) -> Path:
    """A copy of `whole` whose tables in `reads` keep the values of only those columns, every other column there
    all NULL (still present: the parse checks that a column it does not scan is there, as in a real export)."""
    shutil.copy(whole, to)
    db = sqlite3.connect(to)
    for table, columns in reads.items():
        have = [r[1] for r in db.execute(f'PRAGMA table_info("{table}")')]
        kept = ", ".join(f'"{c}"' if c in columns else f'NULL AS "{c}"' for c in have)
        db.executescript(f'CREATE TABLE _cut AS SELECT {kept} FROM "{table}"; DROP TABLE "{table}"; '
                         f'ALTER TABLE _cut RENAME TO "{table}";')
    db.commit()
    db.close()
    return to


def _anatomy(path: Path) -> tuple | str:
    """Every field of the export's anatomy, its frames with categories as text (two parses' Categorical
    dictionaries differ) and rows in one order; or the refusal's type."""
    try:
        a = nsys.parse(path, rules=load_category_rules(cwd=TESTS))
    except Exception as exc:  # noqa: BLE001 - a refusal is an answer here: the parse needed what was cut
        return type(exc).__name__
    values = [getattr(a, f.name) for f in dataclasses.fields(a)]
    return tuple(v.with_columns(pl.col(pl.Categorical).cast(pl.String)).sort(pl.all()) if isinstance(v, pl.DataFrame)
                 else v for v in values if not isinstance(v, pl.LazyFrame))


def _same(a: tuple | str, b: tuple | str) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return len(a) == len(b) and all(x.equals(y) if isinstance(x, pl.DataFrame) else x == y for x, y in zip(a, b))


@pytest.mark.parametrize("export", EXPORTS)
def test_the_benchmarks_bare_scan_reads_exactly_the_columns_the_parse_reads(export, tmp_path):
    whole = tmp_path / "whole.sqlite"
    whole.write_bytes(gzip.decompress(EXPORTS[export].read_bytes()))
    reads = _reads()
    expected = _anatomy(whole)
    assert not isinstance(expected, str) and len(expected) >= 5
    db = sqlite3.connect(whole)
    left_out = {t: {r[1] for r in db.execute(f'PRAGMA table_info("{t}")')} - set(cols) for t, cols in reads.items()}
    db.close()
    assert left_out["CUPTI_ACTIVITY_KIND_KERNEL"]  # the cut leaves columns out
    assert _same(_anatomy(_cut(whole, tmp_path / "reads.sqlite", reads)), expected), "a column outside READS is read"
    for table, columns in reads.items():
        for i, column in enumerate(columns):
            if ((table, column) in GRAPH_ONLY) != (export == "graph_nodes"):
                continue
            fewer = {**reads, table: columns[:i] + columns[i + 1:]}
            got = _anatomy(_cut(whole, tmp_path / f"{table}.{column}.sqlite", fewer))
            assert not _same(got, expected), f"{table}.{column} is in READS, but its values do not change the parse"
