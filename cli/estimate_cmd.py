"""`receipts estimate`: the memory a rank will hold, by bucket, before launch (analysis/estimate.py)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Optional

import typer

from receipts.cli.context import console, handle_errors, print_json, settings


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
    attach: Optional[str] = typer.Option(None, "--attach", help="Store the estimate on this receipt (id, prefix or "
                                                                "run name): `show` puts it beside what was measured."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output: `categories` in bytes per rank."),
) -> None:
    """Estimate a rank's memory by bucket before launch: parameters by ownership, gradients, optimizer state, activations, routing, reserve.

    Example: receipts estimate --params 67170304 --shard-degree 2 --optimizer adamw --master-dtype fp32 --json
    """
    from receipts.analysis import estimate as est
    from receipts.analysis.estimate_config import read_config, with_flags
    from receipts.errors import UsageError

    params = None if params_text is None else parameter_count(params_text)
    for value, name, allowed in ((optimizer, "--optimizer", est.OPTIMIZER_STATES),
                                 (master_dtype, "--master-dtype", est.DTYPE_BYTES),
                                 (recompute, "--recompute", est.RECOMPUTE)):
        if value is not None and value not in allowed:
            raise UsageError(f"{name} {value!r} is not one of {', '.join(allowed)}")
    cfg = with_flags(read_config(config) if config is not None else None, params=params, shard_degree=shard_degree,
                     optimizer=optimizer, master_dtype=master_dtype, micro_batch=micro_batch, sequence=sequence,
                     hidden=hidden, layers=layers, vocab=vocab, recompute=recompute)
    result = est.estimate(cfg)
    out = est.to_json(result)
    if attach is not None:
        flags = [f"--{name.replace('_', '-')}={value}" for name, value in (
            ("params", params), ("shard_degree", shard_degree), ("optimizer", optimizer),
            ("master_dtype", master_dtype), ("micro_batch", micro_batch), ("sequence", sequence), ("hidden", hidden),
            ("layers", layers), ("vocab", vocab), ("recompute", recompute)) if value is not None]
        described = shlex.join(["receipts", "estimate", *([str(config.resolve())] if config else []), *flags])
        with settings(ctx).store() as store:
            receipt_id, created = est.attach(store, attach, result, described_as=described)
        out["attached"] = {"receipt_id": receipt_id, "created": created}
    if as_json:
        print_json(out)
        return
    from receipts.cli.memory_render import render_estimate

    render_estimate(out)
    if attach is not None:
        console.print(("attached to " if out["attached"]["created"] else "unchanged: already attached to ")
                      + out["attached"]["receipt_id"])
