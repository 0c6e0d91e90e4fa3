"""A profile's step window on real captures: the tail and warm-up rules judge a step against the steady steps
only, a last step with no GPU work is never steady, and a window with too few steady steps says so."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path

import polars as pl
from conftest import GPU_DATA, realdata

from receipts.analysis.at_ingest import receipt_from_anatomy
from receipts.analysis.window import choose_window
from receipts.pipeline import parse_profile
from receipts.schema.categories import load_category_rules
from tests.cli_helpers import cli_json


def test_a_full_last_step_is_not_cut_short_by_the_graph_capture_step():
    """The real CUDA-graph node export (tests/data/gpu/cudagraph), its first five steps as a capture of steps 0..4
    would hold them: step 0 compiles (131.6 ms of GPU work), steps 2..4 are full steps of 338 kernels and
    ~13.14 ms busy like every later one. Judged against the largest step (compile included) step 4 fell under
    10 % of 131.6 ms and was dropped as cut short; against the steady steps it is one of them."""
    anatomy = parse_profile(GPU_DATA / "cudagraph" / "graphs_nsys_node.sqlite.gz", "nsys-gz", load_category_rules(), False)
    first_five = replace(anatomy, steps=anatomy.steps.filter(pl.col("step") <= 4))
    busy = first_five.steps.sort("step")["gpu_ms"].to_list()
    assert busy[0] > 130 and all(13.1 < ms < 13.2 for ms in busy[1:])
    assert first_five.steps.filter(pl.col("step") >= 2)["kernels"].to_list() == [338, 338, 338]
    parsed = receipt_from_anatomy(first_five)
    assert parsed.tail_step is None
    window = choose_window(parsed.steps, parsed.phases, tail=parsed.tail_step)
    assert (window.first_step, window.last_step, window.warmup_last_step) == (2, 4, 1)


def _without_gpu_work_in_step(src: Path, dst: Path, step: int) -> None:
    """A real trace with every GPU activity of ProfilerStep#`step` removed: those launched inside the step (the
    launch's correlation id) and those without a launch record that start inside it."""
    with gzip.open(src) as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    marker = next(e for e in events if e.get("name") == f"ProfilerStep#{step}" and e.get("cat") in ("cpu_op", "user_annotation"))
    start, end = marker["ts"], marker["ts"] + marker["dur"]
    launched = {e["args"]["correlation"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and start <= e.get("ts", -1) < end and "correlation" in e.get("args", {})}
    all_launches = {e["args"]["correlation"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                    and "correlation" in e.get("args", {})}

    def in_step(e: dict) -> bool:
        corr = e.get("args", {}).get("correlation")
        return corr in launched or (corr not in all_launches and start <= e["ts"] < end)

    gpu = ("kernel", "gpu_memcpy", "gpu_memset")
    kept = [e for e in events if not (e.get("cat") in gpu and in_step(e))]
    assert len(events) - len(kept) > 100  # the step had GPU work of its own
    trace["traceEvents"] = kept
    dst.write_text(json.dumps(trace))


def test_a_last_step_without_gpu_work_is_never_steady(tmp_path):
    """A two-step trace whose second step has no GPU work (HTA's real trace_filter rank 0, step 552's GPU
    activities removed): the steady median was the mean of the real step and the empty one. The empty step is
    not steady whatever the number of steps, and a window of one steady step says so."""
    path = tmp_path / "rank0.pt.trace.json"
    _without_gpu_work_in_step(realdata("kineto", "trace_filter__sampled_rank-0.json.gz"), path, 552)
    anatomy = parse_profile(path, "kineto", load_category_rules(), False)
    gpu_ms = dict(anatomy.steps.select("step", "gpu_ms").iter_rows())
    assert gpu_ms[551] > 200 and not gpu_ms.get(552)
    db = str(tmp_path / "w.duckdb")
    code, out = cli_json(db, "ingest", str(path), "--run-name", "empty_tail")
    assert code == 0, out
    code, shown = cli_json(db, "show", "empty_tail")
    steady = shown["steady_state"]
    assert (steady["first_step"], steady["last_step"], steady["n_steps"]) == (551, 551, 1)
    wall_551 = anatomy.steps.filter(pl.col("step") == 551)["wall_ms"].item()
    assert steady["median_step_ms"] == wall_551
    assert steady["window_rule"].endswith("+cut-short-tail")
    warnings = " ".join(shown["source"]["warnings"] if "source" in shown else shown.get("warnings", []))
    assert "1 steady step" in warnings, shown
