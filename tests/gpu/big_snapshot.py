"""A PyTorch memory snapshot over 1 GB, for measuring receipts' ingest of one (tests/gpu/memory_fit.sh): training
steps of a small FSDP-free model run deep inside Python frames (so each allocation carries a long stack, as in a
real training framework), recorded with `_record_memory_history(stacks="python")` until the trace holds enough
entries for the dump to pass --target-bytes (estimated from a pilot dump of the same loop).

    python3 tests/gpu/big_snapshot.py --out /tmp/big.pickle --target-bytes 1100000000
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.nn as nn


def nest(depth: int, fn):
    """fn() called `depth` Python frames down."""
    return fn() if depth == 0 else nest(depth - 1, fn)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--target-bytes", type=int, default=1_100_000_000)
    ap.add_argument("--depth", type=int, default=40)
    ap.add_argument("--max-seconds", type=float, default=110.0, help="stop recording after this long")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256))
                            for _ in range(24)]).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(64, 256, device="cuda")

    def train_step() -> None:
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def record(steps: int, path: str, max_entries: int) -> float:
        torch.cuda.memory._record_memory_history(max_entries=max_entries, stacks="python")
        t0 = time.perf_counter()
        for _ in range(steps):
            nest(args.depth, train_step)
            if time.perf_counter() - t0 > args.max_seconds:
                break
        torch.cuda.synchronize()
        torch.cuda.memory._dump_snapshot(path)
        torch.cuda.memory._record_memory_history(enabled=None)
        return time.perf_counter() - t0

    train_step()
    pilot = args.out + ".pilot"
    record(20, pilot, 10_000_000)
    per_step = os.path.getsize(pilot) / 20
    os.remove(pilot)
    steps = int(args.target_bytes / per_step * 1.05) + 1
    seconds = record(steps, args.out, 50_000_000)
    torch.cuda.synchronize()
    print("BIG_SNAPSHOT " + json.dumps({"path": args.out, "bytes": os.path.getsize(args.out), "steps": steps,
                                        "pilot_bytes_per_step": per_step, "seconds": round(seconds, 1),
                                        "max_memory_allocated": torch.cuda.max_memory_allocated(),
                                        "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
