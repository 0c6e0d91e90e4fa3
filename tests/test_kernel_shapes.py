"""Kernel launch shapes: read by both parsers from the real corpus files (tests/data/explain_corpus), stored per
kernel and shape (anatomy_kernel_shapes), and the split of a kernel's change by shape that `receipts explain`
prices added calls with (analysis/explain_shapes.py). A shape that is missing or malformed is no shape: the
kernel's calls are then priced as one group, and nothing else the parser gives moves."""

from __future__ import annotations

import gzip
import json
import sqlite3
from collections import Counter
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pytest

from receipts.analysis.explain_shapes import shape_table, split
from receipts.ingest import kineto, nsys
from receipts.ingest.launch_shape import label
from receipts.schema.categories import load_category_rules

from conftest import realdata

CORPUS = Path(__file__).resolve().parent / "data" / "explain_corpus"
RUNS = CORPUS / "runs"
GEMM = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
GEMM_SHAPE = "grid (2,66,1) block (384,1,1)"  # a persistent kernel: its grid is the H200's 132 SMs, whatever the size
RULES = load_category_rules()


# ---------------------------------------------------------------------------------------- the shape's spelling
def test_a_shape_is_three_positive_ints_each_of_grid_and_block_else_none():
    assert label([2, 66, 1], [384, 1, 1]) == label((2, 66, 1), (384, 1, 1)) == GEMM_SHAPE
    for grid in ([2, 66], [2, 66, 1, 1], [0, 66, 1], [-2, 66, 1], [2.0, 66, 1], [True, 66, 1], "2,66,1", None,
                 [2, 66, 2**31], {"x": 2}):
        assert label(grid, [384, 1, 1]) is None and label([384, 1, 1], grid) is None


# ---------------------------------------------------------------------------------------- the split
def _runs(*per_run: dict[str, tuple[float, float]]) -> list[dict]:
    return [{"k": dict(r)} for r in per_run]


def test_a_new_shape_s_added_calls_are_priced_at_their_own_mean_and_a_kept_shape_is_slower_calls():
    # baseline: 10 calls of A at 0.5 ms; candidate: A 10 calls 5.3 ms (slower), B new: 4 calls at 0.2 ms
    keys = {"k": ("k", "k")}
    table = shape_table(_runs({"A": (10, 5.0)}, {"A": (10, 5.3), "B": (4, 0.8)}), keys)
    assert table is not None
    parts = split(np.array([5.0]), np.array([6.1]), np.array([10.0, 14.0]), 1, table["k"])
    assert parts.more_calls_ms == pytest.approx(0.8) and parts.slower_calls_ms == pytest.approx(0.3)
    (b,) = parts.changed
    assert b.shape == "B" and b.new and b.ms_per_call == pytest.approx(0.2) and b.calls_delta_per_step == 4


def test_added_calls_of_a_shape_the_baseline_had_are_priced_per_added_call_not_at_the_shape_s_mean():
    # The real gemm16 plant in miniature: one shape, 13 -> 29 calls; the shape's candidate mean (0.258) is not the
    # added calls' price: their change per added call is.
    table = shape_table(_runs({GEMM_SHAPE: (13, 4.69)}, {GEMM_SHAPE: (29, 7.49)}), {"k": ("k", "k")})
    assert table is not None
    parts = split(np.array([4.69]), np.array([7.49]), np.array([13.0, 29.0]), 1, table["k"])
    (g,) = parts.changed
    assert not g.new and g.ms_per_call == pytest.approx(2.80 / 16)
    assert parts.more_calls_ms == pytest.approx(2.80) and parts.slower_calls_ms is None


def test_calls_without_a_recorded_shape_are_a_group_of_their_own():
    table = shape_table(_runs({"A": (10, 5.0)}, {"A": (10, 5.0)}), {"k": ("k", "k")})
    assert table is not None
    # the kernel has 12 and 15 calls: 2 and 5 of them without a shape, 0.1 ms each
    parts = split(np.array([5.2]), np.array([5.5]), np.array([12.0, 15.0]), 1, table["k"])
    (g,) = parts.changed
    assert g.shape is None and g.calls_delta_per_step == pytest.approx(3) and g.ms_per_call == pytest.approx(0.1)
    assert parts.slower_calls_ms == pytest.approx(0.0)


def test_a_run_without_shapes_leaves_every_kernel_one_group():
    assert shape_table([{"k": {"A": (10, 5.0)}}, {}], {"k": ("k", "k")}) is None
    parts = split(np.array([5.0]), np.array([7.0]), np.array([10.0, 14.0]), 1, None)
    assert parts.more_calls_ms == pytest.approx(2.0) and parts.changed[0].ms_per_call == pytest.approx(0.5)


# ---------------------------------------------------------------------------------------- the stored shapes
@pytest.fixture(scope="module")
def export() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute(f"IMPORT DATABASE '{CORPUS / 'store'}'")
    return con


def test_a_kernel_s_shapes_add_up_to_its_calls_and_time_in_every_run(export):
    """Both profilers record every kernel's shape in the corpus, so each kernel's shape rows sum to its row."""
    rows = export.execute(
        "SELECT k.receipt_id, k.name, k.calls, k.total_ms, sum(s.calls), sum(s.total_ms) FROM anatomy_kernels k "
        "LEFT JOIN anatomy_kernel_shapes s USING (receipt_id, source_sha256, rank, name) "
        "GROUP BY ALL").fetchall()
    assert len({r[0] for r in rows}) == 37
    assert all(r[4] == r[2] and r[5] == pytest.approx(r[3]) for r in rows)


@pytest.mark.parametrize("prof", ["nsys", "kineto"])
def test_the_planted_gemm_calls_share_the_model_s_launch_shape(export, prof):
    """gemm16's 16 added 4096³ GEMMs launch as the model's own calls of that kernel do: one shape in both runs."""
    rows = export.execute("SELECT r.run_name, s.name, s.shape, s.calls / s.steps FROM anatomy_kernel_shapes s "
                          "JOIN receipts r ON r.id = s.receipt_id ORDER BY ALL").fetchall()
    got = [(run, shape, per_step) for run, name, shape, per_step in rows
           if name == GEMM and run in (f"{prof}_base_1", f"{prof}_gemm16")]
    assert got == [(f"{prof}_base_1", GEMM_SHAPE, 13.0), (f"{prof}_gemm16", GEMM_SHAPE, 29.0)]


def _sqlite_shapes(path: Path) -> Counter:
    """(kernel name, shape) -> calls over the whole capture, as the export's own kernel table holds them."""
    with sqlite3.connect(path) as db:
        return Counter({(name, f"grid ({gx},{gy},{gz}) block ({bx},{by},{bz})"): n for name, gx, gy, gz, bx, by, bz, n in
                        db.execute("SELECT s.value, gridX, gridY, gridZ, blockX, blockY, blockZ, count(*) FROM "
                                   "CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName "
                                   "GROUP BY 1, 2, 3, 4, 5, 6, 7")})


def _parsed_shapes(a) -> Counter:
    ks = a.kernel_steps.with_columns(pl.col(pl.Categorical).cast(pl.Utf8))
    return Counter({(r["name"], r["shape"]): r["calls"]
                    for r in ks.group_by("name", "shape").agg(pl.col("calls").sum()).iter_rows(named=True)})


def _by_name(a) -> Counter:
    out: Counter = Counter()
    for (name, _), n in _parsed_shapes(a).items():
        out[name] += n
    return out


@pytest.fixture(scope="module")
def nsys_files(tmp_path_factory) -> tuple[Path, Path]:
    """The shipped nsys gemm4 export, and a copy whose gridX holds text in every 7th kernel row."""
    folder = tmp_path_factory.mktemp("shapes_nsys")
    clean, damaged = folder / "clean.sqlite", folder / "damaged.sqlite"
    clean.write_bytes(gzip.decompress((RUNS / "nsys_gemm4" / "profile.sqlite.gz").read_bytes()))
    damaged.write_bytes(clean.read_bytes())
    with sqlite3.connect(damaged) as db:
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridX = 'wide' WHERE rowid % 7 = 0")
    return clean, damaged


@pytest.mark.slow
def test_nsys_shapes_are_the_kernel_table_s_and_a_damaged_column_leaves_them_out(nsys_files):
    clean, damaged = nsys_files
    a, b = nsys.parse(clean, rules=RULES), nsys.parse(damaged, rules=RULES)
    # the kept kernels (those a step claimed) are the table's, by name and shape
    table, parsed = _sqlite_shapes(clean), _parsed_shapes(a)
    assert all(table[key] >= n for key, n in parsed.items()) and parsed[(GEMM, GEMM_SHAPE)] == 17 * 20
    assert b.kernel_steps["shape"].null_count() == b.kernel_steps.height
    assert any("launch shapes are left out: column gridX" in w for w in b.warnings)
    assert a.rows.equals(b.rows) and a.steps.equals(b.steps) and _by_name(a) == _by_name(b)


@pytest.mark.slow
def test_kineto_shapes_are_the_trace_s_args_and_malformed_args_are_no_shape(tmp_path):
    (trace,) = (RUNS / "kineto_gemm4").glob("*.pt.trace.json.gz")
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    want: Counter = Counter()
    bad = [[2, 66], "2,66,1", [2.5, 66, 1], [0, 66, 1], None]
    seen = 0
    for ev in doc["traceEvents"]:
        if isinstance(ev, dict) and ev.get("cat") == "kernel":
            if seen % 5 == 0:  # every 5th kernel's grid damaged, by turns
                ev["args"]["grid"] = bad[(seen // 5) % len(bad)]
            want[(ev["name"], label(ev["args"].get("grid"), ev["args"].get("block")))] += 1
            seen += 1
    folder = tmp_path / "damaged"
    folder.mkdir()
    (folder / trace.name).write_bytes(gzip.compress(json.dumps(doc).encode()))
    a, b = kineto.parse_dir(trace.parent, rules=RULES), kineto.parse_dir(folder, rules=RULES)
    got = _parsed_shapes(b)
    assert sum(c for (_, s), c in got.items() if s is None) >= seen // 5 > 0
    # the kept kernels (those a step claimed) are the trace's by name and shape
    assert all(want[key] >= n for key, n in got.items())
    assert a.rows.equals(b.rows) and a.steps.equals(b.steps) and _by_name(a) == _by_name(b)


@pytest.mark.slow
def test_an_nsys_kernel_table_without_shape_columns_gives_no_shapes_and_the_same_anatomy(tmp_path):
    """A real export (../shared/realdata, MANIFEST: con_kernel.sqlite) as an nsys version without gridX..blockZ
    would write it: no shapes, no warning about them, and every frame as with them."""
    source = realdata("nsys", "con_kernel.sqlite")
    bare = tmp_path / "no_shapes.sqlite"
    bare.write_bytes(source.read_bytes())
    with sqlite3.connect(bare) as db:
        for (view,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'view'").fetchall():
            db.execute(f'DROP VIEW "{view}"')  # a view of the kernel table's columns would refuse the drop
        for column in ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"):
            db.execute(f"ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN {column}")
    a, b = nsys.parse(source, rules=RULES), nsys.parse(bare, rules=RULES)
    assert a.kernel_steps["shape"].null_count() == 0 < a.kernel_steps.height
    assert b.kernel_steps["shape"].null_count() == b.kernel_steps.height and a.warnings == b.warnings
    assert a.rows.equals(b.rows) and a.steps.equals(b.steps) and _by_name(a) == _by_name(b)
