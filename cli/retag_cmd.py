"""`receipts retag RUN ... --why TEXT`: correct a stored receipt's claimed identity, with an audit trail."""

from __future__ import annotations

from typing import List, Optional

import typer
from rich.markup import escape

from receipts.cli.claim_options import claim_options
from receipts.cli.context import console, err_console, handle_errors, print_json, settings
from receipts.schema.lane import IdentityClaim


def register(app: typer.Typer) -> None:
    app.command("retag")(retag)


@handle_errors
@claim_options("New host lineage (registry name or alias).", "New preset name or alias.",
               'New launch regime, e.g. "fsdp2/regional-compile".')
def retag(
    ctx: typer.Context,
    ref: str = typer.Argument(..., help="Receipt id, unique id prefix, or run name."),
    claim: IdentityClaim = IdentityClaim(),  # --host-lineage, --preset, --regime: cli/claim_options.py
    run_name: Optional[str] = typer.Option(None, "--run-name", help="New run name."),
    tag: List[str] = typer.Option([], "--tag", help="Add a lineage tag (repeatable)."),
    untag: List[str] = typer.Option([], "--untag", help="Remove a lineage tag (repeatable)."),
    why: str = typer.Option(..., "--why", help="Why the identity changes; kept in the receipt's identity history."),
    strict: bool = typer.Option(False, "--strict", help="Refuse values the registry does not know (exit 2)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Change a receipt's claimed identity; raw values are re-resolved through the registry, and the old
    identity is kept (who, when, why) in an append-only history that `show` prints.

    Example: receipts retag run_b --regime "fsdp2/regional-compile" --why "launched with regional compile; the log does not say"
    """
    from receipts.lifecycle import retag as retag_receipt  # the store's writes (polars): not for `retag --help`
    from receipts.schema.identity import IdentityChange

    cfg = settings(ctx)
    change = IdentityChange(claim, run_name, tuple(tag), tuple(untag))
    with cfg.existing_store() as store:
        outcome = retag_receipt(store, ref, change, why=why, registry=cfg.registry(strict=strict))
    if as_json:
        print_json({"receipt_id": outcome.receipt_id, "seq": outcome.seq, "complete": outcome.complete,
                    "changed": {k: {"old": old, "new": new} for k, (old, new) in outcome.changed.items()},
                    "warnings": list(outcome.warnings)})
        return
    console.print(f"retagged {outcome.receipt_id} (identity history #{outcome.seq})")
    for column, (old, new) in outcome.changed.items():
        console.print(f"  {column}: {escape(repr(old))} -> {escape(repr(new))}")
    if not outcome.complete:
        err_console.print(f"  warning: identity still incomplete: {outcome.receipt_id} remains a rumor")
    for w in outcome.warnings:
        err_console.print(f"  warning: {escape(w)}")
