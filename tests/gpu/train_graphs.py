"""A small GPT training loop replayed as CUDA graphs (torch.compile "reduce-overhead", or one captured step).

Run on the GPU machine (see tests/gpu/device_run_graphs.sh), one GPU, under `receipts run`:
    python3 tests/gpu/train_graphs.py --steps 30 [--profile-dir DIR]

With `--capture compile` forward and backward run as CUDA-graph replays (cudagraph trees, one graph
per compiled region) and the fused AdamW step stays eager, so a step is a mix of graph replays and
ordinary kernels, as in production; `--capture manual` replays one graph per step (forward, backward
and a capturable AdamW), the whole-network capture of PyTorch's CUDA-graph docs. Each step sits inside `Recorder.step(n)` (NVTX `step N`), so nsys exports and the
profiler trace carry the same step boundaries. `--profile-dir` writes a torch.profiler trace for a
few steady steps (kept out of nsys-profiled runs: Kineto and nsys both want CUPTI).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from receipts.capture import Recorder


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.norm2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int, d: int, heads: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x)).float()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup-steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=16384)
    ap.add_argument("--profile-dir", default=None)
    # compile: torch.compile(mode="reduce-overhead") (cudagraph trees); manual: the whole step
    # (forward, backward, capturable AdamW) captured once with torch.cuda.graph and replayed.
    ap.add_argument("--capture", choices=("compile", "manual"), default="compile")
    args = ap.parse_args()

    torch.manual_seed(0)
    model = GPT(args.vocab, args.d_model, 16, args.layers).cuda().to(torch.bfloat16)
    data = torch.randint(0, args.vocab, (args.batch, args.seq + 1), device="cuda")
    if args.capture == "compile":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        step_fn = torch.compile(model, mode="reduce-overhead")

        def run_step() -> torch.Tensor:
            torch.compiler.cudagraph_mark_step_begin()
            loss = step_fn(data[:, :-1], data[:, 1:])
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.detach().clone()
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=True)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up on a side stream before capture, as the CUDA-graph docs require
            for _ in range(3):
                opt.zero_grad(set_to_none=True)
                model(data[:, :-1], data[:, 1:]).backward()
                opt.step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            static_loss = model(data[:, :-1], data[:, 1:])
            static_loss.backward()
            opt.step()

        def run_step() -> torch.Tensor:
            graph.replay()
            return static_loss.detach().clone()
    rec = Recorder(tokens_per_step=args.batch * args.seq)

    prof = None
    if args.profile_dir:
        prof = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
            schedule=torch.profiler.schedule(wait=args.steps - 8, warmup=2, active=5, repeat=1),
            on_trace_ready=torch.profiler.tensorboard_trace_handler(args.profile_dir, worker_name="rank0",
                                                                    use_gzip=True),
        )
        prof.start()

    def train_step(n: int) -> None:
        with rec.step(n) as s:
            s.loss = run_step()
        if prof is not None:
            prof.step()

    with rec.phase("warmup"):
        for n in range(args.warmup_steps):
            train_step(n)
    for n in range(args.warmup_steps, args.steps):
        train_step(n)
    if prof is not None:
        prof.stop()
    torch.cuda.synchronize()
    rec.close()


if __name__ == "__main__":
    main()
