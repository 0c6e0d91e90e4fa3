"""The nsys parser's every output pinned on every real export: the one-pass ingest must give the numbers the
previous implementation gave, to the last bit (a rewrite for speed and memory may not move a number).

tests/data/gpu/nsys_expected.json was written by the implementation before the one-pass rewrite (commit
d350a84: DuckDB correlation + ASOF join, probe scans) with `python tests/test_nsys_expected.py --write` run
against that code: per export, the anatomy rows and steps in full (floats as JSON writes them: exact), every
scalar field and warning, and a SHA-256 of the sorted NVTX, per-activity (`events`, `raw_events`) and
per-kernel-name (`kernel_steps`) frames and of the captured environment (the NVTX frames alone run to
megabytes on the exports with 17,000 range names).
An export added to tests/data later is pinned with `--add-missing` (straggler_rank0_plant_nsys was pinned
that way, by the same d350a84 code).
The exports cover CUDA-graph replays traced per graph and per node, duplicate runtime rows (saxpy's
cudaLaunchKernel_v7000), several GPUs and processes, NVTX steps on other threads than the launches, exports
without steps, memcpy, memset or NVTX, and nsys versions from 2021 to 2026.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from receipts.ingest import correlation, nsys, nsys_activity, nsys_anatomy
from receipts.ingest.column_bins import ColumnBins
from receipts.schema.categories import load_category_rules

TESTS = Path(__file__).resolve().parent
EXPECTED = TESTS / "data" / "gpu" / "nsys_expected.json"
REAL_NSYS = TESTS.parents[1] / "shared" / "realdata" / "nsys"
EXPORTS = ([f"realdata/{p.name}" for p in sorted(REAL_NSYS.glob("*.sqlite"))]
           + [str(p.relative_to(TESTS / "data")) for p in sorted((TESTS / "data").glob("**/*.sqlite.gz"))])


def _frame(df: pl.DataFrame) -> dict:
    df = df.sort(df.columns, nulls_last=True)
    return {"columns": {c: str(t) for c, t in df.schema.items()}, "rows": df.rows()}


def _digest(df: pl.DataFrame | pl.LazyFrame | None) -> dict | None:
    if df is None:
        return None
    df = df.collect() if isinstance(df, pl.LazyFrame) else df  # events spilled to Parquet (nsys.parse's spill)
    # an Enum column by its text: the numbers are the snapshot, not the column's encoding (an Enum sorts by code)
    df = df.with_columns(pl.col(pl.Enum, pl.Categorical).cast(pl.Utf8))
    df = df.sort(df.columns, nulls_last=True)
    return {"height": df.height, "columns": {c: str(t) for c, t in df.schema.items()},
            "sha256": hashlib.sha256(df.write_csv().encode()).hexdigest()}


def _by_name(kernel_steps: pl.DataFrame | None) -> pl.DataFrame | None:
    """The kernel rows per (rank, step, category, name), a name's launch shapes summed as whole nanoseconds (so the
    milliseconds are the very floats one row per name held): what was pinned before the parser read shapes."""
    if kernel_steps is None or "shape" not in kernel_steps.columns:
        return kernel_steps
    return (kernel_steps.with_columns(pl.col(pl.Categorical).cast(pl.Utf8))
            .group_by("rank", "step", "category", "name")
            .agg(pl.col("calls").sum(), ((pl.col("time_ms") * 1e6).round().cast(pl.Int64).sum() / 1e6).alias("time_ms"))
            .with_columns(pl.col("category", "name").cast(pl.Categorical)))


def _idle_whole(rows: pl.DataFrame) -> pl.DataFrame:
    """The anatomy rows with idle_long (idle in gaps of 0.5 ms or more) folded back into idle, as whole nanoseconds:
    the pinned rows predate the split, which moves no nanosecond of idle (tests/test_intervals_sorted.py checks the
    split gap by gap)."""
    if "idle_long" not in rows["category"].cast(pl.Utf8).to_list():
        return rows
    dtype = rows.schema["category"]
    keys = [c for c in rows.columns if c not in ("category", "time_ms")]
    folded = rows.with_columns(pl.col("category").cast(pl.Utf8).replace("idle_long", "idle"))
    idle = (folded.filter(pl.col("category") == "idle")
            .group_by(*keys, "category", maintain_order=True)
            .agg(((pl.col("time_ms") * 1e6).round().cast(pl.Int64).sum() / 1e6).alias("time_ms")))
    return (pl.concat([folded.filter(pl.col("category") != "idle"), idle.select(folded.columns)])
            .with_columns(pl.col("category").cast(dtype)))


def snapshot(a) -> dict:
    """Everything parse() returns, in a form JSON holds exactly."""
    return {
        "rows": _frame(_idle_whole(a.rows)), "steps": _frame(a.steps), "nvtx": _digest(a.nvtx),
        "events": _digest(a.events), "raw_events": _digest(a.raw_events), "kernel_steps": _digest(_by_name(a.kernel_steps)),
        "scalars": {k: getattr(a, k) for k in ("source_format", "schema_version", "step_marker", "attribution",
                                               "unattributed", "gpu_model", "gpu_count", "world_size",
                                               "ranks_traced", "gpus_on_host", "software")},
        "claim": repr(a.claim), "warnings": list(a.warnings),
        "env": hashlib.sha256(repr(a.env).encode()).hexdigest(),
    }


def _source(name: str, scratch: Path) -> Path:
    if name.startswith("realdata/"):
        path = REAL_NSYS / name.removeprefix("realdata/")
        if not path.exists():
            pytest.skip(f"real data not present: {path}")
        return path
    plain = scratch / Path(name).name.removesuffix(".gz")
    if not plain.exists():
        plain.write_bytes(gzip.decompress((TESTS / "data" / name).read_bytes()))
    return plain


def _parse(name: str, scratch: Path, keep_raw: bool = True, spill: Path | None = None) -> dict:
    a = nsys.parse(_source(name, scratch), rules=load_category_rules(cwd=TESTS), keep_raw=keep_raw, spill=spill)
    # Through JSON and back, so tuples and lists compare as the stored file does.
    return json.loads(json.dumps(snapshot(a)))


@pytest.fixture(scope="module")
def expected() -> dict:
    return json.loads(EXPECTED.read_text())


def test_the_real_exports_are_pinned(expected):
    # An export added later is pinned with `--add-missing` (by the implementation of that day).
    assert set(expected) >= {n for n in EXPORTS if n.startswith("realdata/")} | {
        "gpu/cudagraph/graphs_nsys_graph.sqlite.gz", "gpu/cudagraph/graphs_nsys_node.sqlite.gz",
        "gpu/fsdp2_2gpu_nsys.sqlite.gz"}


@pytest.mark.parametrize("name", sorted(json.loads(EXPECTED.read_text())))
@pytest.mark.parametrize("keep_raw", [True, False])
def test_parse_equals_the_previous_implementation(name, keep_raw, expected, tmp_path):
    # Without --keep-raw the parser reads fewer columns (no stream, no short name): the rest must not move.
    got, want = _parse(name, tmp_path, keep_raw), expected[name]
    for key in want:
        if keep_raw or key != "raw_events":
            assert got[key] == want[key], f"{name}: {key} differs"


# One export of each shape the spilled and streamed paths branch on (nsys_activity, correlation): steps on two
# processes with communication under compute (FSDP2's, whose straggler report the spilled events must also make;
# the straggler exports are the same program's captures), CUDA-graph replays traced per graph (replays counted)
# and per node (replays dropped, their kernels rows of their own), no steps on two processes (the window cut in
# bins of time), and duplicate runtime rows (saxpy's cudaLaunchKernel_v7000: one id twice, cut across partitions).
# Cut small, a file's partitions, groups and chunks are a pure function of its rows: the other exports are more
# of these shapes (fsdp2_1gpu and the straggler captures: FSDP2's program; mfu_2gpu_before: the after's; profile1,
# con_kernel and perlmutter-cloverleaf: one process without steps, as saxpy), or fit in one partition even cut
# small (mock's 9 runtime calls); every export goes through the spilled path at the shipped sizes.
SHAPES = ["gpu/fsdp2_2gpu_nsys.sqlite.gz", "gpu/cudagraph/graphs_nsys_graph.sqlite.gz",
          "gpu/cudagraph/graphs_nsys_node.sqlite.gz", "realdata/mfu_2gpu_after.sqlite",
          "realdata/saxpy-mpi-cuda_nsys_perlmutter0.sqlite"]


@pytest.fixture(scope="module")
def held_stragglers(tmp_path_factory):
    """Per export, the straggler report the pipeline makes of events held in memory (at the shipped sizes), parsed
    once for both of the export's spilled cases."""
    from receipts.analysis.at_ingest import with_stragglers

    scratch, made = tmp_path_factory.mktemp("held"), {}

    def held(name: str):
        if name not in made:
            made[name] = with_stragglers(nsys.parse(_source(name, scratch), rules=load_category_rules(cwd=TESTS)))
        return made[name]
    return held


@pytest.mark.parametrize(("name", "small"), [(n, False) for n in sorted(json.loads(EXPECTED.read_text()))]
                         + [(n, True) for n in SHAPES])
def test_a_spilled_parse_gives_the_pinned_numbers(name, small, expected, held_stragglers, tmp_path, monkeypatch):
    """As `receipts ingest` reads one export: the runtime calls and the activity kept per process wait in files in
    a scratch folder as they stream in (read back by id partition and step group), each process's events written
    there as Parquet as they are made, the anatomy's events a lazy scan of them; every output, events included, as
    pinned, and the straggler report the pipeline makes of them as the one made of events held in memory.
    `small`: partitions of 64 calls, step groups of 500 activities and chunks of 1,000, so that the larger
    exports take dozens of each (ids cut anywhere, steps grouped unevenly) and the activity cache misses."""
    from receipts.analysis.at_ingest import with_stragglers

    if small:
        monkeypatch.setattr(nsys_anatomy, "_CHUNK_EVENTS", 1000)
        monkeypatch.setattr(nsys_activity, "_GROUP_ACTIVITIES", 500)
        monkeypatch.setattr(correlation, "_PART_CALLS", 64)
        monkeypatch.setattr(correlation, "_PIECE_CALLS", 100)
        monkeypatch.setattr(correlation, "_CACHED_PARTS", 1)
    spill = tmp_path / "spill"
    spill.mkdir()
    read_back: list[str] = []
    take_column = ColumnBins._take_column
    monkeypatch.setattr(ColumnBins, "_take_column",
                        lambda self, key, i: read_back.append(self._files[key][i].name) or take_column(self, key, i))
    spilled = nsys.parse(_source(name, tmp_path), rules=load_category_rules(cwd=TESTS), keep_raw=True, spill=spill)
    assert isinstance(spilled.events, pl.LazyFrame) and any(spill.iterdir())
    # Through JSON and back, so tuples and lists compare as the stored file does.
    got, want = json.loads(json.dumps(snapshot(spilled))), expected[name]
    for key in want:
        assert got[key] == want[key], f"{name}: {key} differs"
    # the activity went through the files (without steps, cut into bins of start times: the window's files)
    assert any(f.startswith(("activity-", "window-")) for f in read_back)
    assert any(f.startswith("calls-part-") for f in read_back)  # so did the calls
    assert all(f.suffix == ".parquet" for f in spill.iterdir())  # the bins' files removed once read
    spilled, held = with_stragglers(spilled), held_stragglers(name)
    assert spilled.straggler_summary == held.straggler_summary
    assert (spilled.straggler_steps is None) == (held.straggler_steps is None)
    if held.straggler_steps is not None:
        assert spilled.straggler_steps.equals(held.straggler_steps)


@pytest.mark.parametrize("name", ["gpu/fsdp2_2gpu_nsys.sqlite.gz", "gpu/cudagraph/graphs_nsys_node.sqlite.gz",
                                  "realdata/mfu_2gpu_after.sqlite"])
def test_chunked_interval_arithmetic_gives_the_same_numbers(name, expected, tmp_path, monkeypatch):
    """Captures past nsys_anatomy._CHUNK_EVENTS activities are computed in chunks of whole (rank, step) groups;
    with a chunk of 1,000 these exports take dozens of chunks, cut inside ranks."""
    monkeypatch.setattr(nsys_anatomy, "_CHUNK_EVENTS", 1000)
    got, want = _parse(name, tmp_path), expected[name]
    for key in want:
        assert got[key] == want[key], f"{name}: {key} differs"


@pytest.mark.parametrize("seed", range(40))
def test_step_chunks_hold_whole_steps(seed, monkeypatch):
    """The chunker on one process's sorted step codes (all -1 when the capture has no steps): every row in one
    chunk, in order, no step cut across two chunks, and none larger than the chunk size plus one step."""
    rng = random.Random(seed)
    sizes = [rng.randint(1, 25) for _ in range(1 if seed % 5 == 0 else rng.randint(1, 12))]
    code = np.repeat(np.arange(len(sizes), dtype=np.int32) - (1 if seed % 5 == 0 else 0), sizes)
    monkeypatch.setattr(nsys_anatomy, "_CHUNK_EVENTS", rng.randint(1, 40))
    chunks = [(c.start, c.stop) for c in nsys_anatomy.step_chunks(code)]
    assert [lo for lo, _ in chunks] == [0, *(hi for _, hi in chunks[:-1])] and chunks[-1][1] == code.size
    assert all(hi > lo and (hi == code.size or code[hi - 1] != code[hi]) for lo, hi in chunks)
    assert all(hi - lo < nsys_anatomy._CHUNK_EVENTS + max(sizes) for lo, hi in chunks)


if __name__ == "__main__" and sys.argv[1:] in (["--write"], ["--add-missing"]):
    import tempfile
    pinned = json.loads(EXPECTED.read_text()) if sys.argv[1] == "--add-missing" else {}
    with tempfile.TemporaryDirectory() as tmp:
        pinned |= {n: _parse(n, Path(tmp)) for n in EXPORTS if n not in pinned}
    EXPECTED.write_text(json.dumps(dict(sorted(pinned.items())), separators=(",", ":")) + "\n")
    print(f"wrote {EXPECTED}")


@pytest.mark.parametrize("name", ["gpu/fsdp2_2gpu_nsys.sqlite.gz", "gpu/cudagraph/graphs_nsys_node.sqlite.gz",
                                  "gpu/straggler/straggler_plant_nsys.sqlite.gz"])
def test_a_window_without_steps_read_in_bins_of_time_equals_it_read_whole(name, tmp_path, monkeypatch):
    """Read with a step pattern that matches nothing, these exports are one window per rank of overlapping streams
    (FSDP's communication under compute): in bins of 50 activities, activities cut at the bins' ends and carried
    on, every output equals the window read whole, events included."""
    path, rules = _source(name, tmp_path), load_category_rules(cwd=TESTS)
    spill = tmp_path / "spill"
    spill.mkdir()
    carried = []
    pieces = nsys_anatomy.window_pieces

    def counting(bins):
        for columns, counted, until in pieces(bins):
            carried.append(0 if counted is None else int((~counted).sum()))
            yield columns, counted, until

    whole = snapshot(nsys.parse(path, rules=rules, step_pattern=r"^no such range (\d+)$"))
    monkeypatch.setattr(nsys_anatomy, "window_pieces", counting)
    monkeypatch.setattr(nsys_activity, "_GROUP_ACTIVITIES", 50)
    binned = snapshot(nsys.parse(path, rules=rules, step_pattern=r"^no such range (\d+)$", spill=spill))
    assert binned == whole
    assert len(carried) > 20 and (sum(carried) > 0 or "graphs" in name)
