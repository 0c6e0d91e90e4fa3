"""What a rank's memory holds, by bucket, read in training: the bytes of the local shards of the parameters,
their gradients and the optimizer's state, and the activation bytes a forward pass leaves allocated.

Standard library plus whatever tensors the caller hands over (torch, never imported here): a parameter is
counted by its metadata (numel x element size), so counting never synchronises with the device. A DTensor
(FSDP2's fully_shard, tensor parallelism) counts its local shard, `_local_tensor` (what `to_local()` returns);
a plain tensor counts whole, since every rank holds it. Optimizer state counts the tensors that live on the
device (a fused optimizer's `step` is one per parameter there; foreach and for-loop optimizers keep it on the
host, which costs no device memory). Each storage is counted once.
"""

from __future__ import annotations

from typing import Any, Iterable


def local(tensor: Any) -> Any:
    """The rank's own part of a tensor: a DTensor's local shard, else the tensor itself."""
    inner = getattr(tensor, "_local_tensor", None)
    return inner if inner is not None else tensor


def tensor_bytes(tensors: Iterable[Any], *, device_only: bool = False) -> int:
    """Bytes of the local parts of `tensors` (None skipped), each counted once (by data pointer and size)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for t in tensors:
        if t is None:
            continue
        part = local(t)
        if device_only and not getattr(part, "is_cuda", False):
            continue
        size = int(part.numel()) * int(part.element_size())
        key = (int(part.data_ptr()), size)
        if size and key not in seen:
            seen.add(key)
            total += size
    return total


def optimizer_params(optimizer: Any) -> list[Any]:
    """The parameters an optimizer updates, each once, in its groups' order."""
    out, seen = [], set()
    for group in optimizer.param_groups:
        for p in group["params"]:
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out


def buckets(optimizer: Any) -> dict[str, int]:
    """parameters_bytes, gradients_bytes, optimizer_state_bytes of the local shards, right after a step (before
    the gradients are zeroed): what the optimizer holds for this rank."""
    params = optimizer_params(optimizer)
    state = (v for p in params for v in optimizer.state.get(p, {}).values() if hasattr(v, "numel"))
    return {"parameters_bytes": tensor_bytes(params),
            "gradients_bytes": tensor_bytes(getattr(p, "grad", None) for p in params),
            "optimizer_state_bytes": tensor_bytes(state, device_only=True)}
