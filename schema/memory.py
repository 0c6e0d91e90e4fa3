"""Memory geometry: where one rank's device memory goes, by bucket, as measured or estimated.

Three sources give a geometry, each a MemoryGeometry per rank (or device):
- `capture`: receipts.capture in training, once the optimizer has stepped: the bytes of the local shards of
  the parameters, their gradients and the optimizer state, activation bytes held after forward, the allocator's
  peaks, retries and OOMs, and the device's HBM (the RECEIPT footer's `memory`, schema/receipt_format.py);
- `snapshot`: a PyTorch memory snapshot (`torch.cuda.memory._dump_snapshot`, ingest/memory_snapshot.py): the
  peak replayed from its trace, what was live at that peak by the phase that allocated it, and the gap
  between reserved and allocated there;
- `estimate`: `receipts estimate` before launch (analysis/estimate.py), per rank.

Standard library only: the model, not the analysis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

KINDS = ("capture", "snapshot", "estimate")

# The buckets a rank's memory is split into, measured (capture) and estimated alike.
# `transient`: what lives only part of a step (the logits' fp32 copy and its gradients, unsharded parameters,
# collective buffers, recomputed activations, optimizer temporaries): part of the peak, not of what stays.
BUCKETS = ("parameters", "gradients", "optimizer_state", "activations", "routing", "transient")

# A snapshot's categories: which phase allocated a block live at the replayed peak (ingest/memory_snapshot.py).
# `resident`: allocated before recording began (parameters and optimizer state, usually); `unattributed`: a
# block whose allocation carries no frames and falls outside a backward pass.
SNAPSHOT_CATEGORIES = ("resident", "forward", "backward", "optimizer", "other", "unattributed")

# The seeds' Estimate fields (bytes per rank) and the measured bucket each is compared with; None: not a bucket
# of allocated memory (the runtime's reserve and the allocator's overhead sit between allocated and the device).
ESTIMATE_FIELDS: dict[str, str | None] = {
    "replicated_params": "parameters",
    "tensor_parallel_params": "parameters",
    "expert_parallel_params": "parameters",
    "gradients": "gradients",
    "matrix_optimizer": "optimizer_state",
    "other_optimizer": "optimizer_state",
    "activations": "activations",
    "routing": "routing",
    # Terms of the peak beyond what stays: each is live in part of the step only, so the peak is the largest sum
    # over the step's phases (analysis/estimate.py), not the sum of every field.
    "logits_upcast": "transient",            # the logits' fp32 copy kept for the loss and the two fp32 gradients
    "unsharded_params": "transient",         # the largest FSDP unit's parameters, gathered in the compute dtype
    "collective_buffers": "transient",       # all-gather output and reduce-scatter input of one unit
    "recompute_working_set": "transient",    # one layer's activations rebuilt during backward (recompute)
    "optimizer_temporaries": "transient",    # a foreach optimizer's intermediate tensors in its step
    "unsharded_grads": "transient",          # gradients of a unit before they are reduce-scattered (tracker)
    "temporaries": "transient",              # other short-lived tensors at the peak (tracker: Temp)
    "allocator_rounding": "transient",       # the caching allocator's 512-byte blocks, over the live tensors
    "inputs": "activations",                 # the batch (tracker: Inputs)
    "buffers": "parameters",                 # module buffers (tracker: Buffer)
    "runtime_reserve": None,
    "overhead": None,
}


@dataclass(frozen=True)
class MemoryGeometry:
    """One rank's (or one device's) memory, from one source. Bytes throughout; None where the source cannot say."""

    kind: str                                   # one of KINDS
    rank: int | None = None                     # global rank; None: a snapshot (one device) or an estimate (any rank)
    device: int | None = None                   # CUDA device index the numbers are of, when the source says
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    resident_bytes: int | None = None           # what stays allocated between steps
    fragmentation_at_peak_bytes: int | None = None  # reserved - allocated at the moment of the allocated peak
    device_total_bytes: int | None = None       # the device's HBM (cudaDeviceProp.totalGlobalMem)
    alloc_retries: int | None = None            # cudaMalloc retries after freeing the cache (num_alloc_retries)
    ooms: int | None = None                     # out-of-memory errors the allocator raised (num_ooms)
    categories: tuple[tuple[str, int], ...] = ()  # (bucket or category, bytes), in a fixed order
    detail: dict[str, Any] = field(default_factory=dict)   # JSON facts: how it was measured, inputs of an estimate
    warnings: tuple[str, ...] = ()

    def category(self, name: str) -> int | None:
        return dict(self.categories).get(name)
