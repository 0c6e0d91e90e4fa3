"""`receipts estimate`: the memory a rank will hold, by bucket, before launch (analysis/estimate.py)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Optional

import typer

from receipts.cli.context import console, handle_errors, settings
from receipts.cli.output import Column, chosen_format, emit, emit_record, format_option


def register(app: typer.Typer) -> None:
    app.command("estimate")(estimate)


MAX_PARAMS = 2**53   # 9e15 parameters: beyond any model, and every byte count stays inside 64 bits
_SCALE = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12}


def parameter_count(text: str) -> int:
    """A parameter count as people write it: 67170304, 67_170_304, 8e9, 8B, 1.5M (powers of 1000)."""
    from decimal import Decimal

    from receipts.errors import UsageError

    body = text.strip().replace("_", "").replace(",", "")
    suffix = body[-1:].upper() if body[-1:].isalpha() and body[-1:].upper() in _SCALE else ""
    try:
        value = Decimal(body[:len(body) - len(suffix)]) * _SCALE[suffix]
    except ArithmeticError:   # InvalidOperation, and Overflow past the context's exponent (1e999999999B)
        value = Decimal(-1)
    # NaN and infinity are Decimals too; a finite one past 2**63 would build a huge int or overflow the store
    if not value.is_finite() or not 1 <= value <= MAX_PARAMS or value != value.to_integral_value():
        raise UsageError(f"--params {text!r} is not a whole, positive parameter count up to 2**53 "
                         "(e.g. 67170304, 8e9, 8B)")
    return int(value)


@handle_errors
def estimate(
    ctx: typer.Context,
    config: Optional[Path] = typer.Argument(None, help="Estimate config (TOML): parameter families and their "
                                                       "ownership, parallel degrees, dtypes, activations, routing, "
                                                       "reserve. Flags override it."),
    model: Optional[str] = typer.Option(None, "--model", metavar="MODULE:FACTORY",
                                        help="Estimate from the model itself: FACTORY (in a module, or "
                                             "path/to/script.py:FACTORY) returns (model, optimizer, batch[, "
                                             "loss_fn]); PyTorch's FSDPMemTracker runs two steps of it under "
                                             "FakeTensorMode with a fake process group (no GPU memory used)."),
    world_size: Optional[int] = typer.Option(None, "--world-size", min=1,
                                             help="--model: ranks of the fake process group (default: "
                                                  "--shard-degree, else 1)."),
    mesh: Optional[str] = typer.Option(None, "--mesh", metavar="AxB",
                                       help="--model: the device mesh's shape, e.g. 2x4 (default: one dimension "
                                            "of --world-size)."),
    params_text: Optional[str] = typer.Option(None, "--params", help="Parameters of the model, as one replicated "
                                                                      "family (replaces the config's families): "
                                                                      "67170304, 8e9, 8B, 1.5M."),
    shard_degree: Optional[int] = typer.Option(None, "--shard-degree", min=1,
                                               help="Ranks the FSDP / ZeRO sharding spreads the state over."),
    optimizer: Optional[str] = typer.Option(None, "--optimizer", help="adamw | adamw-fused | sgd (momentum: one "
                                                                      "buffer) | sgd-plain | muon, for every family."),
    master_dtype: Optional[str] = typer.Option(None, "--master-dtype", help="fp32 | bf16: dtype of the stored "
                                                                            "parameters, gradients and optimizer state."),
    micro_batch: Optional[int] = typer.Option(None, "--micro-batch", min=1, help="Activations: micro-batch size."),
    sequence: Optional[int] = typer.Option(None, "--sequence", min=1, help="Activations: sequence length."),
    hidden: Optional[int] = typer.Option(None, "--hidden", min=1, help="Activations: hidden size."),
    layers: Optional[int] = typer.Option(None, "--layers", min=1, help="Activations: transformer layers."),
    vocab: Optional[int] = typer.Option(None, "--vocab", min=1, help="Activations: vocabulary (the logits)."),
    recompute: Optional[str] = typer.Option(None, "--recompute", help="Activations: none | selective | full."),
    device_total: Optional[str] = typer.Option(None, "--device-total", metavar="SIZE",
                                               help="The device's memory (e.g. 141GB for an H200): the text says "
                                                    "whether the peak fits it with the reserve."),
    reserve: Optional[str] = typer.Option(None, "--reserve", metavar="SIZE",
                                          help="Runtime reserve kept off the device's memory (CUDA context, NCCL, "
                                               "cuBLAS workspaces), e.g. 4GiB."),
    attach: Optional[str] = typer.Option(None, "--attach", help="Store the estimate on this receipt (id, prefix or "
                                                                "run name): `show` puts it beside what was measured."),
    fmt: Optional[str] = format_option(),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output: `categories` in bytes per rank, "
                                                       "`peak_allocated_bytes`, `fits`."),
) -> None:
    """Estimate a rank's memory before launch: by bucket, and its peak (not the sum of the buckets), from a config, flags, or the model itself.

    Example: receipts estimate --params 67170304 --shard-degree 2 --optimizer adamw --master-dtype fp32 --json
    Example: receipts estimate --model tests/gpu/memory_model.py:adamw --world-size 8 --device-total 141GB
    """
    from receipts.analysis import estimate as est
    from receipts.analysis.estimate_config import read_config, with_flags
    from receipts.errors import UsageError

    output = chosen_format(fmt, as_json=as_json)
    sizes = {name: _size(text, name) for name, text in (("--device-total", device_total), ("--reserve", reserve))}
    params = None if params_text is None else parameter_count(params_text)
    for value, name, allowed in ((optimizer, "--optimizer", est.OPTIMIZER_STATES),
                                 (master_dtype, "--master-dtype", est.DTYPE_BYTES),
                                 (recompute, "--recompute", est.RECOMPUTE)):
        if value is not None and value not in allowed:
            raise UsageError(f"{name} {value!r} is not one of {', '.join(allowed)}")
    base = read_config(config) if config is not None else None
    if model is not None:
        shape_flags = [n for n, v in (("--params", params), ("--optimizer", optimizer), ("--master-dtype",
                       master_dtype), ("--micro-batch", micro_batch), ("--sequence", sequence), ("--hidden", hidden),
                       ("--layers", layers), ("--vocab", vocab), ("--recompute", recompute)) if v is not None]
        if shape_flags:
            raise UsageError(f"--model builds the model itself; {', '.join(shape_flags)} describe(s) one for the "
                             "closed form: give one or the other")
        result = _from_model(model, world_size, shard_degree or (base.shard_degree if base else 1), mesh, base,
                             sizes)
    else:
        if world_size is not None or mesh is not None:
            raise UsageError("--world-size and --mesh size the model-based estimate: give --model too "
                             "(the closed form takes --shard-degree)")
        cfg = with_flags(base, params=params, shard_degree=shard_degree, optimizer=optimizer,
                         master_dtype=master_dtype, micro_batch=micro_batch, sequence=sequence, hidden=hidden,
                         layers=layers, vocab=vocab, recompute=recompute, device_total_bytes=sizes["--device-total"],
                         runtime_reserve_bytes=sizes["--reserve"])
        result = est.estimate(cfg)
    out = est.to_json(result)
    if attach is not None:
        flags = [f"--{name.replace('_', '-')}={value}" for name, value in (
            ("model", model), ("world_size", world_size), ("mesh", mesh),
            ("params", params), ("shard_degree", shard_degree), ("optimizer", optimizer),
            ("master_dtype", master_dtype), ("micro_batch", micro_batch), ("sequence", sequence), ("hidden", hidden),
            ("layers", layers), ("vocab", vocab), ("recompute", recompute), ("device_total", device_total),
            ("reserve", reserve)) if value is not None]
        described = shlex.join(["receipts", "estimate", *([str(config.resolve())] if config else []), *flags])
        with settings(ctx).store() as store:
            receipt_id, created = est.attach(store, attach, result, described_as=described)
        out["attached"] = {"receipt_id": receipt_id, "created": created}
    if output in ("json", "jsonl"):
        emit_record(out, output)
        return
    from receipts.cli.memory_render import estimate_rows, render_estimate

    if output in ("tsv", "csv"):
        emit(estimate_rows(out), [Column("field"), Column("bucket"), Column("bytes")], output)
        return
    render_estimate(out)
    if attach is not None:
        console.print(("attached to " if out["attached"]["created"] else "unchanged: already attached to ")
                      + out["attached"]["receipt_id"])


def _size(text: Optional[str], option: str) -> Optional[int]:
    if text is None:
        return None
    from receipts.analysis.claims import parse_size
    from receipts.errors import UsageError

    try:
        value = int(text) if text.isdigit() else parse_size(text)
    except ValueError as exc:
        raise UsageError(f"{option} {exc}") from None
    if not 0 <= value < 2**63:
        raise UsageError(f"{option} {text!r} is not a size from 0 to 8 EiB (e.g. 141GB, 4GiB)")
    return value


def _from_model(spec: str, world_size: Optional[int], default_world: int, mesh: Optional[str], base,
                sizes: dict[str, Optional[int]]):
    """PyTorch's tracker over the user's model (capture/model_estimate.py); its output on stderr, so that --json
    stays one object on stdout."""
    import contextlib
    import sys

    from receipts.analysis import estimate as est
    from receipts.errors import UsageError

    shape = None
    if mesh is not None:
        try:
            shape = tuple(int(n) for n in mesh.lower().split("x"))
        except ValueError:
            shape = ()
        if not shape or min(shape) < 1:
            raise UsageError(f"--mesh {mesh!r} is not a mesh shape such as 8 or 2x4")
        if world_size is not None and _product(shape) != world_size:
            raise UsageError(f"--mesh {mesh} is {_product(shape)} ranks, --world-size {world_size}: give one")
        world_size = _product(shape)
    world_size = world_size or default_world
    try:
        from receipts.capture.model_estimate import FactoryError, track
    except ImportError as exc:
        raise UsageError(f"--model needs torch ({exc}); install the capture extra: pip install "
                         "'gpu-receipts[capture]'") from None
    from receipts.cli.lean_imports import pandas_allowed

    try:
        with contextlib.redirect_stdout(sys.stderr), pandas_allowed():
            tracked = track(spec, world_size=world_size, mesh_shape=shape)
    except FactoryError as exc:
        raise UsageError(f"--model {exc}") from None
    except ImportError as exc:
        raise UsageError(f"--model needs torch with torch.distributed ({exc})") from None
    reserve = sizes["--reserve"] if sizes["--reserve"] is not None else (base.runtime_reserve_bytes if base else 0)
    device = sizes["--device-total"] if sizes["--device-total"] is not None else (
        base.device_total_bytes if base else None)
    return est.from_tracker(tracked, runtime_reserve_bytes=reserve, overhead_bytes=base.overhead_bytes if base else 0,
                            device_total_bytes=device)


def _product(shape: tuple[int, ...]) -> int:
    out = 1
    for n in shape:
        out *= n
    return out
