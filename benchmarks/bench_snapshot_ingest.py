"""PyTorch memory snapshot ingest: receipts' streaming reader (ingest/memory_snapshot.parse) against Python's own C
unpickler loading the same file (restricted to plain containers, the floor of any reader that builds the whole
object), each in a fresh child process so its peak RSS is its own.

    .venv/bin/python benchmarks/bench_snapshot_ingest.py [--entries 600000] [--path SNAPSHOT]

Without --path the snapshot is built in the temp dir the way torch's `_dump_snapshot` lays one out: a trace of
allocation / free-requested / free-completed entries whose frames lists (40 deep, from a table of 3,000 distinct
frames) are shared between an allocation and its frees, a fresh `compile_context` string per entry, as torch 2.11
writes them. A 1.15 GB snapshot made on the GPU machine (tests/gpu/big_snapshot.py) cannot travel here: its
figure, measured there with tests/gpu/measure_ingest.py, is in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, time
sys.path.insert(0, {bench!r})
from peak_rss import peak_rss_mib
path, which = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
if which == "receipts":
    from receipts.ingest import memory_snapshot
    (g,) = memory_snapshot.parse(path)
    facts = {{"peak_allocated_bytes": g.peak_allocated_bytes, "trace_events": g.detail["trace_events"]}}
else:
    import pickle
    class Plain(pickle.Unpickler):
        def find_class(self, module, name):
            raise pickle.UnpicklingError(module + "." + name)
    with open(path, "rb") as f:
        data = Plain(f).load()
    facts = {{"trace_events": sum(len(t) for t in data["device_traces"])}}
print(json.dumps({{"seconds": round(time.perf_counter() - t0, 2), "peak_rss_mib": round(peak_rss_mib(), 1), **facts}}))
"""


def build(path: Path, entries: int) -> None:
    frames = [{"filename": f"/site-packages/torch/nn/modules/m{i % 97}.py", "line": i,
               "name": "forward" if i % 3 else "_call_impl"} for i in range(3000)]
    trace = []
    for i in range(entries):
        stack = [frames[(i * 7 + j) % 3000] for j in range(40)]
        addr = (1 << 40) + (i % 5000) * 1024 * 1024
        for action in ("alloc", "free_requested", "free_completed"):
            trace.append({"action": action, "addr": addr, "size": 1 << 20, "stream": 0,
                          "time_us": 1_795_789_750_216_879 + i, "compile_context": "".join(["N/", "A"]),
                          "user_metadata": "", "frames": stack})
    with open(path, "wb") as f:
        pickle.dump({"segments": [], "device_traces": [trace], "allocator_settings": {}}, f, protocol=4)


def measure(path: Path, which: str) -> dict:
    code = CHILD.format(bench=str(Path(__file__).resolve().parent))
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", code, str(path), which], capture_output=True, text=True, env=env,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=600_000, help="allocations (three trace entries each)")
    ap.add_argument("--path", type=Path, default=None)
    args = ap.parse_args()
    path = args.path or Path(tempfile.gettempdir()) / f"receipts_bench_snapshot_{args.entries}.pickle"
    if not path.exists():
        build(path, args.entries)
    ours, reference = measure(path, "receipts"), measure(path, "pickle")
    print(json.dumps({"snapshot": str(path), "bytes": path.stat().st_size, "receipts": ours,
                      "python_unpickler": reference,
                      "rss_ratio": round(ours["peak_rss_mib"] / reference["peak_rss_mib"], 3),
                      "time_ratio": round(ours["seconds"] / reference["seconds"], 2),
                      "load": os.getloadavg()[0]}, indent=1))


if __name__ == "__main__":
    main()
