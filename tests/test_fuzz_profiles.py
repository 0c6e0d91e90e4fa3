"""Fuzzing profiler exports with mutations of real files: PyTorch profiler (Kineto) traces and Nsight
Systems SQLite exports, and the regressions the outside campaign found in real traces. The contract is
tests/fuzzing.py's."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
import time
from pathlib import Path
import pytest
from hypothesis import given
from hypothesis import strategies as st
from receipts.errors import InputError, UnsupportedVersion
from conftest import GPU_DATA, REALDATA

from fuzzing import BYTE_OPS, KINETO_OPS, KINETO_SEED_NAMES, LOG_SEEDS, NSYS_OPS, NSYS_VALUES, _cli_store, _json_rows, _row_counts, finite_non_negative, fraction, fuzz, holds, kineto_seeds, mutate, mutate_export, mutate_trace, needs, nsys_seeds, time_bound


# --- PyTorch profiler (Kineto) traces -------------------------------------------------------------









def _check_anatomy(anatomy) -> None:
    finite_non_negative(anatomy.rows, "time_ms")
    finite_non_negative(anatomy.steps, "wall_ms", "gpu_ms", "comm_ms", "kernels")
    finite_non_negative(anatomy.nvtx, "count", "total_ms")


@fuzz("kineto")
@given(seed=st.sampled_from(KINETO_SEED_NAMES + ("gpu/rank0",)), ops=st.lists(KINETO_OPS, min_size=1, max_size=4),
       byte_ops=st.lists(BYTE_OPS, max_size=2), gz=st.booleans())
def test_kineto_traces_parse_or_name_the_file(tmp_path_factory, seed, ops, byte_ops, gz):
    seeds = kineto_seeds()
    if seed not in seeds:
        pytest.skip("real data not present")
    from receipts.pipeline import parse_profile
    from receipts.schema.categories import load_category_rules

    data = json.dumps(mutate_trace(seeds[seed], ops)).encode()
    data = mutate(data, byte_ops)
    path = tmp_path_factory.mktemp("kineto") / ("rank0.pt.trace.json" + (".gz" if gz else ""))
    path.write_bytes(gzip.compress(data, compresslevel=1) if gz else data)
    anatomy = holds(lambda: parse_profile(path, "kineto", load_category_rules(), False), path,
                    errors=(InputError, UnsupportedVersion))
    if anatomy is not None:
        _check_anatomy(anatomy)


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_corrupt_gzip_stream_is_one_input_error(tmp_path, damage):
    """Finding: a corrupt deflate stream escaped as zlib.error."""
    from receipts.ingest import sniff
    from receipts.pipeline import parse_profile
    from receipts.schema.categories import load_category_rules

    for seed in [REALDATA / "kineto" / "triton_example__triton_example.json.gz", GPU_DATA / "fsdp2_1gpu_nsys.sqlite.gz"]:
        if not seed.is_file():
            continue
        data = bytearray(seed.read_bytes())
        if damage == "flip":
            for at in range(40, min(len(data), 4000), 97):
                data[at] ^= 0x5A
        else:
            data = data[: len(data) // 2]
        path = tmp_path / seed.name
        path.write_bytes(bytes(data))
        kind = holds(lambda: sniff.sniff_kind(path), path)
        if kind is not None:
            holds(lambda: parse_profile(path, kind, load_category_rules(), False), path)


# --- Nsight Systems SQLite exports ---------------------------------------------------------------









@fuzz("nsys")
@given(seed=st.sampled_from(["profile1.sqlite", "con_kernel.sqlite", "mock.sqlite", "gpu/fsdp2_1gpu_nsys.sqlite"]),
       ops=st.lists(NSYS_OPS, min_size=1, max_size=3))
def test_nsys_exports_parse_or_name_the_file_and_table(tmp_path_factory, seed, ops):
    seeds = nsys_seeds(tmp_path_factory.mktemp("nsys-seeds"))
    if seed not in seeds:
        pytest.skip("real data not present")
    from receipts.pipeline import parse_profile
    from receipts.schema.categories import load_category_rules

    path = tmp_path_factory.mktemp("nsys") / Path(seed).name
    mutate_export(seeds[seed], path, ops)
    anatomy = holds(lambda: parse_profile(path, "nsys", load_category_rules(), False), path)
    if anatomy is not None:
        _check_anatomy(anatomy)


ACTIVITY_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_RUNTIME")


@fuzz("nsys_times")
@given(seed=st.sampled_from(["profile1.sqlite", "con_kernel.sqlite", "gpu/fsdp2_1gpu_nsys.sqlite"]),
       ops=st.lists(st.tuples(st.sampled_from(ACTIVITY_TABLES), st.sampled_from(["start", "end", "correlationId"]),
                              st.sampled_from(NSYS_VALUES), st.integers(1, 7)), min_size=1, max_size=3))
def test_damaged_times_and_ids_parse_or_name_the_file_in_bins(tmp_path_factory, seed, ops):
    """Starts, ends and correlation ids NULL, extreme or of the wrong type, read as `receipts ingest` reads an
    export (spilled) with the runtime calls in partitions of 16 and the activity in step groups or time bins of
    50 (a window without steps, its activities cut at the bins' ends): an anatomy or one error naming the file."""
    seeds = nsys_seeds(tmp_path_factory.mktemp("nsys-seeds"))
    if seed not in seeds:
        pytest.skip("real data not present")
    from receipts.ingest import correlation, nsys, nsys_activity
    from receipts.schema.categories import load_category_rules

    path = tmp_path_factory.mktemp("nsys") / Path(seed).name
    shutil.copyfile(seeds[seed], path)
    with sqlite3.connect(path) as db:
        for table, col, value, every in ops:
            try:
                db.execute(f'UPDATE "{table}" SET "{col}" = {value} WHERE rowid % {every} = 0')
            except sqlite3.IntegrityError:  # NOT NULL (start and end, in nsys's own schema): left alone
                pass
    db.close()
    spill = tmp_path_factory.mktemp("spill")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(nsys_activity, "_GROUP_ACTIVITIES", 50)
        mp.setattr(correlation, "_PART_CALLS", 16)
        anatomy = holds(lambda: nsys.parse(path, rules=load_category_rules(), spill=spill), path)
    if anatomy is not None:
        _check_anatomy(anatomy)


@fuzz("nsys_gz")
@given(seed=st.sampled_from(["profile1.sqlite", "gpu/fsdp2_1gpu_nsys.sqlite"]), ops=st.lists(NSYS_OPS, max_size=2),
       gz_ops=st.lists(st.tuples(st.just("flip"), fraction, st.integers(0, 255)) | st.tuples(st.just("truncate"), fraction),
                       min_size=1, max_size=2))
def test_gzipped_nsys_exports_name_the_users_file(tmp_path_factory, seed, ops, gz_ops):
    """Errors about a .sqlite.gz name the .gz the user gave, never the temporary file it was unpacked to."""
    seeds = nsys_seeds(tmp_path_factory.mktemp("nsys-seeds"))
    if seed not in seeds:
        pytest.skip("real data not present")
    from receipts.ingest import sniff
    from receipts.pipeline import parse_profile
    from receipts.schema.categories import load_category_rules

    folder = tmp_path_factory.mktemp("nsysgz")
    plain = folder / "plain.sqlite"
    mutate_export(seeds[seed], plain, ops)
    path = folder / "export.sqlite.gz"
    path.write_bytes(mutate(gzip.compress(plain.read_bytes(), compresslevel=1), gz_ops))
    kind = holds(lambda: sniff.sniff_kind(path), path)
    if kind in ("nsys-gz", "kineto", "nsys"):
        holds(lambda: parse_profile(path, kind, load_category_rules(), False), path)


@fuzz("nsys_job")
@given(damaged=st.sampled_from([0, 1]), ops=st.lists(NSYS_OPS, min_size=1, max_size=2))
def test_a_damaged_export_of_a_job_is_named(tmp_path_factory, damaged, ops):
    """One job's exports (one per rank) with one of them damaged: one anatomy, or one error naming that export."""
    from receipts.ingest.nsys_job import job_exports
    from receipts.pipeline import parse_profile
    from receipts.schema.categories import load_category_rules

    folder = tmp_path_factory.mktemp("job")
    for rank in (0, 1):
        with gzip.open(GPU_DATA / "multiexport" / "per_rank_gloo" / f"rank{rank}.sqlite.gz", "rb") as src:
            (folder / f"seed{rank}").write_bytes(src.read())
        path = folder / f"rank{rank}.sqlite"
        mutate_export(folder / f"seed{rank}", path, ops if rank == damaged else [])
        (folder / f"seed{rank}").unlink()
    assert len(job_exports(folder)) == 2
    anatomy = holds(lambda: parse_profile(folder, "nsys-dir", load_category_rules(), False),
                    folder / f"rank{damaged}.sqlite")
    if anatomy is not None:
        _check_anatomy(anatomy)


def test_equal_correlation_ids_are_joined_in_linear_time(tmp_path):
    """Finding: an export whose correlation ids are all equal made the runtime join quadratic (no result in 180 s)."""
    seeds = nsys_seeds(tmp_path)
    if "gpu/fsdp2_1gpu_nsys.sqlite" not in seeds:
        pytest.skip("real data not present")
    from receipts.ingest import nsys
    from receipts.schema.categories import load_category_rules

    path = tmp_path / "equal.sqlite"
    mutate_export(seeds["gpu/fsdp2_1gpu_nsys.sqlite"], path, [("equal_correlation_ids",)])
    db = sqlite3.connect(path)
    kernels = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    calls = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
    db.close()
    assert kernels * calls > 10**8  # the quadratic join would have to build this many rows
    start = time.monotonic()
    anatomy = nsys.parse(path, rules=load_category_rules())
    assert time.monotonic() - start < 15
    assert any("correlation" in w for w in anatomy.warnings), anatomy.warnings


# --- regressions of the outside fuzz campaign: real traces, through `receipts ingest` ---------------

def _ingest_json(db: Path, *paths: Path) -> tuple[int, list[dict]]:
    from typer.testing import CliRunner

    from receipts.cli.main import app

    with time_bound():
        result = CliRunner().invoke(app, ["--db", str(db), "ingest", *map(str, paths), "--json"], catch_exceptions=True)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, _json_rows(result.stdout)


@pytest.mark.parametrize("gz", [False, True], ids=["json", "json.gz"])
def test_a_kineto_trace_starting_with_a_utf8_bom_reads_as_without_it(tmp_path, gz):
    """Finding: a Kineto JSON starting with a UTF-8 byte-order mark was sniffed as a log: 'unknown log format'."""
    from receipts.ingest import kineto, sniff
    from receipts.schema.categories import load_category_rules

    seed = REALDATA / "kineto" / "nccl_parser_config__nccl_data.json.gz"
    needs({seed.name: seed} if seed.is_file() else {})
    data = b"\xef\xbb\xbf" + gzip.decompress(seed.read_bytes())
    path = tmp_path / ("rank0.pt.trace.json" + (".gz" if gz else ""))
    path.write_bytes(gzip.compress(data, compresslevel=1) if gz else data)
    assert sniff.sniff_kind(path) == "kineto"
    rules = load_category_rules()
    with_bom, without = kineto.parse_files([path], rules=rules), kineto.parse_files([seed], rules=rules)
    assert with_bom.rows.equals(without.rows) and with_bom.steps.equals(without.steps)
    code, rows = _ingest_json(tmp_path / "r.duckdb", path)
    assert code == 0 and rows[0]["status"] == "ingested", rows


def _deep(depth: int = 3000) -> bytes:
    return b'"nested": ' + b"[" * depth + b"]" * depth + b", "


@pytest.mark.parametrize("where", ["first", "middle", "last-args", "last-event"])
def test_kineto_args_nested_3000_deep_are_one_input_error(tmp_path, tmp_path_factory, where):
    """Finding: a Kineto event whose args nest 3,000 levels escaped as RecursionError. Now: exit 2, one line
    naming the file, the store unchanged; wherever the event lies (the first event, a block in the middle of a
    9.8 MB trace, the last event, read on its own)."""
    seed = REALDATA / "kineto" / "nccl_parser_config__nccl_data.json.gz"
    needs({seed.name: seed} if seed.is_file() else {})
    data = gzip.decompress(seed.read_bytes())
    sep = b"},\n  {"
    if where == "first":
        at = data.index(b'"args": {') + len(b'"args": {')
    elif where == "middle":
        at = data.index(b'"args": {', len(data) // 2) + len(b'"args": {')
    elif where == "last-args":
        at = data.rindex(b'"args": {') + len(b'"args": {')
    else:
        at = data.rindex(sep) + len(sep)
    path = tmp_path / "rank0.pt.trace.json"
    path.write_bytes(data[:at] + _deep() + data[at:])
    needs(LOG_SEEDS)
    db = _cli_store(tmp_path_factory)["db"]
    before = _row_counts(db)
    code, rows = _ingest_json(db, path)
    assert code == 2, rows
    (row,) = rows
    assert row["status"] == "failed" and row["error"]["type"] == "InputError", row
    message = row["error"]["message"]
    assert path.name in message and "\n" not in message and "1,000 levels deep" in message, message
    assert _row_counts(db) == before


def _two_rank_folder(tmp_path: Path) -> Path:
    """HTA's real trace_filter pair, one file per rank, as a profile folder holds them (the files where they lie)."""
    folder = tmp_path / "profile"
    folder.mkdir()
    for rank in (0, 1):
        seed = REALDATA / "kineto" / f"trace_filter__sampled_rank-{rank}.json.gz"
        needs({seed.name: seed} if seed.is_file() else {})
        (folder / f"sampled_rank-{rank}.json.gz").symlink_to(seed)
    return folder


@pytest.mark.parametrize("damage", ["empty", "truncated", "flipped", "head cut", "gzip header", "not JSON"])
def test_a_damaged_rank_file_refuses_the_whole_profile(tmp_path, tmp_path_factory, damage):
    """Finding: in a folder of per-rank traces with one rank file damaged or empty, rank 0 was stored alone as a
    one-rank receipt named after its file, the other failed, exit 2: the store changed on an error. Now the
    profile is refused whole, with one error naming the damaged file, and the store is unchanged."""
    folder = _two_rank_folder(tmp_path)
    bad = folder / "sampled_rank-1.json.gz"
    data = gzip.decompress(bad.read_bytes())
    bad.unlink()
    if damage == "empty":
        bad.write_bytes(b"")
    elif damage == "truncated":
        bad.write_bytes(gzip.compress(data[: len(data) * 2 // 3]))
    elif damage == "flipped":  # a byte flipped inside the gzip stream
        packed = bytearray(gzip.compress(data))
        packed[len(packed) // 2] ^= 0xFF
        bad.write_bytes(bytes(packed))
    elif damage == "head cut":
        bad.write_bytes(gzip.compress(data[:100]))
    elif damage == "gzip header":  # the deflate stream damaged in its first bytes
        packed = bytearray(gzip.compress(data))
        packed[12] ^= 0xFF
        bad.write_bytes(bytes(packed))
    else:  # the trace's text with its first brace lost, uncompressed
        bad = bad.with_name("sampled_rank-1.json")
        bad.write_bytes(data.replace(b"{", b"", 1))
    needs(LOG_SEEDS)
    db = _cli_store(tmp_path_factory)["db"]
    before = _row_counts(db)
    code, rows = _ingest_json(db, folder)
    assert code == 2, rows
    assert [r["status"] for r in rows] == ["failed"], rows
    assert rows[0]["error"]["type"] == "InputError" and bad.name in rows[0]["error"]["message"], rows
    assert _row_counts(db) == before, "a refused profile changed the store"


def test_a_config_json_beside_rank_traces_is_not_a_rank(tmp_path):
    """Finding: a stray 11-byte config.json beside the traces split the folder into files, rank 0 stored alone.
    A JSON document that is no trace is not one of the profile's ranks: both ranks are read, as without it."""
    folder = _two_rank_folder(tmp_path)
    (folder / "config.json").write_text('{"lr": 0.1}')
    assert (folder / "config.json").stat().st_size == 11
    db = tmp_path / "r.duckdb"
    code, rows = _ingest_json(db, folder)
    assert code == 0, rows
    assert [r["status"] for r in rows] == ["ingested"], rows
    from receipts.store import open_store

    with open_store(str(db), read_only=True) as s:
        ranks = s.sql("SELECT DISTINCT rank FROM anatomy_rows ORDER BY rank")["rank"].to_list()
    assert ranks == [0, 1]


def _nsys_damage(case: str, dst: Path) -> str | None:
    """The real profile1 export with one damage of the campaign's, written to `dst` (gzipped for '.gz' cases);
    returns the table the error must name (None: the export must parse)."""
    data = bytearray((REALDATA / "nsys" / "profile1.sqlite").read_bytes())
    table = None
    if case.startswith("schema byte"):  # a byte of TARGET_INFO_GPU's CREATE statement, not UTF-8 and no SQL
        at = data.index(b"CREATE TABLE TARGET_INFO_GPU")
        data[data.index(b"(", at)] = 0xAB
        table = "TARGET_INFO_GPU"
    elif case.startswith("nvtx text byte"):  # a byte of an NVTX range's text, not UTF-8 (every copy in the file)
        at = -1
        while (at := data.find(b"main->test_max_par->init_data", at + 1)) >= 0:
            data[at + len(b"main->test_max_par->i")] = 0xAB
    plain = dst.with_name(dst.name.removesuffix(".gz"))
    plain.write_bytes(bytes(data))
    if case.startswith("gpu name blob"):
        with sqlite3.connect(plain) as db:
            db.execute("UPDATE TARGET_INFO_GPU SET name = CAST(name AS BLOB) WHERE rowid = 1")
        db.close()
        table = "TARGET_INFO_GPU"
    if dst.name.endswith(".gz"):
        dst.write_bytes(gzip.compress(plain.read_bytes()))
        plain.unlink()
    return table


@pytest.mark.parametrize("case", ["schema byte", "schema byte, gzipped", "gpu name blob", "gpu name blob, gzipped",
                                  "nvtx text byte", "nvtx text byte, gzipped"])
def test_damaged_nsys_schema_names_and_text_are_one_error_naming_file_and_table(tmp_path, case):
    """The campaign's leftovers on nsys exports, as small cases: a byte of the schema that is no UTF-8
    (UnicodeDecodeError in the schema reader), TARGET_INFO_GPU.name stored as a BLOB (TypeError), a .sqlite.gz
    whose inner database is damaged (an OSError naming the temporary copy), NVTX text that is no UTF-8 (a polars
    panic). Each is one InputError naming the file the user gave and the table, or, for text, a parse."""
    from receipts.ingest import sniff
    from receipts.pipeline import parse_profile
    from receipts.schema.categories import load_category_rules

    if not (REALDATA / "nsys" / "profile1.sqlite").is_file():
        pytest.skip("real data not present")
    path = tmp_path / ("export.sqlite.gz" if case.endswith("gzipped") else "export.sqlite")
    table = _nsys_damage(case, path)
    kind = sniff.sniff_kind(path)
    if table is None:
        anatomy = holds(lambda: parse_profile(path, kind, load_category_rules(), False), path)
        assert anatomy is not None
        _check_anatomy(anatomy)
        assert any("\\xAB" in name or "\ufffd" in name for name in anatomy.nvtx["range_name"].to_list())
        return
    with pytest.raises(InputError) as err:
        parse_profile(path, kind, load_category_rules(), False)
    assert err.value.table == table and path.name in str(err.value) and "\n" not in str(err.value)
