"""Regenerates the example RECEIPT logs beside this file (deterministic: fixed seeds).

    .venv/bin/python examples/claims/receipts/make_receipts.py

Synthetic on purpose and small: each shows one thing a claim can get wrong. Real logs are exercised
by tests/test_gate.py and, when ../shared/realdata is present, by .ci/gate_examples.sh.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
GIB = 2**30
LANE = {"host_lineage": "h200-usw1c-bench-01", "preset": "nam52_h200_dense_ref_v1", "regime": "fsdp2/regional-compile"}
BASE_ENV = {"NCCL_ALGO": None, "PYTORCH_ALLOC_CONF": None}


def write(name: str, step_ms, *, identity=LANE, env=BASE_ENV, peaks=(40 * GIB, 48 * GIB)) -> None:
    header = {"v": 1, "kind": "header", "identity": identity, "hostname": "h200-usw1c-bench-01", "run_name": name,
              "gpu_model": "NVIDIA H200", "gpu_count": 8, "world_size": 8, "env": env}
    lines = ["RECEIPT " + json.dumps(header),
             "RECEIPT " + json.dumps({"v": 1, "kind": "phase", "phase": "compile", "first_step": 1, "last_step": 2})]
    lines += ["RECEIPT " + json.dumps({"v": 1, "kind": "step", "step": i, "rank": 0, "step_ms": round(float(ms), 2),
                                       "tokens_per_s": round(8 * 4096 * 1000 / ms, 1)})
              for i, ms in enumerate(step_ms, start=1)]
    lines.append("RECEIPT " + json.dumps({"v": 1, "kind": "footer", "rank": 0, "peak_allocated_bytes": peaks[0],
                                          "peak_reserved_bytes": peaks[1], "exit_code": 0}))
    (HERE / f"{name}.log").write_text("\n".join(lines) + "\n")


def series(mean: float, seed: int, n: int = 62, cv: float = 0.01) -> list[float]:
    x = np.random.default_rng(seed).normal(mean, mean * cv, n)
    x[:2] = mean * 20  # the compile steps the phase marker excludes
    return list(x)


def main() -> None:
    write("baseline", series(200.0, 1))
    write("fused_conv", series(170.0, 2))                       # 200/170 = 1.176x faster
    write("allocator_overlay", series(200.0, 3), env=BASE_ENV | {"PYTORCH_ALLOC_CONF": "expandable_segments:True"},
          peaks=(40 * GIB, 42 * GIB))                            # reserved 48 -> 42 GiB: -6 GiB
    write("noisy", series(170.0, 4, cv=0.12))
    write("short", series(170.0, 5, n=14))
    spiky = series(170.0, 6)
    spiky[40] = 170.0 * 4.5                                     # a recompile inside the steady window
    write("spiky", spiky)
    write("full_compile", series(170.0, 7), identity=LANE | {"regime": "fsdp2/full-compile"})
    write("rumor", series(170.0, 8), identity={k: v for k, v in LANE.items() if k != "preset"})
    write("nccl_ring", series(170.0, 9), env=BASE_ENV | {"NCCL_ALGO": "Ring"})


if __name__ == "__main__":
    main()
