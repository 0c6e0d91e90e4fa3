"""The memory a rank will hold, estimated before launch, by bucket (the seeds' `Estimate` fields, in bytes).

Fit is decided by geometry, not by a parameter count: each parameter family has an owner (replicated on every
rank, split by tensor parallelism, or split by expert parallelism), and each bucket scales with its own
degrees. Per rank:

- parameters of a family: its count / TP (ownership `tp`) or / EP (`ep`), / PP (families split into pipeline
  stages), / the shard degree when the sharding shards parameters (`fsdp`, ZeRO-3), x param_dtype bytes;
  `replicated_params`, `tensor_parallel_params`, `expert_parallel_params` by ownership;
- gradients: the same count, sharded from ZeRO-2 up, x grad_dtype bytes;
- optimizer state, sharded from ZeRO-1 up: AdamW two moments, SGD with momentum one buffer, SGD without none,
  Muon one momentum buffer (matrices; `matrix_optimizer`), each x master_dtype bytes; a master copy of the
  weights when the parameters are kept in another dtype; a fused AdamW's `step`, one 4-byte scalar per
  parameter tensor on the device (given `tensors`). Muon's families are `matrix_optimizer`, the rest
  `other_optimizer`;
- activations (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", the
  per-layer bytes of a transformer layer in 16-bit): no recompute 34·s·b·h, plus 5·a·s²·b for attention
  scores when attention is not fused (flash attention keeps none); selective recompute 34·s·b·h; full
  recompute 2·s·b·h (the layer's input). Under TP, sequence parallelism divides all of it by TP, without it
  10·s·b·h stays whole. x layers (1F1B: the first stage holds pp micro-batches of layers/pp layers); plus the
  logits, s·b·vocab x the activation dtype, when the vocabulary is given;
- routing scratch per MoE layer (the seeds' worked example): capacity = ceil(tokens·top_k/experts x capacity
  factor), a dispatch-count surface of tokens·top_k x 4 bytes, and receive and combine buffers of
  capacity·hidden·local_experts x the activation dtype each;
- runtime reserve and allocator overhead as given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from receipts.schema.memory import ESTIMATE_FIELDS, MemoryGeometry

if TYPE_CHECKING:
    from receipts.store import Store

DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
OWNERSHIP = ("replicated", "tp", "ep")
# The state buffers each optimizer keeps per parameter (in master_dtype).
OPTIMIZER_STATES = {"adamw": 2, "adamw-fused": 2, "adam": 2, "sgd": 1, "sgd-plain": 0, "muon": 1}
MATRIX_OPTIMIZERS = ("muon",)
# What each sharding shards: parameters, gradients, optimizer state (ZeRO's stages; FSDP full sharding is ZeRO-3).
SHARDING = {"none": (False, False, False), "zero1": (False, False, True), "zero2": (False, True, True),
            "zero3": (True, True, True), "fsdp": (True, True, True)}
RECOMPUTE = ("none", "selective", "full")
ATTENTION = ("flash", "eager")
MAX_BYTES = 2**63       # byte counts are 64-bit integers in `--json` and in the store
STEP_SCALAR_BYTES = 4   # a fused optimizer's per-tensor `step` on the device (float32)


@dataclass(frozen=True)
class Family:
    """Parameters with one owner and one optimizer."""

    name: str
    params: int
    ownership: str = "replicated"    # one of OWNERSHIP
    optimizer: str = "adamw"         # one of OPTIMIZER_STATES
    pipelined: bool = True           # split across pipeline stages (an embedding on one stage is not)
    tensors: int | None = None       # parameter tensors, for a fused optimizer's device `step` scalars


@dataclass(frozen=True)
class Activations:
    micro_batch: int
    sequence: int
    hidden: int
    layers: int
    heads: int | None = None
    vocab: int | None = None
    recompute: str = "none"          # one of RECOMPUTE
    attention: str = "flash"         # one of ATTENTION


@dataclass(frozen=True)
class Routing:
    top_k: int
    experts: int
    local_experts: int
    capacity_factor: float = 1.0
    moe_layers: int = 1
    tokens: int | None = None        # routed tokens per rank per micro-batch; None: micro_batch x sequence


@dataclass(frozen=True)
class EstimateConfig:
    families: tuple[Family, ...]
    shard_degree: int = 1
    sharding: str = "fsdp"           # one of SHARDING
    tp: int = 1
    pp: int = 1
    ep: int = 1
    sequence_parallel: bool = False
    param_dtype: str = "fp32"
    grad_dtype: str = "fp32"
    master_dtype: str = "fp32"
    activation_dtype: str = "bf16"
    activations: Activations | None = None
    routing: Routing | None = None
    runtime_reserve_bytes: int = 0
    overhead_bytes: int = 0
    device_total_bytes: int | None = None


@dataclass(frozen=True)
class Estimate:
    """Bytes per rank by the seeds' Estimate fields (schema.memory.ESTIMATE_FIELDS), with how each was reached."""

    categories: dict[str, int]
    notes: tuple[str, ...] = ()
    config: EstimateConfig | None = field(default=None, repr=False)
    peak_bytes: int | None = None          # the peak of allocated memory; None: the sum of the allocated fields
    phases: dict[str, int] = field(default_factory=dict)   # allocated bytes at each phase the peak is the max of
    method: str = "closed form"            # or "FSDPMemTracker" / "MemTracker": PyTorch's tracker on the model
    detail: dict[str, Any] = field(default_factory=dict)   # what the tracker ran (model-based estimates)

    @property
    def allocated_bytes(self) -> int:
        """The peak of allocated memory: the largest phase, not the sum of every field (transient terms live
        in part of the step only)."""
        if self.peak_bytes is not None:
            return self.peak_bytes
        return sum(v for k, v in self.categories.items() if ESTIMATE_FIELDS[k] is not None)

    @property
    def total_bytes(self) -> int:
        """What the device must hold: the peak plus the runtime reserve and the allocator overhead."""
        return self.allocated_bytes + sum(v for k, v in self.categories.items() if ESTIMATE_FIELDS[k] is None)

    def buckets(self) -> dict[str, int]:
        """The fields summed into the measured buckets (parameters, gradients, ...)."""
        out: dict[str, int] = {}
        for name, value in self.categories.items():
            bucket = ESTIMATE_FIELDS[name]
            if bucket is not None:
                out[bucket] = out.get(bucket, 0) + value
        return out


def _per_rank(count: int, *divisors: int) -> int:
    """A count split over ranks: the largest share (the rank that decides fit), never a fraction of a parameter."""
    for d in divisors:
        count = -(-count // d)
    return count


def estimate(cfg: EstimateConfig) -> Estimate:
    shard_params, shard_grads, shard_optim = SHARDING[cfg.sharding]
    p_bytes, g_bytes, m_bytes = (DTYPE_BYTES[cfg.param_dtype], DTYPE_BYTES[cfg.grad_dtype],
                                 DTYPE_BYTES[cfg.master_dtype])
    out = {name: 0 for name in ESTIMATE_FIELDS}
    notes: list[str] = []
    owner_field = {"replicated": "replicated_params", "tp": "tensor_parallel_params", "ep": "expert_parallel_params"}
    for f in cfg.families:
        split = {"replicated": 1, "tp": cfg.tp, "ep": cfg.ep}[f.ownership]
        model_share = (split, cfg.pp if f.pipelined else 1)
        d = cfg.shard_degree
        out[owner_field[f.ownership]] += _per_rank(f.params, *model_share, d if shard_params else 1) * p_bytes
        out["gradients"] += _per_rank(f.params, *model_share, d if shard_grads else 1) * g_bytes
        local = _per_rank(f.params, *model_share, d if shard_optim else 1)
        state = OPTIMIZER_STATES[f.optimizer] * local * m_bytes
        if cfg.master_dtype != cfg.param_dtype:
            state += local * m_bytes   # the optimizer's master copy of weights kept in another dtype
        if f.optimizer == "adamw-fused":
            if f.tensors is None:
                notes.append(f"family {f.name}: a fused AdamW keeps a 4-byte step per parameter tensor on the device; "
                             "give `tensors` to count them")
            else:
                state += _per_rank(f.tensors, *model_share) * STEP_SCALAR_BYTES
        out["matrix_optimizer" if f.optimizer in MATRIX_OPTIMIZERS else "other_optimizer"] += state
    if cfg.activations is not None:
        out["activations"] = activation_bytes(cfg.activations, tp=cfg.tp, sequence_parallel=cfg.sequence_parallel,
                                              dtype_bytes=DTYPE_BYTES[cfg.activation_dtype])
    else:
        notes.append("no [activations] section: activations not estimated")
    if cfg.routing is not None:
        a = cfg.activations
        tokens = cfg.routing.tokens or (a.micro_batch * a.sequence if a else None)
        if tokens is None or a is None:
            notes.append("routing needs the activations' hidden size and tokens: not estimated")
        else:
            out["routing"] = routing_bytes(cfg.routing, tokens=tokens, hidden=a.hidden,
                                           dtype_bytes=DTYPE_BYTES[cfg.activation_dtype])
    out.update(transients(cfg, out, notes))
    out["runtime_reserve"] = cfg.runtime_reserve_bytes
    out["overhead"] = cfg.overhead_bytes
    _in_range(out)
    phases = peak_phases(cfg, out)
    _in_range(phases)
    return Estimate(out, tuple(notes), cfg, peak_bytes=max(phases.values()) + out["allocator_rounding"],
                    phases=phases)


def transients(cfg: EstimateConfig, out: dict[str, int], notes: list[str]) -> dict[str, int]:
    """The terms that live in part of a step only (module docstring), per rank."""
    a = cfg.activations
    compute = DTYPE_BYTES[cfg.activation_dtype]
    shard_params = SHARDING[cfg.sharding][0]
    t = {"logits_upcast": 0, "unsharded_params": 0, "collective_buffers": 0, "recompute_working_set": 0,
         "optimizer_temporaries": 0, "allocator_rounding": 0}
    if a is not None:
        layer = 12 * a.hidden * a.hidden // cfg.tp       # a transformer layer: attention 4h², MLP 8h²
        root = 2 * a.vocab * a.hidden // cfg.tp if a.vocab else 0   # embedding and output head, untied
        if a.vocab:
            # cross-entropy over the logits upcast to fp32 keeps the fp32 log-probabilities; backward's start
            # holds them with the gradient of the loss and the gradient of the upcast: three fp32 copies
            t["logits_upcast"] = 3 * a.sequence * a.micro_batch * a.vocab * 4 // cfg.tp
        if shard_params:
            # FSDP keeps the root unit (embedding, head) gathered from forward to the end of backward, and
            # gathers one layer at a time besides; its all-gather output and reduce-scatter input are one layer's
            t["unsharded_params"] = max(root, layer) * compute
            if cfg.shard_degree > 1:
                t["collective_buffers"] = layer * compute + layer * DTYPE_BYTES[cfg.grad_dtype]
        if a.recompute != "none":
            one = Activations(a.micro_batch, a.sequence, a.hidden, 1, a.heads, None, "none", a.attention)
            t["recompute_working_set"] = activation_bytes(one, tp=cfg.tp, sequence_parallel=cfg.sequence_parallel,
                                                          dtype_bytes=compute)
    foreach = [f for f in cfg.families if f.optimizer in ("adamw", "adam")]
    if foreach:
        # torch's foreach AdamW computes the second moment's square root for the whole group at once: one
        # master-dtype tensor per parameter, freed after the step (the fused kernel needs none)
        shard = SHARDING[cfg.sharding][2]
        t["optimizer_temporaries"] = sum(
            _per_rank(f.params, {"replicated": 1, "tp": cfg.tp, "ep": cfg.ep}[f.ownership],
                      cfg.pp if f.pipelined else 1, cfg.shard_degree if shard else 1)
            for f in foreach) * DTYPE_BYTES[cfg.master_dtype]
    tensors = sum(f.tensors or 0 for f in cfg.families)
    if tensors:
        # each live tensor's block is rounded up to 512 bytes: half a block each on average, for the
        # parameters, gradients and each state buffer
        states = max((OPTIMIZER_STATES[f.optimizer] for f in cfg.families), default=0)
        t["allocator_rounding"] = tensors * (2 + states) * 256   # without `tensors`: not counted (under 0.1 %)
    return t


def peak_phases(cfg: EstimateConfig, c: dict[str, int]) -> dict[str, int]:
    """Allocated bytes at the three moments that can hold a step's peak; the peak is the largest.

    - backward_start: what stays (parameters, optimizer state) with every activation saved for backward, the
      routing scratch, the logits' fp32 copies and the gathered root unit;
    - backward_layer: deeper in backward, gradients accumulating as activations are freed (the larger of the
      two), one layer's recomputed activations, the gathered units and the collective buffers;
    - optimizer_step: parameters, gradients, optimizer state and the optimizer's temporaries."""
    params = c["replicated_params"] + c["tensor_parallel_params"] + c["expert_parallel_params"]
    optimizer = c["matrix_optimizer"] + c["other_optimizer"]
    static = params + optimizer
    return {
        "backward_start": static + c["activations"] + c["routing"] + c["logits_upcast"] + c["unsharded_params"],
        "backward_layer": static + max(c["gradients"], c["activations"]) + c["recompute_working_set"]
        + c["unsharded_params"] + c["collective_buffers"],
        "optimizer_step": static + c["gradients"] + c["optimizer_temporaries"],
    }


def _in_range(categories: dict[str, int]) -> None:
    """Every byte count, and their sum, inside 64 bits (what `--json` and the store hold): past it, an input
    is a typo (no device holds 8 EiB)."""
    from receipts.errors import UsageError

    for name, value in [*categories.items(), ("total", sum(categories.values()))]:
        if not 0 <= value < MAX_BYTES:
            raise UsageError(f"the estimate's {name} comes to {value:.3e} bytes per rank, past 2**63 (8 EiB, more "
                             "than any device): check the parameter counts, shapes and sizes given")


def activation_bytes(a: Activations, *, tp: int = 1, sequence_parallel: bool = False, dtype_bytes: int = 2) -> int:
    """Activations a rank holds for backward (module docstring), at the activation dtype."""
    sbh = a.sequence * a.micro_batch * a.hidden
    scale = dtype_bytes / 2  # the formula counts 16-bit activations
    if a.recompute == "full":
        per_layer = 2 * sbh / (tp if sequence_parallel else 1)
    else:
        per_layer = 34 * sbh / tp if sequence_parallel else (10 + 24 / tp) * sbh
        if a.recompute == "none" and a.attention == "eager" and a.heads:
            per_layer += 5 * a.heads * a.sequence * a.sequence * a.micro_batch / tp
    logits = a.sequence * a.micro_batch * a.vocab * 2 / tp if a.vocab else 0
    return int(round((per_layer * a.layers + logits) * scale))


def routing_bytes(r: Routing, *, tokens: int, hidden: int, dtype_bytes: int = 2) -> int:
    """Live routing scratch of a rank's MoE layers (module docstring)."""
    capacity = math.ceil(tokens * r.top_k / r.experts * r.capacity_factor)
    dispatch = tokens * r.top_k * 4
    buffers = 2 * capacity * hidden * r.local_experts * dtype_bytes
    return (dispatch + buffers) * r.moe_layers


def as_geometry(e: Estimate) -> MemoryGeometry:
    """An estimate as the geometry stored on a receipt (kind `estimate`, any rank)."""
    return MemoryGeometry("estimate", None, peak_allocated_bytes=e.allocated_bytes,
                          device_total_bytes=e.config.device_total_bytes if e.config else None,
                          categories=tuple((k, v) for k, v in e.categories.items() if v),
                          detail={"inputs": config_json(e.config), "method": e.method, "phases": e.phases,
                                  **e.detail},
                          warnings=e.notes)


def config_json(cfg: EstimateConfig | None) -> dict[str, Any] | None:
    """The inputs, as plain data (what `estimate --json` echoes and a stored estimate keeps)."""
    if cfg is None:
        return None
    from dataclasses import asdict

    out = asdict(cfg)
    out["families"] = [asdict(f) for f in cfg.families]
    return out


def to_json(e: Estimate) -> dict[str, Any]:
    """The `estimate --json` contract: categories (bytes per rank), their sum into buckets, totals, inputs."""
    out: dict[str, Any] = {"method": e.method, "categories": dict(e.categories), "buckets": e.buckets(),
                           "phases": dict(e.phases), "peak_allocated_bytes": e.allocated_bytes,
                           "allocated_bytes": e.allocated_bytes, "total_bytes": e.total_bytes,
                           "notes": list(e.notes), "inputs": config_json(e.config), **e.detail}
    device = e.config.device_total_bytes if e.config else None
    out["device_total_bytes"] = device
    out["headroom_bytes"] = device - e.total_bytes if device is not None else None
    out["fits"] = out["headroom_bytes"] >= 0 if device is not None else None
    return out


# PyTorch's trackers' categories (torch.distributed._tools: _FSDPRefType, _MemRefType) as the estimate's fields.
TRACKER_FIELDS = {"Sharded Param": "replicated_params", "Parameter": "replicated_params", "Buffer": "buffers",
                  "Sharded Grad": "gradients", "Gradient": "gradients", "OptState": "other_optimizer",
                  "Optstate": "other_optimizer", "Activation": "activations", "Inputs": "inputs",
                  "Unsharded Param": "unsharded_params", "Unsharded Grad": "unsharded_grads",
                  "All Gather": "collective_buffers", "Reduce Scatter": "collective_buffers",
                  "Temp": "temporaries", "Other": "inputs"}   # MemTracker's Other: the batch, all it is handed


def from_tracker(tracked: dict[str, Any], *, runtime_reserve_bytes: int = 0, overhead_bytes: int = 0,
                 device_total_bytes: int | None = None) -> Estimate:
    """A model-based estimate (capture/model_estimate.track: PyTorch's tracker at its peak) as an Estimate: its
    categories mapped onto the estimate's fields, its peak the estimate's peak."""
    out = {name: 0 for name in ESTIMATE_FIELDS}
    notes: list[str] = []
    for name, value in tracked["categories"].items():
        target = TRACKER_FIELDS.get(name)
        if target is None:
            target = "temporaries"
            notes.append(f"the tracker's category {name!r} is counted as temporaries")
        out[target] += int(value)
    out["runtime_reserve"], out["overhead"] = runtime_reserve_bytes, overhead_bytes
    _in_range(out)
    cfg = EstimateConfig(families=(Family("model", max(1, int(tracked.get("model_params") or 1))),),
                         shard_degree=int(tracked.get("world_size") or 1), runtime_reserve_bytes=runtime_reserve_bytes,
                         overhead_bytes=overhead_bytes, device_total_bytes=device_total_bytes)
    detail = {"tracker": {k: tracked.get(k) for k in ("factory", "world_size", "mesh_shape", "device", "torch",
                                                       "model_params", "categories")}}
    return Estimate(out, tuple(notes), cfg, peak_bytes=int(tracked["peak_bytes"]), method=str(tracked["tracker"]),
                    detail=detail)


def attach(store: "Store", ref: str, e: Estimate, *, described_as: str) -> tuple[str, bool]:
    """Store the estimate on a receipt (its source: the estimate's inputs, hashed, named `described_as`: the
    config file or the flags). Returns the receipt id and whether it was new (the same estimate twice: False)."""
    import hashlib
    import json

    from receipts.schema.model import SourceFile

    payload = json.dumps(to_json(e), sort_keys=True, separators=(",", ":")).encode()
    source = SourceFile(described_as, hashlib.sha256(payload).hexdigest(), len(payload), "estimate", "estimate")
    receipt_id = store.resolve(ref)
    return receipt_id, store.attach_memory(receipt_id, (as_geometry(e),), source)
