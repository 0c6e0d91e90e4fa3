"""A small FSDP2 (fully_shard) bf16 transformer loop instrumented with receipts.capture.

Run on the GPU machine (see tests/gpu/device_run.sh), under `receipts run` and torchrun:
    torchrun --standalone --nproc_per_node=2 tests/gpu/train_fsdp2.py --steps 20 [--profile-dir DIR]

Prints one `TORCH_PEAKS {json}` line per rank with torch's own max_memory_allocated /
max_memory_reserved, read after the loop, so a test can check the receipt's footer equals them.
With `--watch-memory` (the recorder's memory geometry, tests/gpu/memory_runs.sh) it also prints one
`TORCH_MEMORY {json}` line per rank after the first steady optimizer step: torch's own `nbytes` of the
same local shards (parameters, gradients, optimizer state), and `--memory-snapshot DIR` one
`SNAPSHOT_PEAKS {json}` line with max_memory_allocated / reserved over the snapshot's steps.
`--profile-dir` writes torch.profiler traces (one .pt.trace.json.gz per rank) for a few steps; it
is kept out of the nsys-profiled run because Kineto and nsys both subscribe to CUPTI.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from receipts.capture import Recorder

# The transformer block the memory-estimate factories build too: one definition for the runs and the estimate.
from memory_model import Block  # noqa: E402 - tests/gpu is the script's own directory, first on sys.path


class Toy(nn.Module):
    def __init__(self, vocab: int, d_model: int, n_heads: int, n_layers: int, checkpointing: int = 0) -> None:
        """`checkpointing`: how many blocks, from the first, recompute their activations in the backward."""
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        blocks: list[nn.Module] = [Block(d_model, n_heads) for _ in range(n_layers)]
        if checkpointing:  # activation checkpointing, wrapped before fully_shard as torchtitan does
            from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

            blocks = [checkpoint_wrapper(b) if i < checkpointing else b for i, b in enumerate(blocks)]
        self.layers = nn.ModuleList(blocks)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens: torch.Tensor, rec: Recorder) -> torch.Tensor:
        x = self.embed(tokens)
        for layer in self.layers:
            with rec.block("ablock"):
                x = layer(x)
        return self.head(x)


def _local_nbytes(tensors) -> int:
    """torch's own count of what this rank holds of the tensors: `nbytes` of each local shard."""
    total = 0
    for t in tensors:
        if t is not None:
            total += (t.to_local() if hasattr(t, "to_local") else t).nbytes
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup-steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--profile-dir", default=None)
    ap.add_argument("--telemetry-interval", type=float, default=1.0,
                    help="seconds between the recorder's GPU telemetry samples (outside `receipts run`)")
    ap.add_argument("--profile-active", type=int, default=3,
                    help="steps the profiler records, the last ones before the final step (after 2 warm-up steps)")
    # A planted slowdown for the noise experiment (tests/gpu/noise_runs.sh): K extra bf16 matmuls of
    # size S x S inside every step, a known amount of extra GPU work with nothing else changed.
    ap.add_argument("--extra-matmuls", type=int, default=0)
    ap.add_argument("--extra-matmul-size", type=int, default=4096)
    # A planted straggler (tests/gpu/device_run_r20.sh): K extra matmuls at the START of each
    # step on one rank only, so that rank reaches the step's first all-gather late and the others wait.
    ap.add_argument("--straggler-rank", type=int, default=-1)
    ap.add_argument("--straggler-matmuls", type=int, default=0)
    # Several ranks on ONE GPU (the only kind lent some days): NCCL refuses two ranks on one device, so
    # gloo carries the collectives and DDP (bf16 autocast) replaces FSDP2, whose collectives gloo lacks.
    ap.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    # Planted changes for the explain experiment (tests/gpu/explain_runs.sh), each of one known component:
    # the SDPA kernel nn.MultiheadAttention runs (need_weights=False goes through scaled_dot_product_attention;
    # default: PyTorch's own choice), a host stall inside every step (the queue drained first, so the GPU sits
    # idle for the whole sleep, between the forward and the backward: inside the step's own GPU span), and the
    # dtype FSDP2 reduce-scatters gradients in (fp32: twice the bytes of bf16, and a cast before each).
    ap.add_argument("--sdpa-backend", choices=("flash", "efficient", "math", "cudnn"), default=None)
    ap.add_argument("--host-stall-ms", type=float, default=0.0)
    ap.add_argument("--reduce-dtype", choices=("bf16", "fp32"), default="fp32")
    # The memory experiment (tests/gpu/memory_runs.sh): the optimizer (fused AdamW as before; AdamW's foreach
    # path, whose `step` stays on the host; SGD with momentum 0.9: one buffer per parameter against AdamW's two),
    # full activation checkpointing, the recorder's memory geometry, and a memory snapshot of a few steady steps.
    ap.add_argument("--optimizer", choices=("adamw-fused", "adamw", "sgd"), default="adamw-fused")
    ap.add_argument("--activation-checkpointing", action="store_true")
    ap.add_argument("--watch-memory", action="store_true")
    ap.add_argument("--memory-snapshot", default=None, help="folder for one rank<N>.pickle per rank")
    ap.add_argument("--snapshot-steps", type=int, default=2)
    # Planted slow steps for the drill-down (tests/gpu/slow_step_runs.sh): K extra matmuls in one step only
    # (more GPU work in that step: a kernel with K more calls), and a host stall in another step only (the GPU
    # idle inside it, no kernel different).
    ap.add_argument("--slow-step", type=int, default=-1)
    ap.add_argument("--slow-step-matmuls", type=int, default=0)
    ap.add_argument("--stall-step", type=int, default=-1)
    ap.add_argument("--stall-step-ms", type=float, default=0.0)
    # The explain corpus (tests/gpu/explain_corpus.sh): planted changes of known size and place on one GPU.
    # --loss-item reads the loss with .item() at the end of every step, inside it, as a loop that logs its loss
    # each step does: the host waits for the GPU there, so the next step starts with an empty queue and a host
    # stall costs GPU time (without it the host runs steps ahead and a sleep is absorbed).
    ap.add_argument("--loss-item", action="store_true")
    # Where --host-stall-ms sleeps: 'backward' between the forward and the backward (the queue drained first:
    # the GPU idle inside the step's GPU span), 'start' first thing inside the `step N` range, before the step's
    # first launch (outside its GPU span: only the step range holds it).
    ap.add_argument("--host-stall-at", choices=("backward", "start"), default="backward")
    # A dataloader-style stall: the host sleeps between steps, outside every `step N` range (the queue empty
    # with --loss-item, so the GPU idles for it; a Kineto ProfilerStep, which runs from one prof.step() to the
    # next, holds it before its first launch).
    ap.add_argument("--loader-stall-ms", type=float, default=0.0)
    # An extra device-to-host copy per step: this many MiB of the forward's output (bf16) copied into a pinned
    # host buffer (non_blocking: a memcpy on the stream, no host sync), after the forward.
    ap.add_argument("--extra-d2h-mib", type=float, default=0.0)
    # Activation recompute of the first N blocks only (--activation-checkpointing: all of them).
    ap.add_argument("--checkpoint-layers", type=int, default=0)
    # A dtype change: the output projection (the head) kept in fp32 by its own FSDP2 unit (param_dtype fp32) and
    # run with TF32 matmuls: its GEMMs change kernel, the rest of the model stays bf16.
    ap.add_argument("--head-fp32", action="store_true")
    # Kineto over every step but the first (the profiler's own warm-up step): the run's warm-up steps recorded
    # and marked as the receipt marks them, ProfilerStep#N numbered as the recorder's `step N`.
    ap.add_argument("--profile-all", action="store_true")
    args = ap.parse_args()

    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank % torch.cuda.device_count())
    torch.manual_seed(0)

    checkpointed = args.layers if args.activation_checkpointing else args.checkpoint_layers
    model = Toy(args.vocab, args.d_model, 16, args.layers, checkpointed).cuda()
    param_count = sum(p.numel() for p in model.parameters())
    if args.backend == "nccl":
        reduce_dtype = torch.bfloat16 if args.reduce_dtype == "bf16" else torch.float32
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=reduce_dtype)
        for layer in model.layers:
            fully_shard(layer, mp_policy=mp)
        if args.head_fp32:
            torch.backends.cuda.matmul.allow_tf32 = True
            fully_shard(model.head, mp_policy=MixedPrecisionPolicy(param_dtype=torch.float32,
                                                                   reduce_dtype=torch.float32))
        fully_shard(model, mp_policy=mp)
        autocast = contextlib.nullcontext
    else:
        model = nn.parallel.DistributedDataParallel(model)
        autocast = functools.partial(torch.autocast, "cuda", dtype=torch.bfloat16)
    if args.optimizer == "sgd":
        opt: torch.optim.Optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=args.optimizer == "adamw-fused")
    loss_fn = nn.CrossEntropyLoss()

    rec = Recorder(tokens_per_step=args.batch * args.seq,  # log=None: stdout, teed by `receipts run`
                   telemetry_interval_s=args.telemetry_interval)
    if args.watch_memory:
        rec.watch_memory(opt, model, activations=True)

    def torch_memory(n: int) -> None:
        """After the first steady optimizer step, before the gradients go: torch's numbers for the same shards."""
        if not args.watch_memory or n != args.warmup_steps:
            return
        params = [p for g in opt.param_groups for p in g["params"]]
        state = [v for p in params for v in opt.state[p].values() if torch.is_tensor(v) and v.is_cuda]
        print("TORCH_MEMORY " + json.dumps({
            "rank": rank, "world_size": world, "param_count": param_count,
            "parameters_bytes": _local_nbytes(params), "gradients_bytes": _local_nbytes(p.grad for p in params),
            "optimizer_state_bytes": _local_nbytes(state), "optimizer": args.optimizer,
            "activation_checkpointing": args.activation_checkpointing,
            "shape": {"batch": args.batch, "seq": args.seq, "d_model": args.d_model, "layers": args.layers,
                      "vocab": args.vocab, "heads": 16},
            "total_memory": torch.cuda.get_device_properties(local_rank % torch.cuda.device_count()).total_memory,
        }), flush=True)

    # The snapshot records steady steps only, from after the recorder's steady reset (the first steady
    # optimizer step), with the peaks reset where it starts, so its replayed peak and max_memory_allocated
    # cover the same steps.
    snapshot_first = args.warmup_steps + 1
    snapshot_last = snapshot_first + args.snapshot_steps - 1

    def snapshot_begin(n: int) -> None:
        if args.memory_snapshot and n == snapshot_first:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            torch.cuda.memory._record_memory_history(max_entries=100_000, stacks="python")

    def snapshot_end(n: int) -> None:
        if args.memory_snapshot and n == snapshot_last:
            torch.cuda.synchronize()
            os.makedirs(args.memory_snapshot, exist_ok=True)
            torch.cuda.memory._dump_snapshot(os.path.join(args.memory_snapshot, f"rank{rank}.pickle"))
            torch.cuda.memory._record_memory_history(enabled=None)
            print("SNAPSHOT_PEAKS " + json.dumps({"rank": rank, "first_step": snapshot_first, "last_step": n,
                                                  "max_memory_allocated": torch.cuda.max_memory_allocated(),
                                                  "max_memory_reserved": torch.cuda.max_memory_reserved()}),
                  flush=True)

    gen = torch.Generator(device="cuda").manual_seed(rank)
    data = torch.randint(0, args.vocab, (args.batch, args.seq + 1), device="cuda", generator=gen)

    attention = contextlib.nullcontext
    if args.sdpa_backend:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                   "math": SDPBackend.MATH, "cudnn": SDPBackend.CUDNN_ATTENTION}[args.sdpa_backend]
        attention = functools.partial(sdpa_kernel, backend)  # the forward picks the kernel; its backward follows

    extra = None
    if args.extra_matmuls or args.slow_step_matmuls or (args.straggler_matmuls and rank == args.straggler_rank):
        extra = torch.randn(args.extra_matmul_size, args.extra_matmul_size, device="cuda", dtype=torch.bfloat16)

    d2h = None
    if args.extra_d2h_mib:
        d2h = torch.empty(int(args.extra_d2h_mib * 2**20) // 2, dtype=torch.bfloat16, pin_memory=True)

    prof = None
    if args.profile_dir:
        schedule = (torch.profiler.schedule(wait=0, warmup=1, active=args.steps - 1, repeat=1) if args.profile_all
                    else torch.profiler.schedule(wait=args.steps - 3 - args.profile_active, warmup=2,
                                                 active=args.profile_active, repeat=1))
        prof = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
            schedule=schedule,
            on_trace_ready=torch.profiler.tensorboard_trace_handler(args.profile_dir, worker_name=f"rank{rank}",
                                                                    use_gzip=True),
        )
        prof.start()

    def train_step(n: int) -> None:
        snapshot_begin(n)
        if args.loader_stall_ms > 0:
            torch.cuda.synchronize()
            time.sleep(args.loader_stall_ms / 1000.0)
        with rec.step(n) as s:
            if args.host_stall_ms > 0 and args.host_stall_at == "start":
                torch.cuda.synchronize()
                time.sleep(args.host_stall_ms / 1000.0)
            if rank == args.straggler_rank:
                for _ in range(args.straggler_matmuls):
                    torch.mm(extra, extra)
            with autocast(), attention():
                logits = model(data[:, :-1], rec)
            if d2h is not None:
                d2h.copy_(logits.detach().reshape(-1)[:d2h.numel()], non_blocking=True)
            loss = loss_fn(logits.float().view(-1, args.vocab), data[:, 1:].reshape(-1))
            stall_ms = (args.host_stall_ms if args.host_stall_at == "backward" else 0.0) + \
                (args.stall_step_ms if n == args.stall_step else 0.0)
            if stall_ms > 0:
                torch.cuda.synchronize()
                time.sleep(stall_ms / 1000.0)
            # A checkpointed block recomputes its forward inside the backward: under the same SDPA kernel, or the
            # recomputed attention saves other tensors (the RNG state's dtype differs between kernels)
            with attention() if checkpointed else contextlib.nullcontext():
                loss.backward()
            for _ in range(args.extra_matmuls + (args.slow_step_matmuls if n == args.slow_step else 0)):
                torch.mm(extra, extra)
            opt.step()
            torch_memory(n)
            opt.zero_grad(set_to_none=True)
            s.loss = loss.item() if args.loss_item else loss  # a CUDA tensor: the recorder copies it without a sync
        snapshot_end(n)
        if prof is not None:
            prof.step()

    with rec.phase("warmup"):
        for n in range(args.warmup_steps):
            train_step(n)
    for n in range(args.warmup_steps, args.steps):
        train_step(n)
    with rec.phase("eval"), torch.no_grad():
        model(data[:, :-1], rec)
    if prof is not None:
        prof.stop()

    torch.cuda.synchronize()
    peaks = {"rank": rank, "world_size": world, "max_memory_allocated": torch.cuda.max_memory_allocated(),
             "max_memory_reserved": torch.cuda.max_memory_reserved()}
    print("TORCH_PEAKS " + json.dumps(peaks), flush=True)
    rec.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
