"""One real training run of a tests/gpu/memory_model.py factory on this GPU (FSDP2 over one rank, or a plain
module), for tests/gpu/memory_fit.sh: the recorder's footer (RECEIPT lines, with its memory geometry and recipe)
into DIR/run.log, and one `FIT {json}` line there with torch's numbers to check the estimates and the recorder
against:

- max_memory_allocated / max_memory_reserved of the steady steps (the peaks reset where the recorder resets them:
  after the first steady optimizer step), and of the whole run;
- forward_delta_bytes: memory_allocated() after the model's forward call minus before it, for every step.

    python3 tests/gpu/memory_fit_run.py --factory adamw --out DIR [--steps 8 --warmup-steps 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import memory_model  # noqa: E402

from receipts.capture import Recorder  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--factory", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup-steps", type=int, default=2)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for k, v in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"), ("MASTER_ADDR", "127.0.0.1"),
                 ("MASTER_PORT", "29533")):
        os.environ.setdefault(k, v)
    dist.init_process_group("nccl")
    torch.cuda.set_device(0)
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cuda", (1,))
    with torch.device("cuda"):
        model, opt, batch, loss_fn = getattr(memory_model, args.factory)(mesh)
    log = os.path.join(args.out, "run.log")
    rec = Recorder(log, header_facts={"run_name": f"fit_{args.factory}", "features": {"factory": args.factory}})
    rec.watch_memory(opt, model, activations=True)
    deltas: list[int] = []

    def measured(x):
        before = torch.cuda.memory_allocated()
        y = model(x)
        deltas.append(torch.cuda.memory_allocated() - before)
        return y

    def step(n: int) -> None:
        with rec.step(n, tokens=batch.numel()) as s:
            loss = loss_fn(model, batch, forward=measured)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            s.loss = loss

    with rec.phase("warmup"):
        for n in range(args.warmup_steps):
            step(n)
    for n in range(args.warmup_steps, args.steps):
        step(n)
    torch.cuda.synchronize()
    steady = {"max_memory_allocated": torch.cuda.max_memory_allocated(),
              "max_memory_reserved": torch.cuda.max_memory_reserved()}
    footer = rec.close()
    fit = {"factory": args.factory, "steady": steady, "forward_delta_bytes": deltas,
           "run_peak_allocated": footer.get("peak_allocated_bytes"), "params": sum(p.numel() for p in model.parameters()),
           "memory": footer.get("memory"), "recipe": footer.get("recipe"), "torch": torch.__version__,
           "device": torch.cuda.get_device_name(0)}
    with open(log, "a") as f:
        f.write("FIT " + json.dumps(fit) + "\n")
    print("FIT " + json.dumps({k: fit[k] for k in ("factory", "steady", "run_peak_allocated")}
                              | {"activations": (footer.get("memory") or {}).get("activations_bytes"),
                                 "max_forward_delta": max(deltas)}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
