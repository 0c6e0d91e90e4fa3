"""Recorder overhead on a real GPU loop: the same loop with and without `with rec.step(n)`.

    PYTHONPATH=<dir holding receipts> python3 benchmarks/bench_capture_overhead.py [--out result.json]

Reference measured in the same run (STYLE 13): blocks of `--steps` steps alternate between the
bare loop and the recorded loop (order flipped every round so drift and clock ramp-up hit both
alike); each block is timed wall-clock between two torch.cuda.synchronize() calls. Overhead is
the median over rounds of (recorded - bare) / bare. A second measurement times the recorder's
host cost per step around an empty body, which bounds its cost on any loop.

Needs torch with CUDA; on a CPU-only machine it measures host timing mode and says so.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import torch
import torch.nn as nn

from receipts.capture import Recorder


def build(width: int, depth: int, batch: int, device: str):
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(depth)]).to(device, dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **({"fused": True} if device == "cuda" else {}))
    x = torch.randn(batch, width, device=device, dtype=dtype)

    def body() -> torch.Tensor:
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return body


def timed_block(body, steps: int, rec: Recorder | None, first_step: int, sync, *, with_loss: bool = True) -> float:
    sync()
    t0 = time.perf_counter()
    if rec is None:
        for _ in range(steps):
            body()
    elif with_loss:
        for i in range(steps):
            with rec.step(first_step + i) as s:
                s.loss = body()
    else:
        for i in range(steps):
            with rec.step(first_step + i):
                body()
    sync()
    return (time.perf_counter() - t0) * 1000.0 / steps


def host_costs_us(rec: Recorder, n: int = 2000) -> dict:
    """Microseconds per call of each piece of work the recorder does on the CPU per step."""
    import torch as t

    def per_call(fn) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - t0) * 1e6 / n

    out = {}
    step = iter(range(20_000_000, 30_000_000))

    def empty_step():
        with rec.step(next(step)):
            pass

    out["whole_empty_step"] = per_call(empty_step)
    if t.cuda.is_available():
        loss = t.ones((), device="cuda")

        def empty_step_with_loss():
            with rec.step(next(step)) as s:
                s.loss = loss

        out["whole_empty_step_with_cuda_loss"] = per_call(empty_step_with_loss)
    rec.close()
    if t.cuda.is_available():
        ev = t.cuda.Event(enable_timing=True)
        out["nvtx_push_pop"] = per_call(lambda: (t.cuda.nvtx.range_push("step 1"), t.cuda.nvtx.range_pop()))
        out["event_record"] = per_call(ev.record)
        out["event_query"] = per_call(ev.query)
        out["event_create_and_record"] = per_call(lambda: t.cuda.Event(enable_timing=True).record())
        out["memory_allocated_plus_reserved"] = per_call(lambda: (t.cuda.memory_allocated(), t.cuda.memory_reserved()))
        out["memory_stats_as_nested_dict"] = per_call(t.cuda.memory_stats_as_nested_dict)
    fd = os.open(os.devnull, os.O_WRONLY)
    rec_obj = {"v": 1, "kind": "step", "step": 123, "rank": 0, "step_ms": 22.5, "host_ms": 22.1, "timing": "cuda_event",
               "loss": 4.7, "tokens_per_s": 420000.0, "allocated_bytes": 1008512000, "reserved_bytes": 3544186880}
    out["json_dumps_and_os_write"] = per_call(
        lambda: os.write(fd, ("RECEIPT " + json.dumps(rec_obj, separators=(",", ":")) + "\n").encode()))
    os.close(fd)
    return out


def measure_loop(name: str, *, width: int, depth: int, batch: int, steps: int, rounds: int, device: str) -> dict:
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    body = build(width, depth, batch, device)
    log = os.path.join(tempfile.mkdtemp(), f"bench_{name}.log")
    rec = Recorder(log, rank=0, world_size=1)
    for _ in range(20):  # warm-up: allocator, cuBLAS heuristics, clocks
        body()
    bare, recorded, ratios = [], [], []
    step = 0
    for r in range(rounds):
        order = (None, rec) if r % 2 == 0 else (rec, None)
        times = {}
        for which in order:
            ms = timed_block(body, steps, which, step, sync)
            step += steps if which is not None else 0
            times["rec" if which is not None else "bare"] = ms
        bare.append(times["bare"])
        recorded.append(times["rec"])
        ratios.append((times["rec"] - times["bare"]) / times["bare"])
    rec.close()
    with open(log) as f:
        lines = sum(1 for line in f if line.startswith("RECEIPT "))
    # Which part costs what: the recorded loop again without the loss copy, and without memory reads.
    variants = {}
    for label, kwargs, with_loss in (("no_loss", {}, False), ("no_loss_no_memory", {"memory_every_steps": 0}, False)):
        vrec = Recorder(log + f".{label}", rank=0, world_size=1, **kwargs)
        vr = []
        for r in range(max(2, rounds // 2)):
            b = timed_block(body, steps, None, 0, sync)
            v = timed_block(body, steps, vrec, r * steps, sync, with_loss=with_loss)
            vr.append((v - b) / b)
        vrec.close()
        variants[label] = 100 * statistics.median(vr)
    return {
        "loop": {"width": width, "depth": depth, "batch": batch, "steps_per_block": steps, "rounds": rounds},
        "variant_overhead_pct_median": variants,
        "bare_step_ms": bare,
        "recorded_step_ms": recorded,
        "bare_step_ms_median": statistics.median(bare),
        "recorded_step_ms_median": statistics.median(recorded),
        "overhead_pct_median": 100 * statistics.median(ratios),
        "overhead_pct_per_round": [100 * x for x in ratios],
        "receipt_lines_written": lines,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    # gpu_bound: ~12 ms of bf16 GEMMs per step, CPU far ahead; cpu_bound: small GEMMs where the
    # launch path (Python + CUDA runtime) sets the step time, so any recorder CPU cost shows.
    configs = {"gpu_bound": dict(width=4096, depth=8, batch=8192), "cpu_bound": dict(width=1024, depth=8, batch=64)}
    if device == "cpu":
        configs = {"cpu_host_timing": dict(width=256, depth=4, batch=64)}
    result = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "timing": "cuda_event" if device == "cuda" else "host",
        "loops": {name: measure_loop(name, steps=args.steps, rounds=args.rounds, device=device, **cfg)
                  for name, cfg in configs.items()},
        "host_cost_us": host_costs_us(Recorder(os.path.join(tempfile.mkdtemp(), "h.log"), rank=0, world_size=1)),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
