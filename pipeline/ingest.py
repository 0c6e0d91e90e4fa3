"""Ingest orchestration: target -> parser -> Receipt (identity resolved, window chosen) -> store.

The one place the CLI, `receipts run` and `receipts push` go through to put evidence in a store. Parsers stay
pure (pipeline/parse.py picks and runs them); this module resolves identity and hands complete receipts to the
store through the identity lifecycle (lifecycle.py).
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator

from receipts.analysis import summary as steady_summary
from receipts.analysis.at_ingest import in_receipt_window, receipt_from_anatomy
from receipts.analysis.window import choose_window, few_steady_steps, mark_warmup
from receipts.errors import InputError, RegistryError, Remedy
from receipts.ingest import sysinfo
from receipts.ingest.logbytes import COMPRESSED_SUFFIXES, log_sha256
from receipts.ingest.textlog import ReadProgress
from receipts.ingest import profiler
from receipts.ingest.machine import machine_of_anatomy, machine_of_facts
from receipts.ingest.sniff import what_it_is
from receipts.lifecycle import LedgerWrite, already_stored, write_current
from receipts.pipeline.attach import check_attachment
from receipts.pipeline.execution import RankMap
from receipts.pipeline.parse import parse_log, parse_profile, source_file
from receipts.pipeline.profile_formats import PROFILE_FORMATS, profile_format
from receipts.pipeline.targets import (SIDECAR_NAME, IngestFailure, ingest_targets, profile_paths_in, snapshots_in,
                                       target_kind)
from receipts.schema import toml_file
from receipts.schema.categories import CategoryRules, load_category_rules
from receipts.schema.identity import resolve_identity
from receipts.schema.lane import FIELDS, OPTION
from receipts.schema.model import (FACT_SECTIONS, NAME_MAX_CHARS, IdentityClaim, ParsedRun, Receipt, SourceFile,
                                   StepWindow, as_text)
from receipts.schema.secrets import redact
from receipts.schema.registry import Registry
from receipts.schema.toml_file import read_toml
from receipts.scratch import scratch_dir
from receipts.store import Store


@dataclass(frozen=True)
class IngestOutcome:
    path: str
    receipt_id: str
    run_name: str
    created: bool            # False: already in the store (same content), nothing written
    kind: str                # 'receipt' | 'anatomy' | 'memory' | a machine-fact kind
    complete: bool | None = None
    ended_early: str | None = None
    warnings: tuple[str, ...] = ()
    supersedes: tuple[str, ...] = ()          # earlier receipts of the same run this one replaced
    superseded_by: str | None = None          # this file is an older view of a run already stored
    identity_conflict: dict | None = None     # re-ingest asked for another identity (lifecycle.identity_conflict)
    missing: tuple[str, ...] = ()             # identity parts the stored receipt lacks
    forced: str | None = None                 # an attachment's contradiction the caller forced past (recorded)
    restore: Remedy | None = None             # the retag restoring what a superseded receipt said otherwise


def read_sidecar(path: Path) -> tuple[IdentityClaim, dict]:
    """`receipt.toml` beside a log: the lane's parameters (schema/lane.py OPTION), hostname, run_name, tags."""
    sidecar = path.parent / SIDECAR_NAME if path.is_file() else path / SIDECAR_NAME
    if not sidecar.is_file():
        return IdentityClaim(), {}
    data = read_toml(sidecar, SIDECAR_NAME)
    # Every value a sidecar may set, type-checked here: a number or table where a name belongs is one
    # line naming the file and key, not a TypeError later.
    fields = {k: toml_file.text(data.get(k), sidecar, k) for k in (*OPTION.values(), "hostname", "run_name")}
    for key, value in fields.items():
        if value is not None and len(value) > NAME_MAX_CHARS:
            raise InputError(sidecar, f"key {key} is {len(value):,} characters long; at most {NAME_MAX_CHARS:,}")
    data = {**data, **{k: v for k, v in fields.items() if v is not None},
            "tags": list(toml_file.strings(data.get("tags"), sidecar, "tags"))}
    claim = IdentityClaim.of_options(fields, hostname=fields["hostname"])
    return claim, data


def redacted_text(parsed: ParsedRun, registry: Registry) -> ParsedRun:
    """`parsed` with secrets (schema/secrets.py's value shapes and secret flags) replaced in every text it
    stores. By value only: a config key is a setting's name, not an environment variable's (`tokenizer_type`
    names no secret)."""
    def text(value: Any) -> Any:
        if isinstance(value, str):
            return redact(value, rules=registry.env_rules)
        if isinstance(value, dict):
            return {k: text(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(text(v) for v in value)
        return value
    return replace(parsed, features=text(parsed.features), provenance=text(parsed.provenance),
                   software=text(parsed.software), topology=text(parsed.topology), ended_early=text(parsed.ended_early),
                   warnings=text(parsed.warnings))


def build_receipt(parsed: ParsedRun, *, source: SourceFile, claim: IdentityClaim, registry: Registry,
                  run_name: str, tags: tuple[str, ...] = ()) -> Receipt:
    """Evidence in the file, then receipt.toml, then explicit flags: later sources win field by field.

    What the receipt keeps of the log's own text (a config dump's strings, a crash line in `ended_early`,
    warnings quoting a line, provenance) goes through the one redactor first: a third-party log is not
    written by `receipts run`, so nothing redacted its lines before."""
    parsed = redacted_text(parsed, registry)
    identity = resolve_identity(parsed.claim.merged(claim), registry)
    _check_name_lengths(source, run_name=run_name, **{OPTION[f]: getattr(identity.raw, f) for f in FIELDS},
                        hostname=identity.hostname, run_id=parsed.provenance.get("run_id"))
    window = choose_window(parsed.steps, parsed.phases, tail=parsed.tail_step)
    if (few := few_steady_steps(window)) is not None:
        parsed = replace(parsed, warnings=parsed.warnings + (few,))
    summary = steady_summary.summarise_steps(mark_warmup(parsed.steps, window))
    return Receipt(
        id=source.sha256[:16],
        content_sha256=source.sha256,
        run_name=run_name,
        identity=identity,
        parsed=parsed,
        window=window,
        sources=(source,),
        tags=tuple(sorted(set(tags))),
        summary=summary,
    )


def _check_name_lengths(source: SourceFile, **names: object) -> None:
    """Names are index keys: one longer than NAME_MAX_CHARS is refused naming the file, before any write."""
    for what, value in names.items():
        if isinstance(value, str) and len(value) > NAME_MAX_CHARS:
            raise InputError(source.path, f"the {what.replace('_', ' ')} is {len(value):,} characters long; at most "
                                          f"{NAME_MAX_CHARS:,} (from the file, receipt.toml or the command line)")


def ingest_each(store: Store, paths: list[Path], *, identity: IdentityClaim = IdentityClaim(),
                run_name: str | None = None, registry: Registry, attach: str | None = None,
                tags: tuple[str, ...] = (), fmt: str | None = None, rules: CategoryRules | None = None,
                keep_raw: bool = False, recursive: bool = False,
                force: bool = False, ranks: RankMap = RankMap(),
                progress: ReadProgress | None = None) -> Iterator[IngestOutcome | IngestFailure]:
    """Ingest each file, folder or run directory, yielding its outcome (or its failure) as soon as it is known.
    `progress` is called as each training log is read (bytes and lines of that log so far).

    Each receipt is written in its own transaction, so a failure leaves what came before it stored and
    nothing of itself; the caller decides whether to go on (the generator does, when asked for the next). A
    broken installation (RegistryError) and an interrupt are raised, not yielded: no later file would fare better."""
    kw: dict[str, Any] = dict(identity=identity, run_name=run_name, registry=registry, attach=attach, tags=tags,
                              fmt=fmt, rules=rules, keep_raw=keep_raw, force=force, ranks=ranks,
                              progress=progress)
    for target in ingest_targets(paths, recursive=recursive):
        if isinstance(target, IngestFailure):
            yield target
            continue
        try:
            if target.is_dir() and (target / "run.log").is_file():
                yield from _ingest_run_dir(store, target, **kw)
            else:
                yield _ingest_one(store, target, **kw)
        except Exception as exc:  # noqa: BLE001 - a batch reports every file's failure and goes on
            _stop_the_batch(exc)
            yield IngestFailure(str(target), exc)


def _stop_the_batch(exc: Exception) -> None:
    """Re-raise what no later file could get past, instead of reporting it as one more failed file: a RegistryError
    (an entry of receipts' own registries cannot serve: the installation is broken, not the file, and every file
    after it would fail alike; the command line says it once) and an interrupt. Ctrl-C inside a DuckDB query
    arrives as duckdb.InterruptException, an Exception: it stops the batch as KeyboardInterrupt does elsewhere."""
    if isinstance(exc, RegistryError):
        raise exc
    import duckdb

    # Fetching a result into polars through Arrow surfaces the same interrupt as a RuntimeError with DuckDB's
    # message (seen under `receipts ingest FOLDER` + Ctrl-C: one file reported FAILED, the batch went on).
    interrupted = isinstance(exc, RuntimeError) and str(exc).startswith("Query interrupted")
    if isinstance(exc, duckdb.InterruptException) or interrupted:
        raise KeyboardInterrupt from exc


def ingest_paths(store: Store, paths: list[Path], **kw) -> list[IngestOutcome]:
    """Ingest each path (see ingest_each); the first failure is raised, after the files before it are stored."""
    outcomes: list[IngestOutcome] = []
    for item in ingest_each(store, paths, **kw):
        if isinstance(item, IngestFailure):
            raise item.error
        outcomes.append(item)
    return outcomes


def _ingest_run_dir(store: Store, run_dir: Path, *, identity: IdentityClaim, run_name: str | None,
                    registry: Registry, attach: str | None, tags: tuple[str, ...], fmt: str | None,
                    rules: CategoryRules | None, keep_raw: bool,
                    force: bool = False, ranks: RankMap = RankMap(),
                    progress: ReadProgress | None = None) -> Iterator[IngestOutcome | IngestFailure]:
    """A `receipts run` directory: the log is the receipt; exports found there attach to it, each on its own."""
    first = _ingest_one(store, run_dir / "run.log", identity=identity, run_name=run_name or run_dir.name,
                        registry=registry, attach=attach, tags=tags, fmt=fmt, rules=rules, keep_raw=keep_raw,
                        progress=progress)
    yield first
    for profile, kind in profile_paths_in(run_dir):
        try:
            outcome = _ingest_profile(store, profile, kind, identity=IdentityClaim(), run_name=None,
                                      registry=registry, attach=first.receipt_id, tags=(),
                                      rules=rules or load_category_rules(), keep_raw=keep_raw, force=force,
                                      ranks=ranks)
            yield replace(outcome, run_name=first.run_name)
        except Exception as exc:  # noqa: BLE001 - the log is stored; say which export failed
            _stop_the_batch(exc)
            yield IngestFailure(str(profile), exc)
    for snapshot in snapshots_in(run_dir):
        try:
            yield replace(_ingest_memory(store, snapshot, attach=first.receipt_id), run_name=first.run_name)
        except Exception as exc:  # noqa: BLE001 - the log is stored; say which snapshot failed
            _stop_the_batch(exc)
            yield IngestFailure(str(snapshot), exc)


def _ingest_one(store: Store, path: Path, *, identity: IdentityClaim, run_name: str | None, registry: Registry,
                attach: str | None, tags: tuple[str, ...], fmt: str | None, rules: CategoryRules | None,
                keep_raw: bool, force: bool = False, ranks: RankMap = RankMap(),
                progress: ReadProgress | None = None) -> IngestOutcome:
    kind = target_kind(path)
    if kind in PROFILE_FORMATS:
        return _ingest_profile(store, path, kind, identity=identity, run_name=run_name, registry=registry,
                               attach=attach, tags=tags, rules=rules or load_category_rules(), keep_raw=keep_raw,
                               force=force, ranks=ranks, progress=progress)
    if kind == "memory-snapshot":
        return _ingest_memory(store, path, attach=attach)
    if kind in FACT_SECTIONS:
        if attach is None:
            raise InputError(path, f"is `{kind}` output: machine facts belong to a run", remedy=Remedy("attach_to"))
        section, facts = sysinfo.facts(path, kind)
        receipt_id = store.resolve(attach)
        checked = check_attachment(store, receipt_id, path, machine_of_facts(kind, facts), force=force,
                                   label=f"{_WHAT[kind]} {path.name}")
        created = store.attach_facts(receipt_id, section, facts, source_file(path, kind, kind), forced=checked.forced,
                                     fill=checked.fill)
        return IngestOutcome(str(path), receipt_id, attach, created, kind, forced=checked.forced)
    if attach is not None:
        raise InputError(path, "takes a profiler export (nsys .sqlite/.nsys-rep or Kineto traces) or a PyTorch memory "
                               f"snapshot; this looks like {what_it_is(path)}", option="attach")
    side_claim, side = read_sidecar(path)
    name = run_name or side.get("run_name") or as_text(_default_run_name(path))
    all_tags = tuple(tags) + tuple(side.get("tags", ()))
    asked, named = side_claim.merged(identity), bool(run_name or side.get("run_name"))
    content_sha256 = log_sha256(path)  # a compressed log's is its text's: gzipped or not, one receipt
    stored = already_stored(store, content_sha256, run_name=name, tags=all_tags, asked=asked, registry=registry,
                            named=named)
    if stored is not None:  # the same content again: nothing to parse, nothing to write
        return _receipt_outcome(path, stored, ended_early=stored.ended_early, warnings=stored.warnings)
    # A long log's step rows wait on disk, not in memory, until the store has them (ingest/spool.py).
    with scratch_dir("steps") as spill:  # removed as the ingest ends; a killed one's by the next (receipts/scratch.py)
        parsed = parse_log(path, fmt, progress, spill=spill, step_line=registry.step_line)
        receipt = build_receipt(parsed, source=source_file(path, parsed.source_format, "log", sha256=content_sha256),
                                claim=asked, registry=registry, run_name=name, tags=all_tags)
        return _write_receipt(store, path, receipt, registry=registry, asked=asked, named=named)


def _ingest_memory(store: Store, path: Path, *, attach: str | None) -> IngestOutcome:
    """A PyTorch memory snapshot belongs to a run: its geometry (one per device) is attached to the receipt."""
    from receipts.ingest import memory_snapshot

    if attach is None:
        raise InputError(path, "is a PyTorch memory snapshot: its memory geometry belongs to a run",
                         remedy=Remedy("attach_to"))
    geometries = memory_snapshot.parse(path)
    receipt_id = store.resolve(attach)
    created = store.attach_memory(receipt_id, geometries, source_file(path, memory_snapshot.FORMAT, "memory"))
    return IngestOutcome(str(path), receipt_id, attach, created, "memory",
                         warnings=tuple(w for g in geometries for w in g.warnings))


# How an attachment is named where a receipt says which file gave it a fact.
_WHAT = {"nsys": "nsys export", "kineto": "Kineto trace", "topology": "topology", "collect_env": "collect_env",
         "nccl_tests": "nccl-tests"}


def _default_run_name(path: Path) -> str:
    """A `receipts run` directory's name for its run.log, else the file's name without its extension (and without
    a compression suffix first: train.log.gz is the run `train`, as train.log is)."""
    plain = path.with_suffix("") if path.suffix in COMPRESSED_SUFFIXES else path
    # absolute: `ingest run.log` from inside the run directory names the run by that directory, not ""
    return (path.absolute().parent.name or plain.stem) if plain.name == "run.log" else plain.stem


def _ingest_profile(store: Store, path: Path, kind: str, *, identity: IdentityClaim, run_name: str | None,
                    registry: Registry, attach: str | None, tags: tuple[str, ...], rules: CategoryRules,
                    keep_raw: bool, force: bool = False, ranks: RankMap = RankMap(),
                    progress: ReadProgress | None = None) -> IngestOutcome:
    # an nsys export's runtime calls and kept activity wait in `spill` for its anatomy, and its events (every
    # attributed activity) until the straggler analysis has read them
    with _raw_staging(store, kind, keep_raw) as staging, scratch_dir("events") as spill:
        ranks = replace(ranks, raw_staging=staging) if staging else ranks
        anatomy = parse_profile(path, kind, rules, keep_raw, registry.env_rules, ranks, progress, spill)
        hashed = profile_format(kind).hashed
        source = source_file(path, anatomy.source_format, anatomy.source_format, None if hashed is None else hashed(path))
        if attach is not None:
            receipt_id = store.resolve(attach)
            checked = check_attachment(store, receipt_id, path, machine_of_anatomy(anatomy), force=force,
                                       label=f"{_WHAT[anatomy.source_format]} {path.name}", profile=anatomy,
                                       software=profiler.of_profile(anatomy.source_format))
            anatomy = in_receipt_window(anatomy, _stored_window(store, receipt_id))
            created = store.attach_anatomy(receipt_id, anatomy, source, forced=checked.forced, fill=checked.fill)
            return IngestOutcome(str(path), receipt_id, attach, created, "anatomy", warnings=anatomy.warnings,
                                 forced=checked.forced)
        parsed = receipt_from_anatomy(anatomy)
        side_claim, side = read_sidecar(path)
        name = run_name or side.get("run_name") or as_text(path.name.split(".")[0])
        receipt = build_receipt(parsed, source=source, claim=side_claim.merged(identity), registry=registry,
                                run_name=name, tags=tuple(tags))
        anatomy = in_receipt_window(anatomy, receipt.window)
        return _write_receipt(store, path, receipt, registry=registry, asked=side_claim.merged(identity),
                              named=bool(run_name or side.get("run_name")), anatomies=((anatomy, source),))


@contextmanager
def _raw_staging(store: Store, kind: str, keep_raw: bool) -> Iterator[Path | None]:
    """With --keep-raw, for a profile read one task per file: a folder where worker processes stage each rank's
    raw events as Parquet (pipeline/execution.py), on the raw folder's own file system so the store streams them
    into one file; removed once the receipt is written or refused. None otherwise."""
    raw_dir = store.raw_events_dir() if keep_raw and profile_format(kind).many_files else None
    if raw_dir is None:
        yield None
        return
    raw_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=raw_dir))
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _stored_window(store: Store, receipt_id: str) -> StepWindow:
    """The steady window a stored receipt was given, so an export attached to it shares it."""
    row = store.query("receipt", {"receipt_id": receipt_id}).row(0, named=True)
    return StepWindow(row["window_first_step"], row["window_last_step"], row["warmup_steps"] or 0,
                      row["warmup_last_step"], row["window_rule"] or "", 0)


def _write_receipt(store: Store, path: Path, receipt: Receipt, *, registry: Registry, asked: IdentityClaim,
                   named: bool, anatomies: tuple = ()) -> IngestOutcome:
    """Store a parsed receipt through the identity lifecycle (lifecycle.write_current): superseding an
    earlier view of the same run, refusing unknown values in strict mode, reporting identity conflicts."""
    written = write_current(store, receipt, registry=registry, asked=asked, named=named, anatomies=anatomies)
    return _receipt_outcome(path, written, ended_early=receipt.parsed.ended_early,
                            warnings=receipt.parsed.warnings + written.warnings)


def _receipt_outcome(path: Path, written: LedgerWrite, *, ended_early: str | None,
                     warnings: tuple[str, ...]) -> IngestOutcome:
    """What the ledger did with a receipt, as the file's outcome (the file's own note and warnings given)."""
    return IngestOutcome(str(path), written.receipt_id, written.run_name, written.created, "receipt", written.complete,
                         ended_early, warnings, written.supersedes, written.superseded_by, written.identity_conflict,
                         written.missing, restore=written.restore)
