"""Which parser reads a target, and how: a training log streamed chunk by chunk where its format allows, a profile
read one task per rank file (pipeline/execution.py), each result checked (ingest/sanity.py). Returns data; the
store is not touched here."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import assert_never

import polars as pl

from receipts.errors import InputError
from receipts.ingest import sniff
from receipts.ingest.sanity import checked_anatomy, checked_run
from receipts.ingest.textlog import ReadProgress, read_log
from receipts.pipeline.execution import RankMap, parse_kineto, parse_nsys_job
from receipts.pipeline.profile_formats import profile_format
from receipts.schema.categories import CategoryRules
from receipts.schema.model import Anatomy, ParsedRun, SourceFile, sha256_file
from receipts.schema.secrets import EnvRules


def source_file(path: Path, fmt: str, role: str, files: list[Path] | None = None, *, sha256: str | None = None) -> SourceFile:
    """A file, or a folder's files (all of them, or the given ones) hashed in name order; `sha256`: the file's,
    when the caller has it already."""
    if path.is_dir():
        import hashlib

        files = sorted(files if files is not None else (p for p in path.iterdir() if p.is_file()))
        digest = hashlib.sha256("".join(sha256_file(p) for p in files).encode()).hexdigest()
        return SourceFile(str(path.resolve()), digest, sum(p.stat().st_size for p in files), fmt, role)
    return SourceFile(str(path.resolve()), sha256 or sha256_file(path), path.stat().st_size, fmt, role)


def parse_log(path: Path, fmt: str | None = None, progress: ReadProgress | None = None, *,
              spill: Path | None = None, step_line: str | None = None) -> ParsedRun:
    """`progress` is called as the log is read (bytes and lines so far). Step formats are read chunk by
    chunk (bounded memory), their step rows written to `spill` when given (a directory the caller removes
    once the receipt is stored: the steps are then a scan of it); the others, and a log no format claims, whole.
    `step_line`: the user's declared step line (Registry.step_line), tried before the built-in formats."""
    name = None
    if fmt:
        name = sniff.FORMAT_ALIASES.get(fmt.lower())
        if name is None:
            read_log(path)  # an unreadable or empty file says so first, as it always has
            raise InputError(path, f"{fmt!r} is not one of {', '.join(sorted(set(sniff.FORMAT_ALIASES)))}",
                             option="format")
    try:
        parsed = (sniff.parse_streamed(path, name, progress, spill=spill, step_line=step_line)
                  or sniff.parse_log(read_log(path, progress), name, step_line=step_line))
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
    pipeline/execution.py). `progress`: for one nsys export, its rows streamed so far, as bytes of the file; for a
    profile of several files, the bytes of those read so far. `spill`: a directory the caller removes once the
    anatomy is used, where one nsys export's runtime calls, kept activity and events go as they are made
    (nsys.parse). The anatomy carries `rules` (Anatomy.category_rules): what it was categorised under. `kind`: an
    entry of pipeline/profile_formats.py (a RegistryError naming it when there is none)."""
    fmt = profile_format(kind)
    fmt.parser_module()  # a module that cannot be imported is named, not a failure of this file
    if fmt.reader == "nsys-job":  # one job's exports, one per rank or node: one anatomy
        return checked_anatomy(parse_nsys_job(fmt.files(path), rules=rules, keep_raw=keep_raw, env_rules=env_rules,
                                              plan=_with_progress(ranks, progress)), path)
    if fmt.reader == "nsys-export":  # one export: what each export of a job is read as
        from receipts.ingest import nsys_job

        size = path.stat().st_size
        rows = None if progress is None else (lambda fraction: progress(int(size * fraction), 0))
        return nsys_job.read_export(path, rules=rules, keep_raw=keep_raw, env_rules=env_rules, kind=kind,
                                    progress=rows, spill=spill).anatomy
    if fmt.reader == "kineto":  # traces, one per rank
        return checked_anatomy(parse_kineto(fmt.files(path), rules=rules, keep_raw=keep_raw,
                                            plan=_with_progress(ranks, progress)), path)
    assert_never(fmt.reader)


def _with_progress(ranks: RankMap, progress: ReadProgress | None) -> RankMap:
    """The map says the bytes of the profile's files read so far (a trace or an export done) to the bar."""
    return ranks if progress is None else replace(ranks, progress=lambda done: progress(done, 0))
