"""`receipts ingest`: logs and profiler exports into the store."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.markup import escape

from receipts.cli.claim_options import claim_options
from receipts.cli.context import (EXIT_INPUT, console, err_console, handle_errors, one_line,
                                   print_json, report_error, settings)
from receipts.cli.progress import IngestProgress
from receipts.cli.termination import interrupted_exit_code, interruption, stop_if_signalled
from receipts.cli.words import remedy_text, retag_command
from receipts.errors import InputError, UsageError
from receipts.pipeline.execution import RankMap
from receipts.pipeline import IngestFailure, IngestOutcome, ingest_each, ingest_targets
from receipts.schema.categories import load_category_rules
from receipts.schema.lane import OPTION
from receipts.schema.model import IdentityClaim, as_text
from receipts.store import is_server_url


def register(app: typer.Typer) -> None:
    app.command("ingest")(ingest)


@handle_errors
@claim_options("Host lineage (registry name or alias).", "Preset name or alias.",
               'Launch regime, e.g. "fsdp2/regional-compile".')
def ingest(
    ctx: typer.Context,
    paths: List[Path] = typer.Argument(..., help="Training logs, nsys exports (.sqlite / .nsys-rep), Kineto traces "
                                                 "or folders of them, or `receipts run` directories. A folder of "
                                                 "per-rank traces, or of one job's nsys exports (one per rank or "
                                                 "node), is one profile."),
    claim: IdentityClaim = IdentityClaim(),  # --host-lineage, --preset, --regime: cli/claim_options.py
    hostname: Optional[str] = typer.Option(None, "--hostname", help="Hostname, when the log does not say."),
    run_name: Optional[str] = typer.Option(None, "--run-name", help="Name to address the receipt by (default: file stem)."),
    tag: List[str] = typer.Option([], "--tag", help="Lineage tag, e.g. v19c (repeatable). A tag, never identity."),
    fmt: Optional[str] = typer.Option(None, "--format", help="Force a log format instead of sniffing it."),
    attach: Optional[str] = typer.Option(None, "--attach", help="Attach a profiler export, machine facts or a "
                                                                "PyTorch memory snapshot to this receipt."),
    keep_raw: bool = typer.Option(False, "--keep-raw", help="Keep raw profiler events as Parquet, named by the "
                                                            "export's sha256 (beside a DuckDB store by default)."),
    raw_dir: Optional[Path] = typer.Option(None, "--raw-dir", envvar="RECEIPTS_RAW_DIR",
                                           help="Folder for --keep-raw Parquet; needed on a PostgreSQL store "
                                                "(a shared folder its readers can reach)."),
    categories: Optional[Path] = typer.Option(None, "--categories", help="Extra kernel-category rules (TOML)."),
    force: bool = typer.Option(False, "--force", help="With --attach: attach even when the file's GPU model or "
                                                      "count contradicts the receipt (the contradiction is recorded)."),
    strict: bool = typer.Option(False, "--strict", help="Refuse identity values the registry does not know (exit 2) "
                                                        "instead of warning; also `strict = true` in receipts.toml."),
    recursive: bool = typer.Option(False, "-r", "--recursive", help="Also read the sub-folders of a folder of logs."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output: one object per file, with "
                                                        "status ingested / unchanged / failed (and the error)."),
    workers: Optional[int] = typer.Option(None, "--workers", min=1,
                                          help="Worker processes reading a multi-rank profile's traces or a job's "
                                               "nsys exports (one per file at most); 1 reads them in this process. "
                                               "Default: one per core (up to 16) once the files reach 16 MiB."),
    dask: Optional[str] = typer.Option(None, "--dask", envvar="DASK_SCHEDULER_ADDRESS",
                                       help="Read the ranks on Dask (pip install 'gpu-receipts[dask]'): 'local' starts "
                                            "a LocalCluster of --workers processes; a scheduler file (.json) or "
                                            "address (tcp://host:8786) uses a running cluster."),
) -> None:
    """Ingest files; each becomes one receipt (or anatomy attached to one). Idempotent.

    Each file is reported as it goes and stored in its own transaction; a bad file is reported and skipped,
    and the command ends with a summary (exit 2 when any file failed; the others stay stored).

    Example: receipts ingest run_a.log --host-lineage h200-usw1c-bench-01 --preset nam52_h200_dense_ref_v1 --regime "fsdp2/regional-compile"
    """
    cfg = settings(ctx)
    claim = replace(claim, hostname=hostname)
    rules = load_category_rules(categories)
    if keep_raw and raw_dir is None and is_server_url(cfg.db):
        raise UsageError("--keep-raw on a PostgreSQL store needs --raw-dir DIR (or RECEIPTS_RAW_DIR): a server "
                         "has no folder beside it, so name a shared one its readers can reach")
    refuse_shared_run_name(paths, run_name, tag, recursive=recursive)
    registry = cfg.registry(strict=strict)
    rows: list[dict] = []
    said: dict[str, list[str]] = {}  # registry warning -> the files it was raised for (said once, at the end)
    try:
        with cfg.store() as store, IngestProgress(list(paths), err_console, recursive=recursive) as progress:
            if raw_dir is not None:
                store.raw_dir = raw_dir.resolve()
            for item in ingest_each(store, list(paths), identity=claim, run_name=run_name, registry=registry,
                                    attach=attach, tags=tuple(tag), fmt=fmt, rules=rules, keep_raw=keep_raw,
                                    recursive=recursive, force=force, ranks=RankMap(workers, dask, worker_start=_worker_start()),
                                    progress=progress.read if progress.enabled else None):
                rows.append(_row(item))
                progress.done(item.path)
                if not as_json:
                    _say(item, debug=cfg.debug, registry_warnings=said)
                stop_if_signalled()  # a Ctrl-C that DuckDB swallowed while this file was written (cli/termination.py)
    except KeyboardInterrupt:
        _say_registry_warnings(said)
        _summary(rows, as_json, interrupted=True)
        raise typer.Exit(interrupted_exit_code()) from None
    _say_registry_warnings(said)
    _summary(rows, as_json)
    if any(r["status"] == "failed" for r in rows):
        raise typer.Exit(EXIT_INPUT)


def _row(item: IngestOutcome | IngestFailure) -> dict:
    if isinstance(item, IngestFailure):
        exc = item.error
        error: dict[str, Any] = {"type": type(exc).__name__, "message": one_line(exc)}
        if isinstance(exc, InputError):
            error.update(path=str(exc.path), line=exc.line, table=exc.table)
        return {"path": as_text(item.path), "status": "failed", "error": error}
    conflict = item.identity_conflict and {**item.identity_conflict, "retag": _retag(item.identity_conflict)}
    return {"path": as_text(item.path), "status": "ingested" if item.created else "unchanged",
            **{k: v for k, v in item.__dict__.items() if k != "path"},
            "warnings": _warnings(item), "identity_conflict": conflict}


def _retag(conflict: dict) -> str:
    return retag_command(conflict["receipt_id"], conflict["change"])


def _warnings(o: IngestOutcome) -> tuple[str, ...]:
    """The outcome's warnings, with what it states as facts (a forced attachment, a retag to restore) in words."""
    forced = (f"attached with --force despite: {o.forced} (recorded on the source)",) if o.forced else ()
    restore = (f"to restore the superseded receipt's identity: {remedy_text(o.restore)}",) if o.restore else ()
    return o.warnings + forced + restore


# lifecycle.check_claim's "did you mean" warnings (schema.identity.UnknownValue): about a flag's or receipt.toml's
# value, so the same for every file of a batch.
_REGISTRY_WARNING = re.compile(r"^(?:host lineage|preset|regime) '.*' .*(?:; did you mean '.*'\?|; no registry entry is close)$")


def _say_registry_warnings(said: dict[str, list[str]]) -> None:
    """The registry's warnings once for the batch, naming the files each concerns: first those that change what
    a receipt can be compared with (a regime naming no engine, a value with a near registry entry: a typo?),
    then, in one note, the values merely kept as given (a store without a registry of its own says that of every
    host and preset, which is no problem)."""
    def files(paths: list[str]) -> str:
        return paths[0] if len(paths) == 1 else f"{len(paths)} files: {', '.join(paths[:5])}" + (
            f" and {len(paths) - 5} more" if len(paths) > 5 else "")

    plain = {w: paths for w, paths in said.items() if _KEPT_AS_GIVEN.match(w)}
    for warning, paths in said.items():
        if warning not in plain:
            err_console.print(f"warning: {escape(warning)} ({escape(files(paths))})")
    if plain:
        values = [_KEPT_AS_GIVEN.match(w).group(1) for w in plain]  # type: ignore[union-attr]
        paths = sorted({p for ps in plain.values() for p in ps}, key=[p for ps in plain.values() for p in ps].index)
        err_console.print(f"note: {escape(' and '.join(values))} {'is' if len(values) == 1 else 'are'} not in the "
                          f"registry, kept as given (no entry is close; receipts.toml names a team's) "
                          f"({escape(files(paths))})")


# A host or preset the registry does not know and nothing in it resembles: kept as its own value, no action needed.
_KEPT_AS_GIVEN = re.compile(r"^((?:host lineage|preset) '.*') is not in the registry; no registry entry is close$")


def _say(item: IngestOutcome | IngestFailure, *, debug: bool, registry_warnings: dict[str, list[str]]) -> None:
    """One line per file as it goes (user text escaped: a run name may hold rich markup), then its warnings;
    the registry's are kept in `registry_warnings`, to be said once for the batch."""
    if isinstance(item, IngestFailure):
        # The path leads unless the error already names it (an InputError does, with its line).
        named = isinstance(item.error, InputError) and str(item.error.path) == item.path
        report_error(item.error, debug=debug, prefix="" if named else f"{item.path}: ", label="FAILED")
        return
    o = item
    what = {"receipt": "receipt", "anatomy": "anatomy attached to",
            "memory": "memory geometry attached to"}.get(o.kind, f"{o.kind} facts attached to")
    where = escape(f"{what} {o.receipt_id} ({o.run_name})")
    if o.created:
        console.print(f"ingested {escape(o.path)} -> {where}")
    else:
        console.print(f"unchanged: {escape(o.path)} is already in the store as {where}")
    if o.identity_conflict:
        c = o.identity_conflict
        err_console.print(f"  warning: identity conflict: {c['receipt_id']} is stored with "
                          f"{escape(_fields(c['stored']))}, this ingest asked for {escape(_fields(c['asked']))}; "
                          f"nothing was changed. To change it: {escape(_retag(c))}")
    if o.ended_early:
        err_console.print(f"  warning: ended early: {escape(o.ended_early)}")
    for w in _warnings(o):
        if _REGISTRY_WARNING.match(w):
            registry_warnings.setdefault(w, []).append(o.path)
        else:
            err_console.print(f"  warning: {escape(w)}")
    if o.complete is False:
        flags = " ".join(f"--{OPTION[m].replace('_', '-')} {OPTION[m][0].upper()}" for m in o.missing)
        err_console.print(f"  warning: identity incomplete: {o.receipt_id} is stored as a rumor without "
                          f"{', '.join(o.missing)}; every comparison with it will be refused (to complete it: "
                          f"`receipts retag {o.receipt_id} {flags} --why ...`)")


def _summary(rows: list[dict], as_json: bool, *, interrupted: bool = False) -> None:
    counts = {k: sum(r["status"] == k for r in rows) for k in ("ingested", "unchanged", "failed")}
    if as_json:
        print_json(rows)
        return
    if len(rows) == 1 and not interrupted:
        return  # one file: its own line says it all
    line = f"{counts['ingested']} ingested, {counts['unchanged']} unchanged, {counts['failed']} failed"
    if interrupted:
        line += f"; {interruption()}: the files before it are stored, the one in progress is not"
    elif counts["failed"] and (counts["ingested"] or counts["unchanged"]):
        stored = counts["ingested"] + counts["unchanged"]
        line += f"; the other {stored} file{' is' if stored == 1 else 's are'} stored"
    elif counts["failed"]:
        line += "; nothing was stored"
    (err_console if counts["failed"] or interrupted else console).print(line)


def _fields(values: dict) -> str:
    return ", ".join(f"{k} {v!r}" for k, v in values.items())


def refuse_shared_run_name(paths: list[Path], run_name: str | None, tags: list[str], *, recursive: bool = False) -> None:
    """One --run-name for several receipts makes the name ambiguous; say so unless --tag says it is meant.

    Counted as the pipeline will see them: a run directory or a folder of per-rank traces is one."""
    several = run_name is not None and sum(1 for _ in ingest_targets(list(paths), recursive=recursive)) > 1
    if run_name and several and not tags:
        raise UsageError(f"--run-name {run_name!r} with several files would give them all one name; ingest them "
                         "one at a time, or add --tag to say they deliberately share it")


def _worker_start():
    """What each worker process reading ranks runs first: this process's policy, pandas left out where it is."""
    from receipts.cli.lean_imports import leave_pandas_out, pandas_left_out

    return leave_pandas_out if pandas_left_out() else None
