"""`receipts estimate`'s inputs: a TOML file, flags for the common case, or both (flags win).

    [parallel]
    shard_degree = 8          # FSDP / ZeRO data-parallel degree the state is sharded over
    sharding = "fsdp"         # fsdp (= zero3) | zero2 | zero1 | none
    tp = 1
    pp = 1
    ep = 1
    sequence_parallel = false

    [precision]
    param_dtype = "fp32"      # the stored (sharded) parameters: fp32 | bf16 | fp16 | fp8
    grad_dtype = "fp32"
    master_dtype = "fp32"     # the optimizer's state (and master weights)
    activation_dtype = "bf16"

    [[families]]              # one per parameter family
    name = "experts"
    params = 6_442_450_944
    ownership = "ep"          # replicated | tp | ep
    optimizer = "adamw"       # adamw | adamw-fused | sgd | sgd-plain | muon
    pipelined = true          # split across pipeline stages
    tensors = 96              # parameter tensors (a fused AdamW's device step scalars)

    [activations]
    micro_batch = 1
    sequence = 4096
    hidden = 4096
    layers = 32
    heads = 32
    vocab = 131072
    recompute = "selective"   # none | selective | full
    attention = "flash"       # flash | eager

    [routing]                 # MoE layers' dispatch and combine scratch
    top_k = 2
    experts = 128
    local_experts = 4
    capacity_factor = 1.2
    moe_layers = 16

    [budget]
    runtime_reserve = "4GiB"  # sizes: bytes, or text with a unit (B, KB, MB, GB, KiB, MiB, GiB, ...)
    overhead = "1.5GiB"
    device_total = "141GB"

Every problem is one InputError naming the file and the key; unknown keys are refused (a misspelt key must
not fall back to a default unnoticed).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from receipts.analysis.claims import parse_size
from receipts.analysis.estimate import (ATTENTION, DTYPE_BYTES, OPTIMIZER_STATES, OWNERSHIP, RECOMPUTE, SHARDING,
                                        Activations, EstimateConfig, Family, Routing)
from receipts.errors import InputError, UsageError
from receipts.schema.toml_file import read_toml

MAX_COUNT = 2**53   # counts and sizes past this are typos, and their products would leave 64 bits
_SECTIONS = ("parallel", "precision", "families", "activations", "routing", "budget")
_PARALLEL = {"shard_degree": "count", "sharding": SHARDING, "tp": "count", "pp": "count", "ep": "count",
             "sequence_parallel": "flag"}
_PRECISION = {"param_dtype": DTYPE_BYTES, "grad_dtype": DTYPE_BYTES, "master_dtype": DTYPE_BYTES,
              "activation_dtype": DTYPE_BYTES}
_FAMILY = {"name": "text", "params": "count", "ownership": OWNERSHIP, "optimizer": OPTIMIZER_STATES,
           "pipelined": "flag", "tensors": "count"}
_ACTIVATIONS = {"micro_batch": "count", "sequence": "count", "hidden": "count", "layers": "count", "heads": "count",
                "vocab": "count", "recompute": RECOMPUTE, "attention": ATTENTION}
_ROUTING = {"top_k": "count", "experts": "count", "local_experts": "count", "capacity_factor": "number",
            "moe_layers": "count", "tokens": "count"}
_BUDGET = {"runtime_reserve": "size", "overhead": "size", "device_total": "size"}


class _Reader:
    def __init__(self, path: Path) -> None:
        self.path = path

    def table(self, value: Any, key: str, spec: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise InputError(self.path, f"key {key} must be a table")
        for name in value:
            if name not in spec:
                raise InputError(self.path, f"unknown key {key}.{name}; expected one of {', '.join(spec)}")
        for name in required:
            if name not in value:
                raise InputError(self.path, f"key {key}.{name} is missing")
        return {name: self.value(v, f"{key}.{name}", spec[name]) for name, v in value.items()}

    def value(self, v: Any, key: str, kind: Any) -> Any:
        if isinstance(kind, (tuple, dict)):
            if not isinstance(v, str) or v not in kind:
                raise InputError(self.path, f"key {key} must be one of {', '.join(kind)}, found {v!r}")
            return v
        if kind == "count":
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_COUNT:
                raise InputError(self.path, f"key {key} must be a whole number from 1 to 2**53, found {v!r}")
            return v
        if kind == "number":
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or v == float("inf"):
                raise InputError(self.path, f"key {key} must be a finite number > 0, found {v!r}")
            return float(v)
        if kind == "flag":
            if not isinstance(v, bool):
                raise InputError(self.path, f"key {key} must be true or false, found {v!r}")
            return v
        if kind == "size":
            if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_COUNT:
                return v
            try:
                size = parse_size(v) if isinstance(v, str) else None
            except (ValueError, OverflowError) as exc:
                raise InputError(self.path, f"key {key}: {exc}") from None
            if size is None or not 0 <= size <= MAX_COUNT:
                raise InputError(self.path, f"key {key} must be a size in bytes or with a unit (e.g. 4GiB), "
                                            "up to 2**53 bytes, "
                                            f"found {v!r}")
            return size
        if not isinstance(v, str) or not v.strip():
            raise InputError(self.path, f"key {key} must be non-empty text, found {v!r}")
        return v


def read_config(path: Path) -> EstimateConfig:
    """An EstimateConfig from a TOML file (module docstring)."""
    path = Path(path)
    data = read_toml(path, "estimate config")
    r = _Reader(path)
    for name in data:
        if name not in _SECTIONS:
            raise InputError(path, f"unknown section [{name}]; expected {', '.join(_SECTIONS)}")
    parallel = r.table(data.get("parallel", {}), "parallel", _PARALLEL)
    precision = r.table(data.get("precision", {}), "precision", _PRECISION)
    raw_families = data.get("families", [])
    if not isinstance(raw_families, list) or not raw_families:
        raise InputError(path, "key families must be an array of tables ([[families]]), at least one")
    families = []
    for i, f in enumerate(raw_families):
        values = r.table(f, f"families[{i}]", _FAMILY, required=("params",))
        families.append(Family(**{"name": f"family {i}", **values}))
    activations = routing = None
    if "activations" in data:
        activations = Activations(**r.table(data["activations"], "activations", _ACTIVATIONS,
                                            required=("micro_batch", "sequence", "hidden", "layers")))
    if "routing" in data:
        routing = Routing(**r.table(data["routing"], "routing", _ROUTING,
                                    required=("top_k", "experts", "local_experts")))
    budget = r.table(data.get("budget", {}), "budget", _BUDGET)
    if routing is not None and activations is None:
        raise InputError(path, "key routing needs an [activations] section (its hidden size and tokens)")
    return EstimateConfig(
        families=tuple(families), activations=activations, routing=routing,
        runtime_reserve_bytes=budget.get("runtime_reserve", 0), overhead_bytes=budget.get("overhead", 0),
        device_total_bytes=budget.get("device_total"), **parallel, **precision)


def with_flags(cfg: EstimateConfig | None, *, params: int | None = None, shard_degree: int | None = None,
               optimizer: str | None = None, master_dtype: str | None = None, micro_batch: int | None = None,
               sequence: int | None = None, hidden: int | None = None, layers: int | None = None,
               vocab: int | None = None, recompute: str | None = None,
               device_total_bytes: int | None = None, runtime_reserve_bytes: int | None = None) -> EstimateConfig:
    """Flags over a config (or over nothing: `params` then makes the one family). `params` replaces the
    families with one replicated family of that many parameters; `optimizer` applies to every family;
    `master_dtype` sets the parameters', gradients' and optimizer state's dtype."""
    if cfg is None and params is None:
        raise UsageError("is needed without a config file (the model's parameter count)", option="params")
    cfg = cfg or EstimateConfig(families=())
    if params is not None:
        cfg = replace(cfg, families=(Family("model", params),))
    if optimizer is not None:
        cfg = replace(cfg, families=tuple(replace(f, optimizer=optimizer) for f in cfg.families))
    if shard_degree is not None:
        cfg = replace(cfg, shard_degree=shard_degree)
    if master_dtype is not None:
        cfg = replace(cfg, param_dtype=master_dtype, grad_dtype=master_dtype, master_dtype=master_dtype)
    if device_total_bytes is not None:
        cfg = replace(cfg, device_total_bytes=device_total_bytes)
    if runtime_reserve_bytes is not None:
        cfg = replace(cfg, runtime_reserve_bytes=runtime_reserve_bytes)
    shape: dict[str, Any] = {k: v for k, v in (("micro_batch", micro_batch), ("sequence", sequence), ("hidden", hidden),
                               ("layers", layers), ("vocab", vocab), ("recompute", recompute)) if v is not None}
    if shape:
        if cfg.activations is not None:
            cfg = replace(cfg, activations=replace(cfg.activations, **shape))
        else:
            missing = [k for k in ("micro_batch", "sequence", "hidden", "layers") if k not in shape]
            if missing:
                raise UsageError("is needed to estimate activations, as are the micro-batch, sequence, hidden "
                                 "size and layers", option=missing[0])
            cfg = replace(cfg, activations=Activations(**shape))
    return cfg
