"""The memory a rank will hold, from the model itself: PyTorch's own tracker over two training steps of the user's
model under FakeTensorMode, with a fake process group of the requested world size (no device memory is used, so
any world size fits on one machine, or on none).

The user's factory (`module:function`, or `path/to/script.py:function`) is called inside FakeTensorMode after the
fake process group is up. It builds the model as it will train (fully_shard, activation checkpointing, dtypes),
and returns `(model, optimizer, batch)` or `(model, optimizer, batch, loss_fn)`, or a dict with those keys:
`loss_fn(model, batch)` returns the loss; without it the loss is `model(*batch)` (a tuple batch) or
`model(batch)`. A factory that takes a `mesh` argument is given the device mesh of the requested shape.

A model that fully_shard wrapped is tracked by `torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker`,
another by `torch.distributed._tools.mem_tracker.MemTracker`; the first step creates the optimizer state, the
second is the one measured (as torchtitan's estimator does). The result is plain data: the tracker's categories
at its peak (bytes, per its own names), the peak, and what was run.

Standard library and torch (imported when called); no store, no dataframe stack.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any, Callable


class FactoryError(Exception):
    """The factory could not be found, raised, or returned something else than model, optimizer and batch."""

    def __init__(self, spec: str, message: str) -> None:
        super().__init__(f"{spec}: {message}")
        self.spec, self.message = spec, message


def load_factory(spec: str) -> Callable[..., Any]:
    """`module:function` or `path/to/script.py:function` -> the function (the script is imported, not run as
    __main__, so a guarded training loop in it does not start)."""
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name.isidentifier():
        raise FactoryError(spec, "expected module:function or path/to/script.py:function")
    try:
        if target.endswith(".py"):
            path = Path(target)
            if not path.is_file():
                raise FactoryError(spec, f"no script at {path}")
            module_spec = importlib.util.spec_from_file_location(f"_receipts_model_{path.stem}", path)
            if module_spec is None or module_spec.loader is None:
                raise FactoryError(spec, f"{path} cannot be imported as a Python module")
            module = importlib.util.module_from_spec(module_spec)
            sys.path.insert(0, str(path.resolve().parent))
            try:
                module_spec.loader.exec_module(module)
            finally:
                sys.path.remove(str(path.resolve().parent))
        else:
            module = importlib.import_module(target)
    except FactoryError:
        raise
    except Exception as exc:   # the user's module: any error it raises on import is theirs to see, in one line
        raise FactoryError(spec, f"importing {target} raised {type(exc).__name__}: {exc}") from exc
    factory = getattr(module, name, None)
    if not callable(factory):
        raise FactoryError(spec, f"{target} has no function {name}")
    return factory


def _unpack(spec: str, built: Any) -> tuple[Any, Any, Any, Callable[[Any, Any], Any] | None]:
    if isinstance(built, dict):
        built = tuple(built.get(k) for k in ("model", "optimizer", "batch", "loss_fn"))
    if not isinstance(built, tuple) or len(built) not in (3, 4):
        raise FactoryError(spec, f"returned {type(built).__name__}; expected (model, optimizer, batch) or "
                                 "(model, optimizer, batch, loss_fn)")
    model, optimizer, batch, loss_fn = (*built, None) if len(built) == 3 else built
    import torch

    if not isinstance(model, torch.nn.Module):
        raise FactoryError(spec, f"returned a model of type {type(model).__name__}; expected a torch.nn.Module")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise FactoryError(spec, f"returned an optimizer of type {type(optimizer).__name__}; expected a "
                                 "torch.optim.Optimizer")
    if loss_fn is not None and not callable(loss_fn):
        raise FactoryError(spec, "returned a loss_fn that is not callable")
    return model, optimizer, batch, loss_fn


def track(spec: str, *, world_size: int = 1, mesh_shape: tuple[int, ...] | None = None,
          device: str | None = None) -> dict[str, Any]:
    """Run the factory's model for two steps under the tracker; returns {tracker, peak_bytes, categories (the
    tracker's names -> bytes at the peak), world_size, mesh_shape, device, torch, model_params}."""
    factory = load_factory(spec)
    import torch
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    shape = tuple(mesh_shape) if mesh_shape else (world_size,)
    if _product(shape) != world_size:
        raise FactoryError(spec, f"a mesh of shape {'x'.join(map(str, shape))} is not {world_size} ranks")
    device_type = device or ("cuda" if torch.cuda.is_available() else "cpu")
    started_here = not dist.is_initialized()
    if started_here:
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    try:
        mesh = init_device_mesh(device_type, shape)   # outside FakeTensorMode, as the mesh's own tensors must be
        with FakeTensorMode(), torch.device(device_type):
            try:
                wants_mesh = "mesh" in inspect.signature(factory).parameters
                model, optimizer, batch, loss_fn = _unpack(spec, factory(mesh=mesh) if wants_mesh else factory())
            except FactoryError:
                raise
            except Exception as exc:
                raise FactoryError(spec, f"raised {type(exc).__name__}: {exc}") from exc
            return _run(spec, model, optimizer, batch, loss_fn) | {
                "world_size": world_size, "mesh_shape": list(shape), "device": device_type,
                "torch": torch.__version__, "factory": spec}
    finally:
        if started_here and dist.is_initialized():
            dist.destroy_process_group()


def _run(spec: str, model: Any, optimizer: Any, batch: Any, loss_fn: Any) -> dict[str, Any]:
    import torch
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.distributed.fsdp import FSDPModule

    inputs = tuple(t for t in (batch if isinstance(batch, (tuple, list)) else (batch,)) if isinstance(t, torch.Tensor))
    if isinstance(model, FSDPModule):
        tracker: Any = FSDPMemTracker(model, optimizer)  # type: ignore[arg-type, unused-ignore]  # FSDPModule is no nn.Module to mypy; torch is absent in CI
        tracker.track_inputs(inputs)
    else:   # MemTracker counts the batch it is handed as `Other`
        tracker = MemTracker()
        tracker.track_external(model, optimizer, *inputs)
    params = sum(int(p.numel()) for p in model.parameters())
    with tracker:
        for step in range(2):
            try:
                loss = loss_fn(model, batch) if loss_fn is not None else (
                    model(*batch) if isinstance(batch, tuple) else model(batch))
                if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                    raise FactoryError(spec, "the loss is not a one-element tensor; return a loss_fn(model, batch) "
                                             "that computes it")
                loss.backward()
                del loss
                optimizer.step()
                optimizer.zero_grad()
            except FactoryError:
                raise
            except Exception as exc:
                raise FactoryError(spec, f"a training step of the model raised {type(exc).__name__}: {exc}") from exc
            if step == 0:
                tracker.reset_mod_stats()   # the first step has no optimizer state yet: the second is measured
    peaks = tracker.get_tracker_snapshot("peak")
    dev, snap = max(peaks.items(), key=lambda kv: kv[1].get("Total", 0))
    categories = {str(getattr(k, "value", k)): int(v) for k, v in snap.items() if str(k) != "Total" and v}
    return {"tracker": type(tracker).__name__, "peak_bytes": int(snap.get("Total", 0)), "categories": categories,
            "model_params": params, "tracked_device": str(dev)}


def _product(shape: tuple[int, ...]) -> int:
    out = 1
    for n in shape:
        out *= n
    return out
