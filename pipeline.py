"""Ingest orchestration: file -> parser -> Receipt (identity resolved, window chosen) -> store.

The one place the CLI, `receipts run` and `receipts push` go through to put evidence in a store.
Parsers stay pure; this module resolves identity and hands complete receipts to the store.
"""

from __future__ import annotations

if __name__.split(".")[0] != "receipts":  # a second copy under a bare name: see receipts/errors.py
    raise ImportError(f"import receipts.{__name__}, not {__name__}: the repository root is the package `receipts`")

import shutil
import stat
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator, cast

import polars as pl

from receipts.analysis import stragglers
from receipts.analysis.anatomy import steady_kernel_totals
from receipts.analysis import summary as steady_summary
from receipts.analysis.window import choose_window, cut_short_tail, in_window, mark_warmup
from receipts.errors import InputError
from receipts.ingest import sniff, sysinfo
from receipts.ingest.rank_files import natural_order
from receipts.ingest.rank_map import RankMap
from receipts.ingest.sanity import checked_anatomy, checked_run
from receipts.ingest.textlog import COMPRESSED_SUFFIXES, ReadProgress, log_sha256, read_log
from receipts.lifecycle import (LedgerWrite, MachineSeen, already_stored, check_attachment, machine_of_facts,
                                write_current)
from receipts.schema.categories import CategoryRules, load_category_rules
from receipts.schema.identity import resolve_identity
from receipts.schema.model import (FACT_SECTIONS, Anatomy, IdentityClaim, ParsedRun, Receipt, SourceFile, StepWindow,
                                   sha256_file, steps_frame)
from receipts.schema import toml_file
from receipts.schema.registry import Registry
from receipts.schema.secrets import EnvRules
from receipts.schema.toml_file import read_toml
from receipts.scratch import scratch_dir
from receipts.store import Store

SIDECAR_NAME = "receipt.toml"
PROFILE_KINDS = ("nsys", "nsys-gz", "nsys-rep", "nsys-dir", "nsys-files", "kineto", "kineto-dir", "kineto-files")
MULTI_FILE_KINDS = ("nsys-dir", "nsys-files", "kineto-dir", "kineto-files")  # one task per file: ingest/rank_map.py


@dataclass(frozen=True)
class IngestOutcome:
    path: str
    receipt_id: str
    run_name: str
    created: bool            # False: already in the store (same content), nothing written
    kind: str                # 'receipt' | 'anatomy'
    complete: bool | None = None
    ended_early: str | None = None
    warnings: tuple[str, ...] = ()
    supersedes: tuple[str, ...] = ()          # earlier receipts of the same run this one replaced
    superseded_by: str | None = None          # this file is an older view of a run already stored
    identity_conflict: dict | None = None     # re-ingest asked for another identity (lifecycle.identity_conflict)
    missing: tuple[str, ...] = ()             # identity parts the stored receipt lacks


def read_sidecar(path: Path) -> tuple[IdentityClaim, dict]:
    """`receipt.toml` beside a log: host_lineage, preset, regime, run_name, tags."""
    sidecar = path.parent / SIDECAR_NAME if path.is_file() else path / SIDECAR_NAME
    if not sidecar.is_file():
        return IdentityClaim(), {}
    data = read_toml(sidecar, SIDECAR_NAME)
    # Every value a sidecar may set, type-checked here: a number or table where a name belongs is one
    # line naming the file and key, not a TypeError later.
    fields = {k: toml_file.text(data.get(k), sidecar, k) for k in ("host_lineage", "preset", "regime", "hostname",
                                                                   "run_name")}
    data = {**data, **{k: v for k, v in fields.items() if v is not None},
            "tags": list(toml_file.strings(data.get("tags"), sidecar, "tags"))}
    claim = IdentityClaim(fields["host_lineage"], fields["preset"], fields["regime"], fields["hostname"])
    return claim, data


def build_receipt(parsed: ParsedRun, *, source: SourceFile, claim: IdentityClaim, registry: Registry,
                  run_name: str, tags: tuple[str, ...] = ()) -> Receipt:
    """Evidence in the file, then receipt.toml, then explicit flags: later sources win field by field."""
    identity = resolve_identity(parsed.claim.merged(claim), registry)
    window = choose_window(parsed.steps, parsed.phases, tail=parsed.tail_step)
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


def _source(path: Path, fmt: str, role: str, files: list[Path] | None = None, *, sha256: str | None = None) -> SourceFile:
    """A file, or a folder's files (all of them, or the given ones) hashed in name order; `sha256`: the file's,
    when the caller has it already."""
    if path.is_dir():
        import hashlib

        files = sorted(files if files is not None else (p for p in path.iterdir() if p.is_file()))
        digest = hashlib.sha256("".join(sha256_file(p) for p in files).encode()).hexdigest()
        return SourceFile(str(path.resolve()), digest, sum(p.stat().st_size for p in files), fmt, role)
    return SourceFile(str(path.resolve()), sha256 or sha256_file(path), path.stat().st_size, fmt, role)


def run_dir_traces(run_dir: Path) -> list[Path]:
    """PyTorch profiler traces lying beside run.log, one per rank, in natural name order (rank2 < rank10)."""
    return natural_order(p for p in run_dir.iterdir() if p.is_file() and ".pt.trace." in p.name
                         and p.name.endswith((".json", ".json.gz")))


def parse_log(path: Path, fmt: str | None = None, progress: ReadProgress | None = None, *,
              spill: Path | None = None) -> ParsedRun:
    """`progress` is called as the log is read (bytes and lines so far). Step formats are read chunk by
    chunk (bounded memory), their step rows written to `spill` when given (a directory the caller removes
    once the receipt is stored: the steps are then a scan of it); the others, and a log no format claims, whole."""
    name = None
    if fmt:
        name = sniff.FORMAT_ALIASES.get(fmt.lower())
        if name is None:
            read_log(path)  # an unreadable or empty file says so first, as it always has
            raise InputError(path, f"--format {fmt!r} is not one of {', '.join(sorted(set(sniff.FORMAT_ALIASES)))}")
    try:
        parsed = (sniff.parse_streamed(path, name, progress, spill=spill)
                  or sniff.parse_log(read_log(path, progress), name))
    except pl.exceptions.PolarsError as exc:  # a cast or decode no parser foresaw: still one line naming the file
        raise InputError(path, f"cannot be read as a {name or 'training'} log: "
                               f"{str(exc).strip().splitlines()[0]}") from exc
    return checked_run(parsed, path)


def parse_profile(path: Path, kind: str, rules: CategoryRules, keep_raw: bool,
                  env_rules: EnvRules | None = None, ranks: RankMap = RankMap(),
                  progress: ReadProgress | None = None, spill: Path | None = None) -> Anatomy:
    """`env_rules`: the loaded configuration's secret rules (Registry.env_rules) for an export's captured
    environment; None reads the shipped ones only. `ranks`: how the traces of a multi-rank Kineto profile, or
    the exports of a job profiled one nsys report per rank or node, are read (worker processes, Dask;
    ingest/rank_map.py). `progress`: for one nsys export, its rows streamed so far, as bytes of the file; for a
    profile of several files, the bytes of those read so far. `spill`: a directory the caller removes once the
    anatomy is used, where one nsys export's runtime calls, kept activity and events go as they are made
    (nsys.parse)."""
    if kind in ("nsys-dir", "nsys-files"):  # one job's exports, one per rank or node: one anatomy
        from receipts.ingest import nsys_job, rank_map

        return checked_anatomy(rank_map.parse_nsys_job(nsys_job.job_exports(path), rules=rules, keep_raw=keep_raw,
                                                       env_rules=env_rules, plan=_with_progress(ranks, progress)),
                               path)
    if kind in ("nsys", "nsys-gz", "nsys-rep"):  # one export: what each export of a job is read as
        from receipts.ingest import nsys_job

        size = path.stat().st_size
        rows = None if progress is None else (lambda fraction: progress(int(size * fraction), 0))
        return nsys_job.read_export(path, rules=rules, keep_raw=keep_raw, env_rules=env_rules, kind=kind,
                                    progress=rows, spill=spill).anatomy
    from receipts.ingest import kineto, rank_map

    traces = {"kineto-dir": kineto.trace_files, "kineto-files": run_dir_traces}.get(kind, lambda p: [p])(path)
    return checked_anatomy(rank_map.parse_kineto(traces, rules=rules, keep_raw=keep_raw,
                                                 plan=_with_progress(ranks, progress)), path)


def _with_progress(ranks: RankMap, progress: ReadProgress | None) -> RankMap:
    """The map says the bytes of the profile's files read so far (a trace or an export done) to the bar."""
    return ranks if progress is None else replace(ranks, progress=lambda done: progress(done, 0))


def _profile_files(path: Path, kind: str) -> list[Path] | None:
    """The files a folder-kind profile is made of (hashed into its source), None where it is the folder's all."""
    from receipts.ingest import nsys_job

    return {"kineto-files": run_dir_traces, "nsys-files": nsys_job.job_exports,
            "nsys-dir": nsys_job.job_exports}.get(kind, lambda p: None)(path)


def receipt_from_anatomy(anatomy: Anatomy) -> ParsedRun:
    """A profiler export ingested on its own: its step markers become the step series, and its window is
    chosen by the same rule as a log's (choose_window), with a last step cut short by the capture's end
    (cut_short_tail: next to no GPU work) left out."""
    steps = anatomy.steps.filter(pl.col("step").is_not_null())
    frame = steps_frame(steps.select("step", "rank", pl.col("wall_ms").alias("step_ms")))
    busy = {int(s): float(ms) for s, ms in steps.group_by("step").agg(pl.col("gpu_ms").max()).iter_rows()
            if ms is not None}
    return ParsedRun(
        source_format=anatomy.source_format,
        format_version=anatomy.schema_version,
        steps=frame,
        claim=anatomy.claim,
        env=anatomy.env,
        software=anatomy.software,
        gpu_model=anatomy.gpu_model,
        gpu_count=anatomy.gpu_count,
        world_size=anatomy.world_size,
        ranks_traced=anatomy.ranks_traced,
        gpus_on_host=anatomy.gpus_on_host,
        started_at=anatomy.started_at,
        warnings=anatomy.warnings,
        memory=(),
        tail_step=cut_short_tail(frame, busy),
    )


def _profile_paths_in(run_dir: Path) -> list[tuple[Path, str]]:
    """Profiler exports in a `receipts run` directory, each with its kind: the nsys exports at the top level (one
    export is one profile; several are the job profiled one report per rank or node, one profile) and one set of
    Kineto traces (at the top level or in a sub-folder), which is one profile of all ranks."""
    from receipts.ingest import nsys_job

    exports = nsys_job.job_exports(run_dir)  # a report beside its own export counts once
    kinds = {".sqlite": "nsys", ".gz": "nsys-gz", ".nsys-rep": "nsys-rep"}
    profiles = ([(run_dir, "nsys-files")] if len(exports) > 1 else [(p, kinds[p.suffix]) for p in exports])
    traces = [p for p in sorted(run_dir.rglob("*")) if p.is_file() and p.name.endswith((".json.gz", ".json"))
              and ".pt.trace" in p.name]
    if traces:
        folder = traces[0].parent
        # The traces of one folder, not the folder itself: beside run.log they share it with other files.
        profiles.append((folder, "kineto-dir" if folder != run_dir else "kineto-files"))
    return profiles


@dataclass(frozen=True)
class IngestFailure:
    """One file (or folder) that could not be ingested; nothing of it was written."""
    path: str
    error: Exception


def _file_type(mode: int) -> str | None:
    """What a non-regular, non-directory file is, in words; None for a regular file or a folder."""
    for test, what in ((stat.S_ISREG, None), (stat.S_ISDIR, None), (stat.S_ISFIFO, "named pipe (FIFO)"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device")):
        if test(mode):
            return what
    return "special file"


def _is_trace_folder(path: Path) -> bool:
    """A folder whose top-level JSON files are all PyTorch profiler traces is one profile (one file per rank)."""
    jsons = [p for p in path.iterdir() if p.name.endswith((".json", ".json.gz")) and _regular(p)]
    return bool(jsons) and all(sniff.sniff_kind(p) == "kineto" for p in jsons)


def _is_export_folder(path: Path) -> bool:
    """A folder of two or more nsys exports and nothing else (hidden files aside) is one job profiled one report
    per rank or node, read as one profile (as `nsys recipe --input DIR` reads it)."""
    from receipts.ingest import nsys_job

    files = [p for p in path.iterdir() if not p.name.startswith(".") and _regular(p)]
    return len(nsys_job.job_exports(path)) > 1 and all(nsys_job.is_export(p) for p in files)


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def ingest_targets(paths: list[Path], *, recursive: bool = False) -> Iterator[Path | IngestFailure]:
    """What the named paths hold, one ingestible unit at a time: a file, a `receipts run` directory, a folder
    of Kineto traces, or a folder of one job's nsys exports. Other folders are read file by file (sub-folders
    only with `recursive`, except run directories and folders of traces or exports, which are units). Missing paths and non-regular files (FIFOs, devices,
    sockets) come back as failures, decided from stat() alone: opening a FIFO would wait for a writer forever."""
    seen: set[Path] = set()
    for path in map(Path, paths):
        yield from _targets(path, recursive=recursive, named=True, seen=seen)


def _targets(path: Path, *, recursive: bool, named: bool, seen: set[Path]) -> Iterator[Path | IngestFailure]:
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        yield IngestFailure(str(path), InputError(path, "does not exist"))
        return
    except OSError as exc:
        yield IngestFailure(str(path), InputError(path, f"cannot read: {exc.strerror or exc}"))
        return
    what = _file_type(mode)
    if what is not None:
        yield IngestFailure(str(path), InputError(path, f"is a {what}, not a regular file or folder; refused "
                                                        "without reading it"))
        return
    if not stat.S_ISDIR(mode) or (path / "run.log").is_file() or _is_trace_folder(path) or _is_export_folder(path):
        yield path
        return
    if path.resolve() in seen:
        return  # a folder met twice (symlinks, or named twice): read once, never in a loop
    seen.add(path.resolve())
    children = [p for p in sorted(path.iterdir()) if not p.name.startswith(".") and p.name != SIDECAR_NAME]
    from receipts.ingest.nsys_job import without_exported_reports

    children = without_exported_reports(children)  # a report beside its own export: one profile
    found = False
    for child in children:
        if child.is_dir() and not recursive and not ((child / "run.log").is_file() or _is_trace_folder(child)
                                                     or _is_export_folder(child)):
            continue
        for target in _targets(child, recursive=recursive, named=False, seen=seen):
            found = True
            yield target
    if not found and named:
        hint = " (its sub-folders are read with -r/--recursive)" if any(p.is_dir() for p in children) else ""
        yield IngestFailure(str(path), InputError(path, "holds no training logs, profiler exports or `receipts run` "
                                                        f"directories{hint}"))


def ingest_each(store: Store, paths: list[Path], *, identity: IdentityClaim = IdentityClaim(),
                run_name: str | None = None, registry: Registry, attach: str | None = None,
                tags: tuple[str, ...] = (), fmt: str | None = None, rules: CategoryRules | None = None,
                keep_raw: bool = False, recursive: bool = False,
                force: bool = False, ranks: RankMap = RankMap(),
                progress: ReadProgress | None = None) -> Iterator[IngestOutcome | IngestFailure]:
    """Ingest each file, folder or run directory, yielding its outcome (or its failure) as soon as it is known.
    `progress` is called as each training log is read (bytes and lines of that log so far).

    Each receipt is written in its own transaction, so a failure leaves what came before it stored and
    nothing of itself; the caller decides whether to go on (the generator does, when asked for the next)."""
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
            _reraise_interrupt(exc)
            yield IngestFailure(str(target), exc)


def _reraise_interrupt(exc: Exception) -> None:
    """Ctrl-C inside a DuckDB query arrives as duckdb.InterruptException, an Exception: it stops the batch
    (as KeyboardInterrupt does elsewhere) instead of reading as one more failed file."""
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
    for profile, kind in _profile_paths_in(run_dir):
        try:
            outcome = _ingest_profile(store, profile, kind, identity=IdentityClaim(), run_name=None,
                                      registry=registry, attach=first.receipt_id, tags=(),
                                      rules=rules or load_category_rules(), keep_raw=keep_raw, force=force,
                                      ranks=ranks)
            yield replace(outcome, run_name=first.run_name)
        except Exception as exc:  # noqa: BLE001 - the log is stored; say which export failed
            _reraise_interrupt(exc)
            yield IngestFailure(str(profile), exc)


def _ingest_one(store: Store, path: Path, *, identity: IdentityClaim, run_name: str | None, registry: Registry,
                attach: str | None, tags: tuple[str, ...], fmt: str | None, rules: CategoryRules | None,
                keep_raw: bool, force: bool = False, ranks: RankMap = RankMap(),
                progress: ReadProgress | None = None) -> IngestOutcome:
    kind = ("nsys-dir" if _is_export_folder(path) else "kineto-dir") if path.is_dir() else sniff.sniff_kind(path)
    if kind in PROFILE_KINDS:
        return _ingest_profile(store, path, kind, identity=identity, run_name=run_name, registry=registry,
                               attach=attach, tags=tags, rules=rules or load_category_rules(), keep_raw=keep_raw,
                               force=force, ranks=ranks, progress=progress)
    if kind in FACT_SECTIONS:
        if attach is None:
            raise InputError(path, f"is `{kind}` output: machine facts belong to a run; give --attach RUN")
        section, facts = sysinfo.facts(path, kind)
        receipt_id = store.resolve(attach)
        forced = check_attachment(store, receipt_id, path, machine_of_facts(kind, facts), force=force)
        created = store.attach_facts(receipt_id, section, facts, _source(path, kind, kind), forced=forced)
        return IngestOutcome(str(path), receipt_id, attach, created, kind, warnings=_forced_note(forced))
    if attach is not None:
        raise InputError(path, "--attach takes a profiler export (nsys .sqlite/.nsys-rep or Kineto traces); "
                               "this looks like a training log")
    side_claim, side = read_sidecar(path)
    name = run_name or side.get("run_name") or _default_run_name(path)
    all_tags = tuple(tags) + tuple(side.get("tags", ()))
    asked, named = side_claim.merged(identity), bool(run_name or side.get("run_name"))
    content_sha256 = log_sha256(path)  # a compressed log's is its text's: gzipped or not, one receipt
    stored = already_stored(store, content_sha256, run_name=name, tags=all_tags, asked=asked, registry=registry,
                            named=named)
    if stored is not None:  # the same content again: nothing to parse, nothing to write
        return _receipt_outcome(path, stored, ended_early=stored.ended_early, warnings=stored.warnings)
    # A long log's step rows wait on disk, not in memory, until the store has them (ingest/spool.py).
    with scratch_dir("steps") as spill:  # removed as the ingest ends; a killed one's by the next (receipts/scratch.py)
        parsed = parse_log(path, fmt, progress, spill=spill)
        receipt = build_receipt(parsed, source=_source(path, parsed.source_format, "log", sha256=content_sha256),
                                claim=asked, registry=registry, run_name=name, tags=all_tags)
        return _write_receipt(store, path, receipt, registry=registry, asked=asked, named=named)


def _default_run_name(path: Path) -> str:
    """A `receipts run` directory's name for its run.log, else the file's name without its extension (and without
    a compression suffix first: train.log.gz is the run `train`, as train.log is)."""
    plain = path.with_suffix("") if path.suffix in COMPRESSED_SUFFIXES else path
    return path.parent.name if plain.name == "run.log" else plain.stem


def _ingest_profile(store: Store, path: Path, kind: str, *, identity: IdentityClaim, run_name: str | None,
                    registry: Registry, attach: str | None, tags: tuple[str, ...], rules: CategoryRules,
                    keep_raw: bool, force: bool = False, ranks: RankMap = RankMap(),
                    progress: ReadProgress | None = None) -> IngestOutcome:
    # an nsys export's runtime calls and kept activity wait in `spill` for its anatomy, and its events (every
    # attributed activity) until the straggler analysis has read them
    with _raw_staging(store, kind, keep_raw) as staging, scratch_dir("events") as spill:
        ranks = replace(ranks, raw_staging=staging) if staging else ranks
        anatomy = parse_profile(path, kind, rules, keep_raw, registry.env_rules, ranks, progress, spill)
        source = _source(path, anatomy.source_format, anatomy.source_format, _profile_files(path, kind))
        if attach is not None:
            receipt_id = store.resolve(attach)
            # nsys reports the machine's GPUs (TARGET_INFO_GPU); Kineto one trace per rank, so only its ranks count.
            seen = MachineSeen(anatomy.gpu_model, anatomy.gpu_count if anatomy.source_format == "nsys" else None,
                               anatomy.gpu_count if anatomy.source_format != "nsys" else None)
            forced = check_attachment(store, receipt_id, path, seen, force=force)
            anatomy = in_receipt_window(anatomy, _stored_window(store, receipt_id))
            created = store.attach_anatomy(receipt_id, anatomy, source, forced=forced)
            return IngestOutcome(str(path), receipt_id, attach, created, "anatomy",
                                 warnings=anatomy.warnings + _forced_note(forced))
        parsed = receipt_from_anatomy(anatomy)
        side_claim, side = read_sidecar(path)
        name = run_name or side.get("run_name") or path.name.split(".")[0]
        receipt = build_receipt(parsed, source=source, claim=side_claim.merged(identity), registry=registry,
                                run_name=name, tags=tuple(tags))
        anatomy = in_receipt_window(anatomy, receipt.window)
        return _write_receipt(store, path, receipt, registry=registry, asked=side_claim.merged(identity),
                              named=bool(run_name or side.get("run_name")), anatomies=((anatomy, source),))


@contextmanager
def _raw_staging(store: Store, kind: str, keep_raw: bool) -> Iterator[Path | None]:
    """With --keep-raw, for a profile read one task per file: a folder where worker processes stage each rank's
    raw events as Parquet (ingest/rank_map.py), on the raw folder's own file system so the store streams them
    into one file; removed once the receipt is written or refused. None otherwise."""
    raw_dir = store.raw_events_dir() if keep_raw and kind in MULTI_FILE_KINDS else None
    if raw_dir is None:
        yield None
        return
    raw_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=raw_dir))
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def in_receipt_window(anatomy: Anatomy, window: StepWindow) -> Anatomy:
    """The anatomy under its receipt's steady window (one window per receipt), with what is computed over the
    steady steps: the straggler report and the kernel totals by name."""
    anatomy = with_stragglers(replace(anatomy, steps=in_window(anatomy.steps, window)))
    if anatomy.kernel_steps is None:
        return anatomy
    return replace(anatomy, kernels=steady_kernel_totals(anatomy.kernel_steps, anatomy.steps))


def resummarize(store: Store, *, batch: int = 500) -> int:
    """Give every receipt a steady-state summary made under this build's rule (analysis/summary.py RULE): those
    stored before summaries existed, or under an older rule, are summarised from their stored step series, the
    same series and functions the read path uses. Returns how many were (re)written."""
    stale = store.query("stale_summaries", {"rule": steady_summary.RULE})["receipt_id"].to_list()
    for start in range(0, len(stale), batch):
        ids = stale[start:start + batch]
        series = steady_summary.series_by_receipt(store.query("steady_steps_many", {"ids": ids}), ids)
        store.replace_summaries({rid: steady_summary.summarise(*series[rid]) for rid in ids})
    return len(stale)


def with_stragglers(anatomy: Anatomy) -> Anatomy:
    """Rank-skew attribution over the steady steps of a multi-rank profile (analysis/stragglers.py), kept on
    the anatomy so it is stored with it; a single-rank profile, or one without communication, gets none."""
    if anatomy.events is None or anatomy.steps.height == 0:
        return anatomy
    steady = anatomy.steps.filter(~pl.col("warmup") & pl.col("step").is_not_null())
    # lazy: the analysis collects the parts it reads; a joined copy of every steady activity was the peak of
    # an nsys ingest (5M kernels: 809 MiB)
    events = (anatomy.events.lazy().join(steady.select("rank", "step").lazy(), on=["rank", "step"], how="semi")
              if steady.height else anatomy.events)
    step_ms = (cast("float | None", steady.group_by("step").agg(pl.col("wall_ms").max())["wall_ms"].median())
               if steady.height else None)
    report = stragglers.analyse(events, step_ms)
    if report is None:
        return anatomy
    summary = stragglers.report_json(report)
    summary.pop("per_step")
    return replace(anatomy, straggler_steps=report.per_step, straggler_summary=summary)


def _stored_window(store: Store, receipt_id: str) -> StepWindow:
    """The steady window a stored receipt was given, so an export attached to it shares it."""
    row = store.query("receipt", {"receipt_id": receipt_id}).row(0, named=True)
    return StepWindow(row["window_first_step"], row["window_last_step"], row["warmup_steps"] or 0,
                      row["warmup_last_step"], row["window_rule"] or "", 0)


def _forced_note(forced: str | None) -> tuple[str, ...]:
    return (f"attached with --force despite: {forced} (recorded on the source)",) if forced else ()


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
                         written.missing)

