"""The planted one-GPU explain corpus (tests/data/explain_corpus, README there): the facts each plant must hold in
the shipped runs, read straight from the exports (sqlite3 and json, standard library), and through receipts' own
parsers; and the shipped store export (what benchmarks/bench_explain_power.py reads) holding these very runs."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import duckdb
import pytest

from cli_helpers import cli, cli_json

CORPUS = Path(__file__).resolve().parent / "data" / "explain_corpus"
RUNS = CORPUS / "runs"
WARMUP = 4          # tests/gpu/explain_corpus.sh's WARMUP: steps 0-3 are the warm-up
STEPS = 20
EXTRA = 4           # gemm4: --extra-matmuls 4
START_STALL_MS = 1.0  # stall1start: --host-stall-ms 1 --host-stall-at start
LOADER_MS = 2.0     # loader: --loader-stall-ms 2


# ---------------------------------------------------------------------------------------- nsys, by sqlite3
class NsysRun:
    """Per `step N` NVTX range: its bounds, the kernels launched inside it (their launch and run times, names)."""

    def __init__(self, path: Path, tmp: Path) -> None:
        db = tmp / (path.parent.name + ".sqlite")
        with gzip.open(path) as src, open(db, "wb") as dst:
            shutil.copyfileobj(src, dst)
        con = sqlite3.connect(db)
        self.steps = {int(text.split()[1]): (start, end) for start, end, text in con.execute(
            "SELECT start, end, text FROM NVTX_EVENTS WHERE text LIKE 'step %' AND eventType = 59")}
        (self.warmup,) = con.execute("SELECT start, end FROM NVTX_EVENTS WHERE text = 'warmup'").fetchall()
        self.kernels = con.execute(
            "SELECT r.start, k.start, k.end, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId) JOIN StringIds s ON s.id = k.demangledName "
            "ORDER BY r.start").fetchall()
        con.close()

    def launched(self, step: int) -> list[tuple[int, int, int, str]]:
        lo, hi = self.steps[step]
        return [k for k in self.kernels if lo <= k[0] <= hi]

    def calls(self, step: int) -> Counter:
        return Counter(k[3] for k in self.launched(step))


@pytest.fixture(scope="session")
def nsys(tmp_path_factory) -> dict[str, NsysRun]:
    tmp = tmp_path_factory.mktemp("nsys_corpus")
    return {d.name.split("_", 1)[1]: NsysRun(d / "profile.sqlite.gz", tmp) for d in sorted(RUNS.glob("nsys_*"))}


STEADY = range(WARMUP, STEPS)


def test_every_step_is_an_nvtx_range_and_the_warmup_is_marked(nsys):
    for run in nsys.values():
        assert sorted(run.steps) == list(range(STEPS))
        lo, hi = run.warmup
        assert all(lo <= run.steps[n][0] and run.steps[n][1] <= hi for n in range(WARMUP))
        assert run.steps[WARMUP][0] > hi


def _extra_calls(plant: Counter, base: Counter) -> Counter:
    return Counter({k: plant[k] - base[k] for k in plant.keys() | base.keys() if plant[k] != base[k]})


def test_nsys_gemm4_launches_four_more_gemm_calls_in_every_steady_step(nsys):
    base, plant = nsys["base_1"], nsys["gemm4"]
    extras = [_extra_calls(plant.calls(n), base.calls(n)) for n in STEADY]
    (kernel, added), = extras[0].items()
    assert added == EXTRA and "gemm" in kernel.lower() or "nvjet" in kernel
    assert all(e == Counter({kernel: EXTRA}) for e in extras)


def test_nsys_start_stall_lies_inside_the_step_range_and_outside_its_gpu_span(nsys):
    for n in STEADY:
        lo, hi = nsys["stall1start"].steps[n]
        launches = nsys["stall1start"].launched(n)
        first_launch, gpu_start, gpu_end = launches[0][0], min(k[1] for k in launches), max(k[2] for k in launches)
        assert lo < first_launch < hi and gpu_start < gpu_end <= hi  # the loss read waits for the GPU: span in range
        assert (first_launch - lo) / 1e6 >= START_STALL_MS         # the sleep: before the first launch
        assert (gpu_start - lo) / 1e6 >= START_STALL_MS             # so outside the GPU span
        b_lo, _ = nsys["base_1"].steps[n]
        assert (nsys["base_1"].launched(n)[0][0] - b_lo) / 1e6 < START_STALL_MS  # the baseline's own prologue


def test_nsys_loader_stall_lies_between_step_ranges_with_the_gpu_idle(nsys):
    for run, least in (("loader", LOADER_MS), ("base_1", 0.0)):
        r = nsys[run]
        for n in STEADY[:-1]:
            end, nxt = r.steps[n][1], r.steps[n + 1][0]
            gap = (nxt - end) / 1e6
            if run == "base_1":
                assert gap < LOADER_MS / 2
                continue
            assert gap >= least
            gpu_end = max(k[2] for k in r.launched(n))
            gpu_next = min(k[1] for k in r.launched(n + 1))
            assert (gpu_next - gpu_end) / 1e6 >= least  # nothing ran on the GPU through the stall


# ---------------------------------------------------------------------------------------- Kineto, by json
class KinetoRun:
    """Per ProfilerStep#N: its window, and the GPU activities whose launch falls inside it."""

    def __init__(self, folder: Path) -> None:
        (path,) = folder.glob("*.pt.trace.json.gz")
        with gzip.open(path, "rt") as f:
            events = json.load(f)["traceEvents"]
        self.steps = {int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"]) for e in events
                      if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"}
        launches = {e["args"]["correlation"]: e["ts"] for e in events  # cuBLASLt launches through the driver
                    if e.get("cat") in ("cuda_runtime", "cuda_driver")}
        self.kernels = sorted((launches[e["args"]["correlation"]], e["ts"], e["ts"] + e["dur"], e["name"])
                              for e in events if e.get("cat") == "kernel" and e["args"]["correlation"] in launches)

    def launched(self, step: int) -> list:
        lo, hi = self.steps[step]
        return [k for k in self.kernels if lo <= k[0] <= hi]

    def calls(self, step: int) -> Counter:
        return Counter(k[3] for k in self.launched(step))


@pytest.fixture(scope="session")
def kineto() -> dict[str, KinetoRun]:
    return {d.name.split("_", 1)[1]: KinetoRun(d) for d in sorted(RUNS.glob("kineto_*"))}


def test_kineto_records_every_step_but_the_first_numbered_as_the_recorder(kineto):
    for run in kineto.values():
        assert sorted(run.steps) == list(range(1, STEPS))  # warm-up steps 1-3 included, marked by the receipt


def test_kineto_gemm4_launches_four_more_gemm_calls_in_every_steady_step(kineto):
    extras = [_extra_calls(kineto["gemm4"].calls(n), kineto["base_1"].calls(n)) for n in STEADY]
    (kernel, added), = extras[0].items()
    assert added == EXTRA and "nvjet" in kernel
    assert all(e == Counter({kernel: EXTRA}) for e in extras)


def _prologues_ms(run: KinetoRun) -> list[float]:
    """Per steady step, ms from the ProfilerStep's start to its first launch."""
    return [(run.launched(n)[0][0] - run.steps[n][0]) / 1e3 for n in STEADY]


def test_kineto_start_stall_comes_before_the_steps_first_launch(kineto):
    """Under Kineto the step starts at prof.step(), before the recorder's range: the baseline's prologue to its first
    launch is already ~1 ms (the profiler's own bookkeeping), and the stall adds its 1 ms to every step's."""
    stalled, base = _prologues_ms(kineto["stall1start"]), _prologues_ms(kineto["base_1"])
    assert min(stalled) >= START_STALL_MS
    assert sorted(stalled)[len(stalled) // 2] - sorted(base)[len(base) // 2] >= 0.75 * START_STALL_MS


# ---------------------------------------------------------------------------------------- the shipped store
@pytest.fixture(scope="session")
def export() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute(f"IMPORT DATABASE '{CORPUS / 'store'}'")
    return con


def test_the_store_export_holds_every_run_of_the_corpus_tagged_by_profiler(export):
    rows = export.execute("SELECT run_name, tags_json FROM receipts WHERE superseded_by IS NULL").fetchall()
    tags = {name: set(json.loads(t)) for name, t in rows}
    for prof, bases in (("nsys", 7), ("kineto", 6)):
        assert sum(f"aa-{prof}" in t for t in tags.values()) == bases
        assert sum(f"plant-{prof}" in t for t in tags.values()) == 12
    with_components = export.execute("SELECT count(DISTINCT receipt_id) FROM receipt_components").fetchone()[0]
    assert len(tags) == 37 and with_components == 37


def test_the_shipped_runs_are_the_export_s_runs(export):
    """Each shipped run's receipt is its run.log (the id is the log's sha256 prefix), and an nsys run's attached
    export is the same file."""
    for folder in sorted(RUNS.iterdir()):
        log_sha = hashlib.sha256((folder / "run.log").read_bytes()).hexdigest()
        (rid,) = export.execute("SELECT id FROM receipts WHERE run_name = ?", [folder.name]).fetchone()
        assert log_sha.startswith(rid)
        sources = {r[0] for r in export.execute("SELECT sha256 FROM receipt_sources WHERE receipt_id = ?",
                                                [rid]).fetchall()}
        assert log_sha in sources and len(sources) == 2
        if folder.name.startswith("nsys_"):
            assert hashlib.sha256((folder / "profile.sqlite.gz").read_bytes()).hexdigest() in sources


@pytest.mark.parametrize("prof", ["nsys", "kineto"])
def test_the_export_s_anatomy_holds_four_more_gemm_calls_in_every_steady_step(export, prof):
    """What receipts' own parsers stored (anatomy_step_kernels) holds the plant: one GEMM kernel with 4 more calls
    in each steady step of gemm4 than of the first baseline run, every other kernel's calls the same."""
    def calls(run: str) -> dict[int, Counter]:
        out: dict[int, Counter] = {}
        for step, name, n in export.execute(
                "SELECT k.step, k.name, k.calls FROM anatomy_step_kernels k JOIN receipts r ON r.id = k.receipt_id "
                "JOIN anatomy_steps s USING (receipt_id, step, rank) WHERE r.run_name = ? AND NOT s.warmup",
                [f"{prof}_{run}"]).fetchall():
            out.setdefault(step, Counter())[name] += n
        return out
    base, plant = calls("base_1"), calls("gemm4")
    assert sorted(plant) == sorted(base) == list(range(WARMUP, STEPS))
    extras = {n: _extra_calls(plant[n], base[n]) for n in plant}
    assert all(len(e) == 1 and list(e.values()) == [EXTRA] and "nvjet" in next(iter(e)) for e in extras.values())


@pytest.fixture(scope="session")
def subset_store(tmp_path_factory) -> duckdb.DuckDBPyConnection:
    """The 7 shipped runs ingested by this build, as benchmarks/bench_explain_power.py --raw ingests them."""
    db = str(tmp_path_factory.mktemp("corpus_subset") / "subset.duckdb")
    for prof in ("nsys", "kineto"):
        for kind, tag in (("base", f"aa-{prof}"), ("plant", f"plant-{prof}")):
            dirs = [str(d) for d in sorted(RUNS.glob(f"{prof}_*")) if d.name.startswith(f"{prof}_base") == (kind == "base")]
            assert cli(db, "ingest", "--tag", tag, *dirs).exit_code == 0
    return duckdb.connect(db, read_only=True)


@pytest.mark.slow
@pytest.mark.parametrize("table", ["anatomy_steps", "anatomy_rows", "anatomy_step_kernels", "anatomy_kernels",
                                   "anatomy_kernel_shapes", "anatomy_gaps"])
def test_the_export_is_what_this_build_makes_of_the_shipped_runs(export, subset_store, table):
    """The export's anatomy of each shipped run equals this build's ingest of the same files: when the parsers change
    what they store, this says the export must be made again (README: --raw ... --write-export)."""
    cols = [r[0] for r in subset_store.execute(f"DESCRIBE {table}").fetchall() if r[0] not in ("source_sha256",)]
    query = f"SELECT {', '.join(cols)} FROM {table} WHERE receipt_id = ? ORDER BY ALL"
    for (rid,) in subset_store.execute("SELECT id FROM receipts").fetchall():
        mine, shipped = (con.execute(query, [rid]).fetchall() for con in (subset_store, export))
        assert mine and mine == shipped


@pytest.fixture(scope="session")
def corpus_store(tmp_path_factory) -> str:
    """The whole corpus as benchmarks/bench_explain_power.py reads it: the export imported, then `db upgrade`."""
    db = str(tmp_path_factory.mktemp("corpus_store") / "corpus.duckdb")
    con = duckdb.connect(db)
    con.execute(f"IMPORT DATABASE '{CORPUS / 'store'}'")
    con.close()
    assert cli(db, "db", "upgrade").exit_code == 0
    return db


@pytest.mark.slow
@pytest.mark.parametrize("prof", ["nsys", "kineto"])
def test_explain_names_the_sixteen_added_gemm_calls_first_among_kernels(corpus_store, prof):
    """`receipts explain` of the +16 GEMM plant against its profiler's baselines: the first kernel named is the GEMM
    kernel the plant launches, 16 more calls per step."""
    code, out = cli_json(corpus_store, "explain", f"{prof}_gemm16", "--against", f"tag:aa-{prof}", "--last", "50")
    assert code == 0 and out["refused"] is None
    kernels = [c for c in out["components"] if c["level"] == "kernel" and c["verdict"] == "changed"]
    assert kernels[0]["name"].startswith("nvjet") and kernels[0]["calls_delta_per_step"] == pytest.approx(16.0)
    # one launch shape, the model's calls' too (a persistent kernel): the 16 added calls are priced at the shape's
    # change per added call, the 4096³ GEMM's own ~0.18 ms, not at the shape's mean (0.26 ms with them)
    (shape,) = kernels[0]["shapes"]
    assert shape["shape"] == "grid (2,66,1) block (384,1,1)" and not shape["new"]
    assert shape["calls_delta_per_step"] == pytest.approx(16.0) and 0.15 < shape["ms_per_call"] < 0.21
    assert kernels[0]["more_calls_ms_per_step"] == pytest.approx(kernels[0]["delta_ms_per_step"])
    text = cli(corpus_store, "explain", f"{prof}_gemm16", "--against", f"tag:aa-{prof}", "--last", "50").output
    assert "+16 calls of grid (2,66,1) block (384,1,1) at 0.1" in " ".join(text.split())


# ---------------------------------------------------------------------------------------- host time, from the store
def _category_steps(export: duckdb.DuckDBPyConnection, run: str):
    """Per steady step and category (host_gap, between_steps included): what the explain components are the
    medians of, from the rows receipts' parsers stored for `run`."""
    import polars as pl

    from receipts.analysis import components as comp

    (rid,) = export.execute("SELECT id FROM receipts WHERE run_name = ?", [run]).fetchone()
    rows = export.execute("SELECT rank, step, category, time_ms, warmup FROM anatomy_rows WHERE receipt_id = ?",
                          [rid]).pl()
    steps = export.execute("SELECT rank, step, wall_ms, warmup, start_ns FROM anatomy_steps WHERE receipt_id = ?",
                           [rid]).pl()
    per_step = comp.category_steps(rows, steps)
    wall = (steps.filter(~pl.col("warmup")).group_by("step").agg(pl.col("wall_ms").mean()))
    return per_step, wall


def _median(per_step, category: str) -> float:
    import polars as pl

    return float(per_step.filter(pl.col("category") == category)["ms"].median())


@pytest.mark.parametrize("prof", ["nsys", "kineto"])
def test_a_step_range_is_its_parts_plus_a_host_gap_that_holds_the_start_stall(export, prof):
    """Under both profilers the step's range (the `step N` range; the ProfilerStep) is its GPU span's parts plus the
    host gap, the span inside the range (the loss read waits for the GPU at each step's end, so no host gap is
    negative), and the 1 ms sleep before the first launch is host gap."""
    import numpy as np
    import polars as pl

    from receipts.schema.categories import STEP_PARTS

    gaps = {}
    for run in (f"{prof}_base_1", f"{prof}_stall1start"):
        per_step, wall = _category_steps(export, run)
        parts = per_step.filter(pl.col("category").is_in(STEP_PARTS)).group_by("step").agg(pl.col("ms").sum())
        joined = parts.join(wall, on="step")
        assert joined.height == STEPS - WARMUP and np.allclose(joined["ms"], joined["wall_ms"], atol=1e-6)
        assert per_step.filter(pl.col("category") == "host_gap")["ms"].min() > -0.01
        gaps[run] = _median(per_step, "host_gap")
    assert gaps[f"{prof}_stall1start"] - gaps[f"{prof}_base_1"] >= 0.75 * START_STALL_MS


@pytest.mark.parametrize("prof", ["nsys", "kineto"])
def test_a_mid_step_stall_is_idle_in_one_long_gap(export, prof):
    """stall05 / stall1 / stall3 synchronize, then sleep: the GPU waits in one gap a little longer than the sleep
    (the next launch's latency added), so idle_long (idle in gaps of 0.5 ms or more) holds at least the sleep per
    step, and the short-gap idle keeps its launch-bound stretches. The baselines' idle is gaps shorter than 0.5 ms
    (idle_long 0 in the median step) in every nsys run and in five of the six Kineto runs; the sixth
    (kineto_base_6) has the profiler's own pauses near the step's end, 1-2.6 ms long, in most steps."""
    stalls = {"stall05": 0.5, "stall1": 1.0, "stall3": 3.0}
    for plant, ms in stalls.items():
        per_step, _ = _category_steps(export, f"{prof}_{plant}")
        assert ms <= _median(per_step, "idle_long") <= ms + 1.0, plant
    bases = [r for (r,) in export.execute("SELECT run_name FROM receipts WHERE run_name LIKE ? ORDER BY run_name",
                                          [f"{prof}_base_%"]).fetchall()]
    held = {r: _median(_category_steps(export, r)[0], "idle_long") for r in bases}
    assert sum(v == 0.0 for v in held.values()) == (len(bases) if prof == "nsys" else len(bases) - 1), held


def test_every_step_s_long_gaps_sum_to_its_idle_long(export):
    """anatomy_gaps places every gap idle_long sums: per rank-step of every run of both profilers, the same time."""
    rows = export.execute("""
        SELECT r.run_name, a.step, a.time_ms, coalesce(g.ms, 0.0), coalesce(g.n, 0)
        FROM anatomy_rows a JOIN receipts r ON r.id = a.receipt_id
        LEFT JOIN (SELECT receipt_id, source_sha256, rank, step, sum(gap_ms) AS ms, count(*) AS n FROM anatomy_gaps
                   GROUP BY ALL) g USING (receipt_id, source_sha256, rank, step)
        WHERE a.category = 'idle_long'""").fetchall()
    assert len(rows) > 37 * 15 and sum(r[4] for r in rows) > 37
    assert all(abs(held - placed) < 1e-9 for _, _, held, placed, _ in rows)


def _gap_share(export: duckdb.DuckDBPyConnection, run: str) -> dict[tuple[str, int], float]:
    """Per place (after, call), the share of the run's steady steps with a long gap there."""
    rows = export.execute("""
        SELECT g.after, g.call, count(*) / any_value(n.steps)
        FROM anatomy_gaps g JOIN receipts r ON r.id = g.receipt_id
        JOIN anatomy_steps s USING (receipt_id, source_sha256, rank, step)
        JOIN (SELECT receipt_id, count(*) AS steps FROM anatomy_steps WHERE NOT warmup GROUP BY ALL) n USING (receipt_id)
        WHERE r.run_name = ? AND NOT s.warmup GROUP BY ALL""", [run]).fetchall()
    return {(after, call): share for after, call, share in rows}


@pytest.mark.parametrize("prof", ["nsys", "kineto"])
def test_a_mid_step_stall_is_one_place_in_every_steady_step_and_no_baseline_step(export, prof):
    """The planted stall sleeps right after the loss: its gap follows the first nll_loss kernel of every steady step,
    in both profilers' spelling of its name; no baseline run has a gap there in any steady step. kineto_base_6's
    pauses lie elsewhere (after the optimizer's multi_tensor_apply #1) and in some steps only: what the gap level
    tells apart where idle_long, a sum per step, cannot."""
    for plant in ("stall05", "stall1", "stall3"):
        share = _gap_share(export, f"{prof}_{plant}")
        stalled = [place for place, s in share.items() if "nll_loss" in (place[0] or "") and place[1] == 1]
        assert len(stalled) == 1 and share[stalled[0]] == 1.0, (plant, share)
    bases = [r for (r,) in export.execute("SELECT run_name FROM receipts WHERE run_name LIKE ?",
                                          [f"{prof}_base_%"]).fetchall()]
    for run in bases:
        share = _gap_share(export, run)
        assert not any("nll_loss" in (after or "") for after, _ in share) and all(s < 1.0 for s in share.values())


@pytest.mark.slow
@pytest.mark.parametrize("plant", ["stall05", "stall1"])
def test_explain_names_a_kineto_stall_at_its_place_where_idle_long_is_inconclusive(corpus_store, plant):
    """Under Kineto one baseline run's pauses make idle_long's run-to-run noise ~0.5 ms, so a 0.5 or 1 ms stall in
    idle_long alone is inconclusive; at its place it is a fact (a gap there in every steady step of the candidate, in
    none of any baseline run's) and named first, with the time the stall took."""
    code, out = cli_json(corpus_store, "explain", f"kineto_{plant}", "--against", "tag:aa-kineto", "--last", "50")
    assert code == 0 and out["refused"] is None
    changed = [c for c in out["components"] if c["verdict"] == "changed"]
    first = changed[0]
    assert first["level"] == "gap" and "nll_loss" in first["name"] and first["name"].endswith(" #1")
    assert first["evidence"] == "structural" and first["presence"] == "appeared"
    assert (first["baseline_calls_per_step"], first["candidate_calls_per_step"]) == (0.0, 1.0)
    slept = {"stall05": 0.5, "stall1": 1.0}[plant]
    assert slept <= first["delta_ms_per_step"] <= slept + 0.5
    idle_long = next(c for c in out["components"] if c["name"] == "idle_long")
    assert idle_long["verdict"] == "inconclusive"
    text = " ".join(cli(corpus_store, "explain", f"kineto_{plant}", "--against", "tag:aa-kineto", "--last", "50")
                    .output.split())
    assert "nll_loss_forward_reduce_cuda_kernel_2d<...> #1" in text
    assert "a gap there in 0% -> 100% of steps in every run (a fact)" in text


@pytest.mark.slow
def test_anatomy_by_gap_lists_the_stall_s_place_in_every_step_and_a_baseline_s_pauses_in_some(corpus_store):
    """`receipts anatomy --by gap`: the long gaps by place over the steady steps, largest first; the stall run's one
    place in every step, kineto_base_6's pauses at several places in some; the JSON report carries them."""
    import csv
    import io

    def rows(run: str) -> list[dict]:
        done = cli(corpus_store, "anatomy", run, "--by", "gap", "--format", "csv")
        assert done.exit_code == 0, done.output
        return list(csv.DictReader(io.StringIO(done.output)))

    stalled = rows("kineto_stall05")
    assert "nll_loss_forward_reduce_cuda_kernel_2d" in stalled[0]["place"] and stalled[0]["place"].endswith(" #1")
    assert float(stalled[0]["share_pct"]) == 100.0 and 0.5 <= float(stalled[0]["ms_per_step"]) <= 1.0
    paused = rows("kineto_base_6")
    assert len(paused) > 3 and all(float(r["share_pct"]) < 100.0 for r in paused)
    assert "multi_tensor_apply_kernel" in paused[0]["place"]
    table = cli(corpus_store, "anatomy", "kineto_stall05", "--by", "gap", "--format", "table").output
    assert "16/16" in table and "nll_loss_forwa" in table and max(map(len, table.splitlines())) <= 80
    code, report = cli_json(corpus_store, "anatomy", "kineto_stall05", "--json")
    assert code == 0 and report["gaps"][0]["place"] == stalled[0]["place"]
    assert "no GPU gap of 0.5 ms or more" in " ".join(
        cli(corpus_store, "anatomy", "nsys_base_1", "--by", "gap", "--format", "table").output.split())


def test_the_loader_stall_is_time_between_steps_under_nsys_and_host_gap_under_kineto(export):
    """nsys: the sleep lies between one `step N` range and the next (between_steps), the step range untouched;
    Kineto: a ProfilerStep runs from one prof.step() to the next, so the sleep is inside it, before the first
    launch (host gap), and nothing lies between steps."""
    nsys_loader, _ = _category_steps(export, "nsys_loader")
    nsys_base, _ = _category_steps(export, "nsys_base_1")
    assert _median(nsys_loader, "between_steps") >= LOADER_MS > 4 * _median(nsys_base, "between_steps")
    assert abs(_median(nsys_loader, "host_gap") - _median(nsys_base, "host_gap")) < 0.1 * LOADER_MS
    kineto_loader, _ = _category_steps(export, "kineto_loader")
    kineto_base, _ = _category_steps(export, "kineto_base_1")
    assert _median(kineto_loader, "host_gap") - _median(kineto_base, "host_gap") >= 0.75 * LOADER_MS
    assert max(_median(kineto_loader, "between_steps"), _median(kineto_base, "between_steps")) < 0.1 * LOADER_MS


@pytest.mark.slow
def test_explain_names_the_loader_stall_and_says_the_period_moved_while_the_step_did_not(corpus_store):
    code, out = cli_json(corpus_store, "explain", "nsys_loader", "--against", "tag:aa-nsys", "--last", "50")
    assert code == 0 and out["verdict"] not in ("slower", "faster")
    first = next(c for c in out["components"] if c["verdict"] == "changed" and c["level"] == "category")
    assert first["name"] == "between_steps" and first["delta_ms_per_step"] >= LOADER_MS
    assert "step-to-step period moved" in out["period_note"] and "did not" in out["period_note"]
    text = cli(corpus_store, "explain", "nsys_loader", "--against", "tag:aa-nsys", "--last", "50").output
    assert "period: the step-to-step period moved" in text and max(map(len, text.splitlines())) <= 80
