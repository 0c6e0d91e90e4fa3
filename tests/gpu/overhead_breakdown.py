"""Which part of the recorder costs what on a CPU-bound loop (small GEMMs, launch-limited).

    PYTHONPATH=<dir holding receipts> python3 tests/gpu/overhead_breakdown.py
Each variant runs the same loop; blocks alternate with the bare loop; median overhead printed.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_capture_overhead import build  # noqa: E402

from receipts.capture import Recorder  # noqa: E402

body = build(1024, 8, 64, "cuda")
for _ in range(50):
    body()
STEPS, ROUNDS = 300, 8
ev_pool = [torch.cuda.Event(enable_timing=True) for _ in range(4)]


def v_bare(i):
    body()


def v_nvtx(i):
    torch.cuda.nvtx.range_push(f"step {i}")
    body()
    torch.cuda.nvtx.range_pop()


def v_events(i):
    a, b = ev_pool[(2 * i) % 4], ev_pool[(2 * i + 1) % 4]
    a.record()
    body()
    b.record()
    b.query()


def v_events_notiming(i, pool=[torch.cuda.Event() for _ in range(4)]):
    a, b = pool[(2 * i) % 4], pool[(2 * i + 1) % 4]
    a.record()
    body()
    b.record()
    b.query()


def v_memstats(i):
    body()
    torch.cuda.memory_stats_as_nested_dict()


rec_host = Recorder("/tmp/bd_host.log", rank=0, world_size=1, use_cuda=False)
rec_full = Recorder("/tmp/bd_full.log", rank=0, world_size=1)
rec_nomem = Recorder("/tmp/bd_nomem.log", rank=0, world_size=1, memory_every_steps=0)


def with_rec(rec):
    def f(i):
        with rec.step(i):
            body()
    return f


variants = {"nvtx_only": v_nvtx, "events_timing_record_query": v_events, "events_no_timing": v_events_notiming,
            "memory_stats": v_memstats, "recorder_host_mode": with_rec(rec_host), "recorder_no_memory": with_rec(rec_nomem),
            "recorder_full": with_rec(rec_full)}


def block(fn, start):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(start, start + STEPS):
        fn(i)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1000 / STEPS


out = {}
counter = 0
for name, fn in variants.items():
    ratios, bare = [], []
    for r in range(ROUNDS):
        b = block(v_bare, 0)
        v = block(fn, counter)
        counter += STEPS
        ratios.append((v - b) / b)
        bare.append(b)
    out[name] = {"overhead_pct_median": 100 * statistics.median(ratios), "bare_step_ms_median": statistics.median(bare),
                 "extra_us_per_step": 1000 * statistics.median(bare) * statistics.median(ratios)}
print(json.dumps(out, indent=1))
