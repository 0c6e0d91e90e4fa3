"""Ingest orchestration: file -> parser -> Receipt (identity resolved, window chosen) -> store.

The one place the CLI, `receipts run` and `receipts push` go through to put evidence in a store.
Parsers stay pure; this module resolves identity and hands complete receipts to the store.
"""

from __future__ import annotations

import gzip
import shutil
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from receipts.analysis.window import choose_window
from receipts.errors import InputError
from receipts.ingest import sniff, sysinfo
from receipts.ingest.textlog import read_log
from receipts.lifecycle import write_current
from receipts.schema.categories import CategoryRules, load_category_rules
from receipts.schema.identity import resolve_identity
from receipts.schema.model import (FACT_SECTIONS, Anatomy, IdentityClaim, ParsedRun, Receipt, SourceFile, sha256_file,
                                   steps_frame)
from receipts.schema.registry import Registry
from receipts.store import Store

SIDECAR_NAME = "receipt.toml"
PROFILE_KINDS = ("nsys", "nsys-gz", "nsys-rep", "kineto", "kineto-dir")


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
    try:
        data = tomllib.loads(sidecar.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(sidecar, f"not valid TOML: {exc}") from exc
    claim = IdentityClaim(data.get("host_lineage"), data.get("preset"), data.get("regime"), data.get("hostname"))
    return claim, data


def build_receipt(parsed: ParsedRun, *, source: SourceFile, claim: IdentityClaim, registry: Registry,
                  run_name: str, tags: tuple[str, ...] = ()) -> Receipt:
    """Evidence in the file, then receipt.toml, then explicit flags: later sources win field by field."""
    identity = resolve_identity(parsed.claim.merged(claim), registry)
    window = choose_window(parsed.steps, parsed.phases)
    return Receipt(
        id=source.sha256[:16],
        content_sha256=source.sha256,
        run_name=run_name,
        identity=identity,
        parsed=parsed,
        window=window,
        sources=(source,),
        tags=tuple(sorted(set(tags))),
    )


def _source(path: Path, fmt: str, role: str) -> SourceFile:
    if path.is_dir():
        import hashlib

        files = sorted(p for p in path.iterdir() if p.is_file())
        digest = hashlib.sha256("".join(sha256_file(p) for p in files).encode()).hexdigest()
        return SourceFile(str(path.resolve()), digest, sum(p.stat().st_size for p in files), fmt, role)
    return SourceFile(str(path.resolve()), sha256_file(path), path.stat().st_size, fmt, role)


def parse_log(path: Path, fmt: str | None = None) -> ParsedRun:
    log = read_log(path)
    name = None
    if fmt:
        name = sniff.FORMAT_ALIASES.get(fmt.lower())
        if name is None:
            raise InputError(path, f"--format {fmt!r} is not one of {', '.join(sorted(set(sniff.FORMAT_ALIASES)))}")
    return sniff.parse_log(log, name)


def parse_profile(path: Path, kind: str, rules: CategoryRules, keep_raw: bool) -> Anatomy:
    if kind == "nsys-gz":
        with tempfile.TemporaryDirectory(prefix="receipts-nsys-") as tmp:
            plain = Path(tmp) / path.name.removesuffix(".gz")
            try:
                with gzip.open(path, "rb") as src, open(plain, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
            except (OSError, EOFError) as exc:
                raise InputError(path, f"gzip stream is corrupt or cut short ({exc}); expected a gzipped nsys "
                                       "SQLite export") from exc
            return parse_profile(plain, "nsys", rules, keep_raw)
    if kind in ("nsys", "nsys-rep"):
        from receipts.ingest import nsys

        sqlite_path = nsys.export_report(path) if kind == "nsys-rep" else path
        return nsys.parse(sqlite_path, rules=rules, keep_raw=keep_raw)
    from receipts.ingest import kineto

    if kind == "kineto-dir":
        return kineto.parse_dir(path, rules=rules, keep_raw=keep_raw)
    return kineto.parse_files([path], rules=rules, keep_raw=keep_raw)


def receipt_from_anatomy(anatomy: Anatomy) -> ParsedRun:
    """A profiler export ingested on its own: its step markers become the step series."""
    steps = anatomy.steps.filter(pl.col("step").is_not_null())
    frame = steps_frame(steps.select("step", "rank", pl.col("wall_ms").alias("step_ms")))
    phases = tuple(("warmup", s, s) for s in steps.filter(pl.col("warmup"))["step"].unique().to_list())
    return ParsedRun(
        source_format=anatomy.source_format,
        format_version=anatomy.schema_version,
        steps=frame,
        claim=anatomy.claim,
        phases=phases,
        env=anatomy.env,
        software=anatomy.software,
        gpu_model=anatomy.gpu_model,
        gpu_count=anatomy.gpu_count,
        world_size=anatomy.world_size,
        warnings=anatomy.warnings,
        memory=(),
    )


def _profile_paths_in(run_dir: Path) -> list[Path]:
    found = [p for p in sorted(run_dir.iterdir()) if p.is_file() and p.suffix in (".sqlite", ".nsys-rep")]
    # A report and its own export are one profile: attach the export, not both.
    exported = {p.stem for p in found if p.suffix == ".sqlite"}
    found = [p for p in found if not (p.suffix == ".nsys-rep" and p.stem in exported)]
    traces = [p for p in sorted(run_dir.rglob("*")) if p.is_file() and (p.name.endswith(".json.gz") or p.name.endswith(".json"))
              and ".pt.trace" in p.name]
    if traces:
        found.append(traces[0].parent)
    return found


def ingest_paths(store: Store, paths: list[Path], *, identity: IdentityClaim = IdentityClaim(),
                 run_name: str | None = None, registry: Registry, attach: str | None = None,
                 tags: tuple[str, ...] = (), fmt: str | None = None, rules: CategoryRules | None = None,
                 keep_raw: bool = False) -> list[IngestOutcome]:
    """Ingest each path. Each receipt is written in its own transaction; a bad file raises InputError
    before anything of it is written, so the store never holds a half receipt."""
    outcomes: list[IngestOutcome] = []
    for path in map(Path, paths):
        if not path.exists():
            raise InputError(path, "does not exist")
        if path.is_dir() and (path / "run.log").is_file():
            # A `receipts run` directory: the log is the receipt; exports found there attach to it.
            first = ingest_paths(store, [path / "run.log"], identity=identity, run_name=run_name or path.name,
                                 registry=registry, tags=tags, fmt=fmt)
            outcomes += first
            extra = _profile_paths_in(path)
            if extra:
                outcomes += ingest_paths(store, extra, registry=registry, attach=first[0].receipt_id,
                                         rules=rules, keep_raw=keep_raw)
            continue
        kind = sniff.sniff_kind(path)
        if kind in PROFILE_KINDS:
            rules = rules or load_category_rules()
            outcomes.append(_ingest_profile(store, path, kind, identity=identity, run_name=run_name, registry=registry,
                                            attach=attach, tags=tags, rules=rules, keep_raw=keep_raw))
            continue
        if kind in FACT_SECTIONS:
            if attach is None:
                raise InputError(path, f"is `{kind}` output: machine facts belong to a run; give --attach RUN")
            section, facts = sysinfo.facts(path, kind)
            receipt_id = store.resolve(attach)
            created = store.attach_facts(receipt_id, section, facts, _source(path, kind, kind))
            outcomes.append(IngestOutcome(str(path), receipt_id, attach, created, kind))
            continue
        if attach is not None:
            raise InputError(path, "--attach takes a profiler export (nsys .sqlite/.nsys-rep or Kineto traces); "
                                   "this looks like a training log")
        parsed = parse_log(path, fmt)
        side_claim, side = read_sidecar(path)
        name = run_name or side.get("run_name") or (path.parent.name if path.name == "run.log" else path.stem)
        all_tags = tuple(tags) + tuple(side.get("tags", ()))
        receipt = build_receipt(parsed, source=_source(path, parsed.source_format, "log"),
                                claim=side_claim.merged(identity), registry=registry, run_name=name, tags=all_tags)
        outcomes.append(_write_receipt(store, path, receipt, registry=registry, asked=side_claim.merged(identity),
                                       named=bool(run_name or side.get("run_name"))))
    return outcomes


def _ingest_profile(store: Store, path: Path, kind: str, *, identity: IdentityClaim, run_name: str | None,
                    registry: Registry, attach: str | None, tags: tuple[str, ...], rules: CategoryRules,
                    keep_raw: bool) -> IngestOutcome:
    anatomy = parse_profile(path, kind, rules, keep_raw)
    source = _source(path, anatomy.source_format, anatomy.source_format)
    if attach is not None:
        receipt_id = store.resolve(attach)
        created = store.attach_anatomy(receipt_id, anatomy, source)
        return IngestOutcome(str(path), receipt_id, attach, created, "anatomy", warnings=anatomy.warnings)
    parsed = receipt_from_anatomy(anatomy)
    side_claim, side = read_sidecar(path)
    name = run_name or side.get("run_name") or path.name.split(".")[0]
    receipt = build_receipt(parsed, source=source, claim=side_claim.merged(identity), registry=registry,
                            run_name=name, tags=tuple(tags))
    return _write_receipt(store, path, receipt, registry=registry, asked=side_claim.merged(identity),
                          named=bool(run_name or side.get("run_name")), anatomies=((anatomy, source),))


def _write_receipt(store: Store, path: Path, receipt: Receipt, *, registry: Registry, asked: IdentityClaim,
                   named: bool, anatomies: tuple = ()) -> IngestOutcome:
    """Store a parsed receipt through the identity lifecycle (lifecycle.write_current): superseding an
    earlier view of the same run, refusing unknown values in strict mode, reporting identity conflicts."""
    written = write_current(store, receipt, registry=registry, asked=asked, named=named, anatomies=anatomies)
    return IngestOutcome(str(path), written.receipt_id, written.run_name, written.created, "receipt",
                         written.complete, receipt.parsed.ended_early, receipt.parsed.warnings + written.warnings,
                         written.supersedes, written.superseded_by, written.identity_conflict, written.missing)

