"""The lane's command-line options, declared once: `ingest`, `run` and `retag` take one `claim: IdentityClaim`
parameter, and `claim_options` gives the command an option per field of the lane in its place (schema/lane.py
OPTION: --host-lineage, --preset, --regime), each command with its own help, and hands the command the claim they
make together. A field added to the lane is then a help line in each command, never a new parameter threaded
through them."""

from __future__ import annotations

import functools
import inspect
from typing import Callable, Optional

import typer

from receipts.schema.lane import FIELDS, OPTION, IdentityClaim


def claim_options(*helps: str) -> Callable[[Callable], Callable]:
    """Replace the command's `claim` parameter by one option per field, `helps` in FIELDS' order."""
    if len(helps) != len(FIELDS):
        raise TypeError(f"claim_options needs one help per lane field ({', '.join(FIELDS)}), got {len(helps)}")

    def decorate(fn: Callable) -> Callable:
        signature = inspect.signature(fn)
        names = [OPTION[f] for f in FIELDS]
        options = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Optional[str],
                                     default=typer.Option(None, "--" + name.replace("_", "-"), help=text))
                   for name, text in zip(names, helps)]
        params = [p for param in signature.parameters.values() for p in (options if param.name == "claim" else [param])]

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            claimed = {name: kwargs.pop(name, None) for name in names}
            return fn(*args, claim=IdentityClaim.of_options(claimed), **kwargs)

        wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        return wrapper

    return decorate
