"""`receipts db init | upgrade | status` and `receipts push --to postgresql://…`."""

from __future__ import annotations

import typer

from receipts.cli.context import console, err_console, handle_errors, print_json, settings
from receipts.cli.progress import CountProgress
from receipts.store import migrations, open_store
from receipts.store.sync import push as push_receipts

db_app = typer.Typer(help="Create, upgrade and inspect a store's schema (DuckDB file or PostgreSQL).",
                     no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(db_app, name="db")
    app.command("push")(push)


@db_app.command("init")
@handle_errors
def init(ctx: typer.Context) -> None:
    """Create the receipts tables in an empty database (a no-op when they exist).

    Example: receipts --db postgresql://receipts@db.internal/receipts db init
    """
    cfg = settings(ctx)
    with migrations.open_target(cfg.db, create=True) as target:
        created = migrations.init(target)
        st = migrations.status(target)
    verb = "created" if created else "already initialised:"
    console.print(f"{verb} {st.backend} store {st.url} at schema version {st.schema_version} ({st.state})")


@db_app.command("upgrade")
@handle_errors
def upgrade(ctx: typer.Context) -> None:
    """Apply the schema migrations this build needs, one transaction each.

    Example: receipts --db postgresql://receipts@db.internal/receipts db upgrade
    """
    from receipts.analysis import components
    from receipts.analysis.summary import RULE, resummarize

    cfg = settings(ctx)
    with migrations.open_target(cfg.db) as target:
        applied = migrations.upgrade(target)
        st = migrations.status(target)
    if applied:
        console.print(f"upgraded {st.backend} store {st.url} to schema version {st.schema_version} "
                      f"(applied {', '.join(map(str, applied))})")
    else:
        console.print(f"{st.backend} store {st.url} is at schema version {st.schema_version} ({st.state})")
    # Summaries are versioned by the rule that made them: under a new rule (or none yet), make them again, so
    # every reader (show, list, lane floors, the dashboard) reads numbers of this build's rule.
    with cfg.store() as store:
        n = resummarize(store)
        exports = components.recompute(store)
    if n:
        console.print(f"re-summarised {n} receipt{'s' if n != 1 else ''} under rule {RULE}")
    if exports:
        console.print(f"computed the explain components of {exports} attached export{'s' if exports != 1 else ''} "
                      f"under rule {components.RULE}")


@db_app.command("status")
@handle_errors
def status(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Backend, schema version (stored vs this build's) and receipt count.

    Example: receipts --db receipts.duckdb db status --json
    """
    cfg = settings(ctx)
    with migrations.open_target(cfg.db) as target:
        st = migrations.status(target)
    if as_json:
        print_json({"backend": st.backend, "url": st.url, "schema_version": st.schema_version,
                    "code_version": st.code_version, "head_version": st.head_version, "state": st.state,
                    "receipts": st.receipts})
        return
    console.print(f"backend: {st.backend}")
    console.print(f"store: {st.url}")
    console.print(f"schema version: {st.schema_version if st.schema_version is not None else '-'} "
                  f"(this build: {st.code_version}; {st.state})")
    console.print(f"receipts: {st.receipts if st.receipts is not None else '-'}")


def _memory_words(kinds: dict[str, int]) -> str:
    """`3 memory snapshots and 1 estimate`, `0 memory snapshots or estimates`."""
    snapshots, estimates = kinds.get("snapshot", 0), kinds.get("estimate", 0)
    if not snapshots and not estimates:
        return "0 memory snapshots or estimates"
    parts = [f"{snapshots} memory snapshot{'s' if snapshots != 1 else ''}" if snapshots else "",
             f"{estimates} memory estimate{'s' if estimates != 1 else ''}" if estimates else ""]
    return " and ".join(p for p in parts if p)


@handle_errors
def push(
    ctx: typer.Context,
    to: str = typer.Option(..., "--to", help="Target store, usually the team's postgresql://user@host/db."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Copy receipts (and attached anatomy) from --db to the shared store; ones already there are skipped.

    Example: receipts --db node17.duckdb push --to postgresql://receipts@db.internal/receipts
    """
    cfg = settings(ctx)
    with open_store(cfg.db, read_only=True) as source, open_store(to) as target, \
            CountProgress("pushing receipts", err_console) as progress:
        result = push_receipts(source, target, progress=progress if progress.enabled else None)
        target_url = target.url
    if as_json:
        print_json({"to": target_url, "receipts_copied": result.receipts_copied,
                    "receipts_skipped": result.receipts_skipped, "anatomy_copied": result.anatomy_copied,
                    "anatomy_skipped": result.anatomy_skipped, "facts_copied": result.facts_copied,
                    "memory_copied": result.memory_copied, "memory_kinds": result.memory_kinds,
                    "copied_ids": result.copied_ids,
                    "retags_copied": result.retags_copied, "retags_diverged": result.retags_diverged,
                    "retags_refused": result.retags_refused})
        return
    console.print(f"pushed to {target_url}: {result.receipts_copied} receipts copied, "
                  f"{result.receipts_skipped} skipped (already there); "
                  f"{result.anatomy_copied} anatomy exports copied, {result.anatomy_skipped} skipped; "
                  f"{result.facts_copied} machine-fact files copied; {_memory_words(result.memory_kinds)} copied; "
                  f"{result.retags_copied} retags copied")
    if result.retags_diverged:
        err_console.print(f"warning: retagged both here and there since the last push, left as they are there: "
                          f"{', '.join(result.retags_diverged)} (compare `receipts show ID` on both; retag there)")
    if result.retags_refused:
        err_console.print(f"warning: retags made here not copied: there, {', '.join(result.retags_refused)} "
                          "has another identity than the one these retags started from (it reached that store "
                          "another way); left as it is there (compare `receipts show ID` on both; retag there)")
