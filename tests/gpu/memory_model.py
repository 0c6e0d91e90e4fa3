"""Model factories for `receipts estimate --model tests/gpu/memory_model.py:NAME` and for the GPU runs that check
it (tests/gpu/memory_fit_runs.py): a GPT-like stack of transformer blocks, FSDP2 `fully_shard` per block and root
with bf16 compute, fp32 sharded parameters and fp32 gradient reduction (as tests/gpu/train_fsdp2.py), the loss a
cross-entropy over the logits upcast to fp32.

Each factory takes the device mesh and returns (model, optimizer, batch, loss_fn). The shape: batch 4, sequence
2048, d_model 2048, 8 blocks of 16 heads, vocabulary 32768 (470 M parameters); `tiny` is a small one for unit tests.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPE = {"batch": 4, "seq": 2048, "d_model": 2048, "layers": 8, "heads": 16, "vocab": 32768}


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, n_heads, batch_first=True)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False, is_causal=False)[0]
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, d_model: int, heads: int, layers: int, checkpointing: bool = False) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        blocks: list[nn.Module] = [Block(d_model, heads) for _ in range(layers)]
        if checkpointing:
            from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

            blocks = [checkpoint_wrapper(b) for b in blocks]
        self.layers = nn.ModuleList(blocks)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def loss_fn(model: nn.Module, batch: torch.Tensor, forward=None) -> torch.Tensor:
    """Cross-entropy of next-token prediction; `forward` (the GPU runs' measured call) stands in for model()."""
    logits = (forward or model)(batch[:, :-1])
    return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))


def build(mesh=None, *, optimizer: str = "adamw", checkpointing: bool = False, fsdp: bool = True,
          shape: dict | None = None):
    s = {**SHAPE, **(shape or {})}
    torch.manual_seed(0)
    model = GPT(s["vocab"], s["d_model"], s["heads"], s["layers"], checkpointing)
    if fsdp:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in model.layers:
            fully_shard(layer, mesh=mesh, mp_policy=mp)
        fully_shard(model, mesh=mesh, mp_policy=mp)
    if optimizer == "sgd":
        opt: torch.optim.Optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=optimizer == "adamw-fused")
    batch = torch.randint(0, s["vocab"], (s["batch"], s["seq"] + 1))
    return model, opt, batch, loss_fn


def adamw(mesh=None):
    return build(mesh)


def sgd(mesh=None):
    return build(mesh, optimizer="sgd")


def adamw_fused(mesh=None):
    return build(mesh, optimizer="adamw-fused")


def adamw_ckpt(mesh=None):
    return build(mesh, checkpointing=True)


def plain(mesh=None):
    """No fully_shard: an fp32 module under AdamW (PyTorch's MemTracker instead of FSDPMemTracker)."""
    return build(mesh, fsdp=False)


TINY = {"batch": 2, "seq": 32, "d_model": 64, "layers": 2, "heads": 4, "vocab": 256}


def tiny(mesh=None):
    return build(mesh, shape=TINY)


def tiny_sgd(mesh=None):
    return build(mesh, optimizer="sgd", shape=TINY)


def raises(mesh=None):
    raise RuntimeError("the config server is unreachable")
