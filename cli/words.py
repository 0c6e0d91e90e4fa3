"""The command line's words for the facts the library states: a parameter as the flag that sets it, a remedy
(errors.Remedy) as the option to give or the command to run. The library names parameters and remedies; only
here do they become `--flags` and `receipts ...` command lines."""

from __future__ import annotations

import shlex
from collections.abc import Iterable

from receipts.errors import InputError, ReceiptsError, Remedy


def flag(option: str) -> str:
    """A parameter's flag: `run_name` -> `--run-name`."""
    return "--" + option.replace("_", "-")


def retag_command(receipt: str, values: Iterable[tuple[str, str]], *, why: str = "say why") -> str:
    """The `receipts retag` command line that sets `values` (parameter, value) on `receipt`."""
    flags = [word for option, value in values for word in (flag(option), value)]
    return shlex.join(["receipts", "retag", receipt, *flags, "--why", why])


def remedy_text(remedy: Remedy) -> str:
    """One clause saying what to do, as options and commands of this command line."""
    values = dict(remedy.values)
    receipt = remedy.receipt or "RUN"
    kind = remedy.kind
    if kind == "retag":
        return retag_command(receipt, remedy.values, why="...")
    if kind == "tag_runs":
        tag = values.get("tag", "TAG")
        return f"tag runs at ingest: receipts ingest run.log --tag {tag} (or receipts retag RUN --tag {tag} --why ...)"
    if kind == "attach":
        return f"to attach one: receipts ingest run.sqlite --attach {receipt}"
    if kind == "attach_to":
        return "give --attach RUN"
    if kind == "force":
        return "if it really belongs to that run, attach it with --force (recorded)"
    if kind == "format":
        return "use --format to force one"
    if kind == "not_strict":
        return "add it to receipts.toml, or drop --strict / `strict = true` to keep it as given"
    if kind == "other_run_name":
        return ("give another --run-name, or add --tag to say this is deliberately the same name (or rename the "
                f"other: `receipts retag {receipt} --run-name NEW --why ...`)")
    if kind == "fewer_workers":
        return "retry with fewer --workers (--workers 1 reads them in this process)"
    if kind == "recursive":
        return "its sub-folders are read with -r/--recursive"
    if kind == "without_dask":
        return "or drop --dask to read the ranks in worker processes here"
    raise ValueError(f"no words for remedy {kind!r}")


def with_remedy(text: str, remedy: Remedy | None) -> str:
    return f"{text}; {remedy_text(remedy)}" if remedy is not None else text


def error_text(exc: ReceiptsError) -> str:
    """An error of ours as the command line says it: its parameter as a flag, its remedy as what to type."""
    option, remedy, message = exc.option, exc.remedy, getattr(exc, "message", None)
    if message is None or (option is None and remedy is None):
        return str(exc)
    body = f"{flag(option)} {message}" if option else message
    if isinstance(exc, InputError):
        body = f"{exc.where}: {body}"
    return with_remedy(body, remedy)
