"""The training recipe the recorder can see from the objects it is handed: the optimizer's class and settings, the
parameters' dtypes (stored, computed, reduced), the device mesh, which modules are checkpointed, whether the model
is compiled. Each fact is one flat name -> scalar (the RECEIPT footer's `recipe`, docs/receipt-format.md), so a
comparison names the fact that changed: `optimizer.class: AdamW -> SGD`.

Standard library plus the objects the caller hands over: torch is read through attributes, never imported here.
"""

from __future__ import annotations

from typing import Any

# Settings an optimizer's group carries that change its memory or its maths (the rest, such as `params`, or
# `differentiable`, are not the recipe). Other scalar settings of an optimizer torch adds later are kept too.
_SKIP = {"params", "initial_lr", "differentiable", "capturable", "maximize", "decoupled_weight_decay"}


def _scalar(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else str(value)
    if isinstance(value, (tuple, list)) and all(isinstance(v, (int, float, bool)) for v in value):
        return ",".join(str(v) for v in value)
    item = getattr(value, "item", None)   # a tensor learning rate (a scheduler's, on the device: one read)
    if callable(item) and getattr(value, "numel", lambda: 2)() == 1:
        return _scalar(item())
    return None


def _dtype(value: Any) -> str | None:
    return None if value is None else str(value).removeprefix("torch.")


def optimizer_facts(optimizer: Any) -> dict[str, Any]:
    """optimizer.class, optimizer.<setting> of its first group, optimizer.param_groups."""
    out: dict[str, Any] = {"optimizer.class": type(optimizer).__name__}
    groups = list(getattr(optimizer, "param_groups", []) or [])
    out["optimizer.param_groups"] = len(groups)
    if groups:
        for key in sorted(groups[0]):
            if key in _SKIP:
                continue
            value = _scalar(groups[0][key])
            if value is not None:
                out[f"optimizer.{key}"] = value
    return out


def model_facts(model: Any) -> dict[str, Any]:
    """Dtypes (param: as stored; compute / reduce: FSDP2's mixed precision policy), the device mesh, checkpointed
    modules and compile state of a torch module."""
    out: dict[str, Any] = {}
    params = list(model.parameters()) if hasattr(model, "parameters") else []
    dtypes = sorted(d for d in {_dtype(p.dtype) for p in params if hasattr(p, "dtype")} if d is not None)
    if dtypes:
        out["dtype.param"] = ",".join(d for d in dtypes if d)
    policy = _mp_policy(model)
    if policy is not None:
        out["dtype.compute"] = _dtype(getattr(policy, "param_dtype", None)) or out.get("dtype.param")
        out["dtype.reduce"] = _dtype(getattr(policy, "reduce_dtype", None)) or out.get("dtype.compute")
        out["parallel.sharding"] = "fsdp2"
    mesh = next((getattr(p, "device_mesh", None) for p in params if getattr(p, "device_mesh", None) is not None), None)
    if mesh is not None:
        out["parallel.mesh_shape"] = "x".join(str(n) for n in tuple(mesh.shape))
        names = getattr(mesh, "mesh_dim_names", None)
        if names:
            out["parallel.mesh_dims"] = ",".join(str(n) for n in names)
    # by the classes' names along the MRO: fully_shard makes each module an instance of an `FSDP<Class>` subclass
    wrapped = [m for m in _modules(model) if _is(m, "CheckpointWrapper")]
    inner = sorted({type(getattr(m, "_checkpoint_wrapped_module", m)).__name__ for m in wrapped})
    out["checkpoint.modules"] = len(wrapped)
    out["checkpoint.classes"] = ",".join(inner) or "none"  # a known none: recompute switched on is then drift
    compiled = [m for m in _modules(model) if _is(m, "OptimizedModule")
                or getattr(m, "_compiled_call_impl", None) is not None]
    out["compile"] = "model" if compiled and compiled[0] is model else (f"{len(compiled)} modules" if compiled
                                                                        else "none")
    return out


def _is(obj: Any, class_name: str) -> bool:
    return any(c.__name__ == class_name for c in type(obj).__mro__)


def _modules(model: Any) -> list[Any]:
    modules = getattr(model, "modules", None)
    return list(modules()) if callable(modules) else []


def _mp_policy(model: Any) -> Any:
    """FSDP2's MixedPrecisionPolicy of the root module (fully_shard), None for another module."""
    state = getattr(model, "_get_fsdp_state", None)
    if not callable(state):
        return None
    try:
        group = getattr(state(), "_fsdp_param_group", None)
    except Exception:   # noqa: BLE001 - private API: a torch that moved it loses the dtypes, not the run
        return None
    return getattr(group, "mp_policy", None)
