"""CUDA-graph replays in profiler exports, on real captures of one torch.compile
(mode="reduce-overhead") loop on an H200 (tests/data/gpu/cudagraph/README.md):

- nsys --cuda-graph-trace=graph: each replay is one GRAPH_TRACE row and its kernels are absent from the
  kernel table; the replays must count as busy time (category cuda_graph), not as idle;
- nsys --cuda-graph-trace=node: the kernels inside graphs are kernel rows (graphNodeId set), counted once;
- the PyTorch profiler on the same loop.
The steady per-step GPU busy time of the three must agree within 2%, and each export's anatomy says which
mode it used. References are computed here with sqlite3 over the export, not with the project's code.
"""

from __future__ import annotations

import gzip
import shutil
import sqlite3
import statistics
from pathlib import Path

import pytest

from tests.cli_helpers import cli_json
from tests.conftest import GPU_DATA

CG = GPU_DATA / "cudagraph"


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """The three runs' logs, each with its own capture attached (as `receipts ingest RUN_DIR` does)."""
    db = str(tmp_path_factory.mktemp("cg") / "cg.duckdb")
    for run, export in (("graphs_nsys_graph", CG / "graphs_nsys_graph.sqlite.gz"),
                        ("graphs_nsys_node", CG / "graphs_nsys_node.sqlite.gz"),
                        ("graphs_kineto", CG / "graphs_kineto" / "traces")):
        code, out = cli_json(db, "ingest", str(CG / run / "run.log"))
        assert code == 0, out
        code, out = cli_json(db, "ingest", "--attach", run, str(export))
        assert code == 0, out
    return db


@pytest.fixture(scope="module")
def graph_export(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cgsql") / "graph.sqlite"
    with gzip.open(CG / "graphs_nsys_graph.sqlite.gz") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def _anatomy(db: str, run: str) -> dict:
    code, out = cli_json(db, "anatomy", run, "--by", "step")
    assert code == 0, out
    return out


def _steady_busy(anatomy: dict) -> list[float]:
    return [s["gpu_ms"] for s in anatomy["steps"] if not s["warmup"] and s["step"] is not None]


def test_graph_replays_are_busy_time_not_idle(store, graph_export):
    anatomy = _anatomy(store, "graphs_nsys_graph")
    steady = {r["category"]: r["per_step_ms"] for r in anatomy["window"] if r["phase"] == "steady"}
    with sqlite3.connect(graph_export) as con:
        replays, replay_ms = con.execute('SELECT count(*), sum("end" - start) / 1e6 FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE').fetchone()
        kernel_ms = con.execute('SELECT sum("end" - start) / 1e6 FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()[0]
    # The replays hold ~90% of the GPU's work: without them the step looked ~90% idle.
    assert replays == 58 and replay_ms > 8 * kernel_ms
    assert steady["cuda_graph"] > 12.0
    assert steady["cuda_graph"] > 3 * steady["idle"]
    total_graph_ms = sum(r["time_ms"] for r in anatomy["window"] if r["category"] == "cuda_graph")
    # every replay lands in some step (warm-up or steady): none is lost, none counted twice
    assert total_graph_ms == pytest.approx(replay_ms, rel=1e-9)
    notes = " ".join(anatomy["source"]["warnings"])
    assert "--cuda-graph-trace=graph" in notes and "--cuda-graph-trace=node" in notes


def test_node_mode_counts_graph_kernels_once(store):
    anatomy = _anatomy(store, "graphs_nsys_node")
    categories = {r["category"] for r in anatomy["window"]}
    assert "cuda_graph" not in categories and {"gemm", "attention"} <= categories
    assert "--cuda-graph-trace=node" in " ".join(anatomy["source"]["warnings"])


def test_steady_busy_time_agrees_across_graph_node_and_profiler(store):
    medians = {run: statistics.median(_steady_busy(_anatomy(store, run)))
               for run in ("graphs_nsys_graph", "graphs_nsys_node", "graphs_kineto")}
    # ~14.0 ms steps on the GPU (the logs' CUDA-event step times are 14.0-14.1 ms)
    assert all(13.0 < ms < 14.5 for ms in medians.values()), medians
    assert max(medians.values()) / min(medians.values()) - 1 < 0.02, medians


def test_attached_capture_shares_the_log_window(store):
    """One window per receipt: the log marks steps 0-4 warm-up, so the capture's steady steps are 5..29
    (the profile's own first-step rule would have called the 107 ms graph-recording step 1 steady)."""
    anatomy = _anatomy(store, "graphs_nsys_graph")
    steady = sorted(s["step"] for s in anatomy["steps"] if not s["warmup"])
    assert steady == list(range(5, 30))


def test_profile_alone_uses_the_log_warmup_rule(tmp_path):
    """Ingested on its own, an export's window comes from choose_window over its steps: step 0 (compile)
    and step 1 (graph recording) are warm-up, not just the first step."""
    db = str(tmp_path / "alone.duckdb")
    code, out = cli_json(db, "ingest", str(CG / "graphs_nsys_graph.sqlite.gz"), "--run-name", "alone")
    assert code == 0, out
    code, shown = cli_json(db, "show", "alone")
    window = shown["steady_state"]
    assert (window["first_step"], window["last_step"], window["warmup_last_step"]) == (2, 29, 1)
    assert window["window_rule"].startswith("leading-slow")
