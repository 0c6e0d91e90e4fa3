"""The store and helpers the dashboard's AppTest suites share (tests/test_dashboard_apptest.py,
tests/test_dashboard_views.py): a store of real ingested data, and the app driven headlessly.

The store holds the two modded-nanogpt track_1_short speedrun logs (same identity flags: comparable),
a real log under another host lineage (refused against them), a rumor (no launch regime), and the
nsys export mfu_2gpu_before.sqlite attached to the first log for the anatomy view.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

REALDATA = Path(__file__).resolve().parents[2] / "shared" / "realdata"
APP = Path(__file__).resolve().parents[1] / "dashboards" / "app.py"
SOAP = REALDATA / "logs" / "track_1_short_2024-10-09_SOAP__5bdc3988-496c-4232-b4ef-53764cb81c92.txt"
YARN = REALDATA / "logs" / "track_1_short_2025-09-10_Yarn__ef66c943-e262-400f-822f-068d397a1dc9.txt"
NANOCHAT = REALDATA / "logs" / "sft_run_gtx1660.log"
NSYS = REALDATA / "nsys" / "mfu_2gpu_before.sqlite"
NSYS_AFTER = REALDATA / "nsys" / "mfu_2gpu_after.sqlite"
TOPO = REALDATA / "sysinfo" / "modded-nanogpt__track_1_short_2024-10-09_SOAP__nvidia-smi.txt"

HOST, PRESET, REGIME = "modded-nanogpt-h100x8", "gpt2-124m-speedrun", "ddp/full-compile"
OTHER_HOST = "gtx1660-desk"


def _speedrun_steps(path: Path) -> list[tuple[int, float]]:
    """(step, step_ms) from modded-nanogpt's cumulative `train_time:` (the clock starts after step 10)."""
    rx = re.compile(r"^step:(\d+)/\d+ (?:train_loss:\S+ )?train_time:(\d+)ms")
    out, prev = [], None
    for line in path.read_text(errors="replace").splitlines():
        m = rx.match(line)
        if m:
            step, t = int(m.group(1)), float(m.group(2))
            if prev is not None and t > prev:
                out.append((step, t - prev))
            prev = t
    return out


def _native_log(path: Path, steps: list[tuple[int, float]], *, host: str | None, preset: str | None,
                regime: str | None, run_name: str, extra_header: dict | None = None,
                memory: list[tuple[int, int]] | None = None, peak: tuple[int, int] | None = None) -> Path:
    header = {"v": 1, "kind": "header", "run_name": run_name, "hostname": host,
              "identity": {k: v for k, v in (("host_lineage", host), ("preset", preset), ("regime", regime)) if v},
              "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "world_size": 8, **(extra_header or {})}
    lines = ["RECEIPT " + json.dumps(header)]
    for i, (step, ms) in enumerate(steps):
        rec = {"v": 1, "kind": "step", "step": step, "rank": 0, "step_ms": ms, "tokens_per_s": 393216 / ms * 1e3}
        if memory:
            rec["allocated_bytes"], rec["reserved_bytes"] = memory[i]
        lines.append("RECEIPT " + json.dumps(rec))
    peak = max(memory) if memory else peak or (36 << 30, 41 << 30)
    lines.append("RECEIPT " + json.dumps({"v": 1, "kind": "footer", "rank": 0, "peak_allocated_bytes": peak[0],
                                          "peak_reserved_bytes": peak[1]}))
    path.write_text("\n".join(lines) + "\n")
    return path


def build_store(db: Path, work: Path) -> dict[str, str]:
    """Ingest the real data into a fresh DuckDB store; returns receipt ids by role."""
    from receipts.pipeline import ingest_paths
    from receipts.schema.model import IdentityClaim
    from receipts.schema.registry import load_registry
    from receipts.store import open_store

    if not SOAP.exists():
        pytest.skip(f"real data not present: {SOAP}")
    work.mkdir(parents=True, exist_ok=True)
    registry = load_registry(None)
    claim = IdentityClaim(HOST, PRESET, REGIME)
    ids: dict[str, str] = {}
    with open_store(db) as store:
        def one(paths, **kw) -> str:
            return ingest_paths(store, list(paths), registry=registry, **kw)[0].receipt_id

        ids["a"] = one([SOAP], identity=claim, run_name="soap", tags=("v24",))
        ids["b"] = one([YARN], identity=claim, run_name="yarn", tags=("v25",))
        ids["other"] = one([NANOCHAT], identity=IdentityClaim(OTHER_HOST, PRESET, REGIME), run_name="gtx1660")
        # A rumor: no launch regime claimed. Memory per step with a reserved-allocated gap that grows while
        # allocated stays flat (allocator fragmentation), and a topology with one GPU pair on SYS.
        soap = _speedrun_steps(SOAP)[:400]
        mem = [(30 << 30, (32 << 30) + i * (16 << 20)) for i in range(len(soap))]
        gpus = [f"GPU{i}" for i in range(4)]
        matrix = {a: {b: "X" if a == b else ("SYS" if {a, b} == {"GPU0", "GPU3"} else "NV18") for b in gpus}
                  for a in gpus}
        extra = {"env": {"NCCL_ALGO": "Ring", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                         "NCCL_P2P_DISABLE": None, "CUDA_DEVICE_MAX_CONNECTIONS": None},
                 "software": {"torch": "2.6.0+cu126", "cuda": "12.6", "nccl": "2.21.5"},
                 "topology": {"devices": gpus, "matrix": matrix},
                 "started_at": "2025-10-01", "git_rev": "074a19767e46", "command": "torchrun --nproc_per_node=8 train.py"}
        ids["rumor"] = one([_native_log(work / "rumor.log", soap, host=HOST, preset=PRESET, regime=None,
                                        run_name="rumor-fragmenting", extra_header=extra, memory=mem)],
                           run_name="rumor-fragmenting")
        # Exports of another (2-GPU) run on these 8-GPU logs: the attach check refuses them; forced here so the
        # views have real anatomy to draw.
        ingest_paths(store, [NSYS], registry=registry, attach=ids["a"], force=True)
        ingest_paths(store, [NSYS_AFTER], registry=registry, attach=ids["b"], force=True)  # anatomy on both sides
    return ids


@pytest.fixture(scope="module")
def store_ids(tmp_path_factory) -> tuple[str, dict[str, str]]:
    root = tmp_path_factory.mktemp("dash")
    db = root / "receipts.duckdb"
    return str(db), build_store(db, root / "logs")


def _app(db: str, monkeypatch, **query):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("RECEIPTS_DB", db)
    at = AppTest.from_file(str(APP), default_timeout=60)
    for k, v in query.items():
        at.query_params[k] = v
    return at.run()


def _texts(at) -> str:
    parts = [e.value for e in at.markdown] + [e.value for e in at.caption] + [e.value for e in at.title]
    parts += [e.value for e in at.header] + [e.value for e in at.subheader]
    parts += [e.value for e in at.error] + [e.value for e in at.warning] + [e.value for e in at.info]
    parts += [e.value for e in at.success]
    return "\n".join(map(str, parts))


def _charts(at) -> list:
    return at.get("vega_lite_chart")


def _no_exception(at) -> None:
    assert not at.exception, [e.value for e in at.exception]
