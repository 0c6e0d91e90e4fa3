"""Several Nsight Systems exports of ONE job -> one anatomy, as if one report had captured every rank.

A job profiled one report per rank (`torchrun ... nsys profile -o rank%q{RANK} python train.py`) or one per
node (`nsys profile torchrun ...` on each node) leaves N exports; NVIDIA's multi-report recipes
(`nsys recipe ... --input DIR`) read such a folder as one job, and so does this. The map is `read_export`: one
export into its own anatomy (ingest/nsys.parse), run one task per export through pipeline/execution.py (worker
processes, or Dask). The reduce is `combine`: the exports' ranks side by side on one clock.

- Ranks: an export that states its ranks (RANK in the captured environment of a one-process export, MPI
  thread names) keeps them. An export of several processes without stated ranks (one per node) numbers
  them 0..k-1; they are offset by the node rank its environment states (GROUP_RANK as torchrun sets it,
  NODE_RANK, SLURM_NODEID) times k, else given the lowest ranks still free, in the exports' order, with a
  warning. Two exports claiming one
  rank are refused, naming both files.
- Clock: nsys timestamps count from the session's start, and each export is its own session, so every
  timestamp is moved onto the earliest session's clock by the difference of the sessions' UTC starts
  (TARGET_INFO_SESSION_START_TIME.utcEpochNs). Measured on tests/data/gpu/multiexport: the two ranks' step
  ends, synchronised by the all-reduce, agree within ~1 ms aligned and differ by the 8.8 ms between the
  sessions' starts unaligned. Across hosts this assumes their clocks agree (NTP/PTP), and says so.
- One job: exports whose sessions started more than ten minutes apart, whose stated world sizes differ, whose
  process counts differ (without stated ranks), or whose step numbers have nothing in common are not one job;
  refused with the command that ingests them one by one.
"""

from __future__ import annotations

import gzip
import re
import shutil
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import polars as pl

from receipts.errors import InputError
from receipts.ingest import nsys, nsys_export
from receipts.ingest.nsys_activity import Progress
from receipts.ingest.rank_files import natural_order
from receipts.ingest.sanity import checked_anatomy
from receipts.schema.categories import CategoryRules
from receipts.schema.model import Anatomy
from receipts.schema.secrets import EnvRules
from receipts.scratch import scratch_dir

EXPORT_SUFFIXES = (".sqlite", ".sqlite.gz", ".nsys-rep")
# Which node of the job an export of several processes comes from (torchrun's GROUP_RANK, the usual NODE_RANK,
# Slurm's node index). Not OMPI_COMM_WORLD_NODE_RANK: that is a process's LOCAL rank on its node.
_NODE_ENV = ("GROUP_RANK", "NODE_RANK", "SLURM_NODEID")
# The exports of one job start together (torchrun or the scheduler launches every rank's `nsys profile` at
# once); ten minutes leaves room for a slow scheduler and still tells two runs apart.
JOB_SPAN_NS = 10 * 60 * 10**9


@dataclass(frozen=True)
class ExportPart:
    """One export read on its own: its anatomy on its own session clock (anatomy.clock_origin_ns: where it starts)."""

    path: Path
    anatomy: Anatomy
    node_rank: int | None            # from the captured environment (_NODE_ENV), for exports of several processes


def is_export(path: Path) -> bool:
    return path.name.endswith(EXPORT_SUFFIXES)


def job_exports(folder: Path) -> list[Path]:
    """The nsys exports at a folder's top level, one per report (a report beside its own export counts once:
    the export is read), in natural name order (rank2 before rank10)."""
    return natural_order(without_exported_reports(p for p in folder.iterdir() if p.is_file() and is_export(p)))


def without_exported_reports(paths: Iterable[Path]) -> list[Path]:
    """`paths` less each .nsys-rep whose own export (.sqlite or .sqlite.gz of the same stem) is among them: a
    report and its export are one profile, and the export is what is read."""
    paths = list(paths)
    exported = {_stem(p) for p in paths if p.name.endswith((".sqlite", ".sqlite.gz"))}
    return [p for p in paths if not (p.name.endswith(".nsys-rep") and _stem(p) in exported)]


def _stem(path: Path) -> str:
    name = path.name
    for suffix in EXPORT_SUFFIXES:
        name = name.removesuffix(suffix)
    return name


def read_export(path: Path, *, rules: CategoryRules, keep_raw: bool = False, env_rules: EnvRules | None = None,
                kind: str | None = None, progress: Progress | None = None, spill: Path | None = None
                ) -> ExportPart:
    """The map: one export into its anatomy and session start. `kind` ('nsys' | 'nsys-gz' | 'nsys-rep', as
    sniff.sniff_kind tells from content) or, when None, the name's ending (.sqlite, .sqlite.gz, .nsys-rep).
    `progress`: nsys.parse's, the fraction of the export's large tables streamed. `spill`: nsys.parse's, where
    the export's runtime calls, kept activity and events go (an export read alone, in the ingest's process; a
    job's exports keep theirs in memory)."""
    path = Path(path)
    kind = kind or ("nsys-gz" if path.name.endswith(".gz") else "nsys-rep" if path.name.endswith(".nsys-rep")
                    else "nsys")
    if kind == "nsys-gz":
        with scratch_dir("nsys") as tmp:
            plain = tmp / path.name.removesuffix(".gz")
            try:
                with gzip.open(path, "rb") as src, open(plain, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
            except (OSError, EOFError, zlib.error) as exc:
                raise InputError(path, f"gzip stream is corrupt or cut short ({exc}); expected a gzipped nsys "
                                       "SQLite export") from exc
            return _read_copy(path, plain, rules=rules, keep_raw=keep_raw, env_rules=env_rules, progress=progress,
                              spill=spill)
    if kind == "nsys-rep" and not nsys_export.exports_beside(path):  # a read-only folder: exported to scratch, then removed
        with scratch_dir("nsys") as tmp:
            return _read_copy(path, nsys_export.export_report(path, into=tmp), rules=rules, keep_raw=keep_raw,
                              env_rules=env_rules, progress=progress, spill=spill)
    sqlite_path = nsys_export.export_report(path) if kind == "nsys-rep" else path
    # Checked here, per export: a value out of range names the export that holds it, not the job's folder.
    anatomy = checked_anatomy(nsys.parse(sqlite_path, rules=rules, keep_raw=keep_raw, env_rules=env_rules,
                                         progress=progress, spill=spill), path)
    environ = {e.name: e.value for e in anatomy.env if e.is_set and e.value is not None}
    node = next((int(environ[k]) for k in _NODE_ENV if re.fullmatch(r"[0-9]{1,6}", environ.get(k, ""))), None)
    return ExportPart(path, anatomy, node)


def _read_copy(path: Path, export: Path, **options) -> ExportPart:
    """read_export of `export`, a temporary SQLite copy of the user's `path` (unpacked or exported), named as the
    user named it, in its result and in its errors."""
    try:
        return replace(read_export(export, kind="nsys", **options), path=path)
    except InputError as exc:
        raise InputError(path, exc.message.replace(str(export), str(path)), exc.line, exc.table) from exc


def combine(parts: list[ExportPart]) -> Anatomy:
    """The reduce: the exports' ranks side by side, on the earliest session's clock, as one anatomy."""
    if not parts:
        raise InputError(".", "no nsys exports given; expected one export per rank or per node of one job")
    if len(parts) == 1:
        return parts[0].anatomy
    warnings: list[str] = []
    _check_one_job(parts)
    offsets = _rank_offsets(parts, warnings)
    starts = [p.anatomy.clock_origin_ns for p in parts]
    if all(s is not None for s in starts):
        origin = min(s for s in starts if s is not None)
        shifts = [(s or 0) - origin for s in starts]
    else:
        shifts = [0] * len(parts)
        missing = ", ".join(p.path.name for p, s in zip(parts, starts) if s is None)
        warnings.append(f"no session start (TARGET_INFO_SESSION_START_TIME) in {missing}: the exports' clocks are "
                        "taken as one, so cross-rank timing (stragglers) assumes their sessions started together")
    hosts = [p.anatomy.claim.hostname for p in parts]
    if len(set(hosts)) > 1:
        warnings.append(f"{len(set(hosts))} hosts ({', '.join(sorted({h or '?' for h in hosts}))}): cross-rank "
                        "timing assumes their clocks agree (NTP/PTP)")
    for key in sorted({k for p in parts for k in p.anatomy.software}):
        values = {p.anatomy.software.get(key) for p in parts}
        if len(values) > 1:
            warnings.append(f"exports differ in {key}: {', '.join(sorted(str(v) for v in values))}")
    seen: dict[int, str] = {}
    frames: dict[str, list] = {name: [] for name in ("rows", "steps", "nvtx", "events", "kernel_steps", "gap_places",
                                                     "raw_events")}
    for part, offset, shift in zip(parts, offsets, shifts):
        a = part.anatomy
        for rank in a.steps["rank"].unique().drop_nulls().to_list() or a.rows["rank"].unique().drop_nulls().to_list():
            if rank + offset in seen:
                raise InputError(part.path, f"rank {rank + offset} also comes from {seen[rank + offset]}; a job takes "
                                            "each rank from one export")
            seen[rank + offset] = part.path.name
        warnings += [f"{part.path.name}: {w}" for w in a.warnings]
        for name in frames:
            frame = getattr(a, name)
            if frame is not None:
                frames[name].append(_moved(frame, offset, shift))
    first = parts[0].anatomy
    ranks = sum(p.anatomy.ranks_traced or 0 for p in parts)
    worlds = {p.anatomy.world_size for p in parts if p.anatomy.ranks_stated and p.anatomy.world_size}
    with_start = [p.anatomy.started_at for p in parts if p.anatomy.started_at]
    return replace(
        first,
        rows=pl.concat(frames["rows"]),
        steps=pl.concat(frames["steps"]).sort("rank", "step", nulls_last=True),
        nvtx=pl.concat(frames["nvtx"]).sort("rank", "range_name"),
        events=pl.concat(frames["events"]) if frames["events"] else None,
        kernel_steps=pl.concat(frames["kernel_steps"]) if frames["kernel_steps"] else None,
        gap_places=pl.concat(frames["gap_places"]) if len(frames["gap_places"]) == len(parts) else None,
        raw_events=pl.concat(frames["raw_events"]) if len(frames["raw_events"]) == len(parts) else None,
        attribution=f"{len(parts)} exports of one job, ranks side by side on the earliest session's clock; "
                    f"in each: {first.attribution}",
        unattributed=sum(p.anatomy.unattributed for p in parts),
        world_size=max(worlds) if len(worlds) == 1 else ranks or None,
        ranks_traced=ranks or None,
        ranks_stated=all(p.anatomy.ranks_stated or p.node_rank is not None for p in parts),
        started_at=min(with_start) if with_start else None,
        warnings=tuple(dict.fromkeys(warnings)),
    )


def _check_one_job(parts: list[ExportPart]) -> None:
    """Exports of two runs are not one job: refused, with the command that ingests them one by one, when their
    sessions started more than JOB_SPAN_NS apart, their stated WORLD_SIZEs differ, exports without stated ranks
    hold different numbers of GPU processes (one job's nodes run as many each), or their steps have none in
    common (one job's ranks run the same steps)."""
    def refuse(part: ExportPart, why: str) -> InputError:
        return InputError(part.path, f"{why}: not the same job; ingest each export on its own: "
                                     f"receipts ingest {part.path.parent}/*{''.join(part.path.suffixes)}")

    started = sorted((p.anatomy.clock_origin_ns, i) for i, p in enumerate(parts)
                     if p.anatomy.clock_origin_ns is not None)
    if started and started[-1][0] - started[0][0] > JOB_SPAN_NS:
        first, last = parts[started[0][1]], parts[started[-1][1]]
        raise refuse(last, f"its session started {(started[-1][0] - started[0][0]) / 60e9:,.0f} min after "
                           f"{first.path.name}'s ({last.anatomy.started_at} against {first.anatomy.started_at})")
    stated = [p for p in parts if p.anatomy.ranks_stated and p.anatomy.world_size]
    for p in stated[1:]:
        if p.anatomy.world_size != stated[0].anatomy.world_size:
            raise refuse(p, f"its world size is {p.anatomy.world_size} where {stated[0].path.name} says "
                            f"{stated[0].anatomy.world_size}")
    local = [p for p in parts if not p.anatomy.ranks_stated]
    for p in local[1:]:
        if p.anatomy.ranks_traced != local[0].anatomy.ranks_traced:
            raise refuse(p, f"it holds {p.anatomy.ranks_traced} GPU processes without stated ranks where "
                            f"{local[0].path.name} holds {local[0].anatomy.ranks_traced}")
    stepped = [(p, set(p.anatomy.steps["step"].drop_nulls().to_list())) for p in parts]
    stepped = [(p, steps) for p, steps in stepped if steps]
    for p, steps in stepped[1:]:
        first, first_steps = stepped[0]
        if not steps & first_steps:
            raise refuse(p, f"steps {min(steps)}-{max(steps)} share none with {first.path.name}'s "
                            f"{min(first_steps)}-{max(first_steps)}")


def _rank_offsets(parts: list[ExportPart], warnings: list[str]) -> list[int]:
    """What to add to each export's ranks: 0 where the export stated them; node rank x ranks per node where the
    export names its node; else, in the exports' (natural name) order, the lowest ranks still free."""
    local = [p for p in parts if not p.anatomy.ranks_stated]
    per_node = max((p.anatomy.ranks_traced or 1 for p in local), default=1)
    by_order = [p for p in local if p.node_rank is None]
    if by_order:
        warnings.append(f"{', '.join(p.path.name for p in by_order)}: no RANK or node rank (GROUP_RANK, NODE_RANK, "
                        "SLURM_NODEID) in the captured environment; ranks numbered by the exports' name order")
    # The others take, in the exports' order, the lowest free block of ranks: with rank 1 stated by one export,
    # an export of one process that states nothing is rank 0, the likeliest reading, and never a collision.
    taken = {r + (0 if p.anatomy.ranks_stated else (p.node_rank or 0) * per_node) for p in parts
             if p.anatomy.ranks_stated or p.node_rank is not None for r in p.anatomy.steps["rank"].drop_nulls().to_list()}
    offsets = []
    for p in parts:
        if p.anatomy.ranks_stated:
            offsets.append(0)
        elif p.node_rank is not None:
            offsets.append(p.node_rank * per_node)
        else:
            size = p.anatomy.ranks_traced or 1
            start = next(o for o in range(len(taken) + 1) if taken.isdisjoint(range(o, o + size)))
            taken.update(range(start, start + size))
            offsets.append(start)
    return offsets


_CLOCK_COLUMNS = ("start_ns", "end_ns", "launch_ns")
FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)


def _moved(frame: FrameT, offset: int, shift: int) -> FrameT:
    """An export's frame (or staged raw events, lazily) with its ranks offset and its timestamps on the job's
    clock, types kept."""
    if not offset and not shift:
        return frame
    schema = frame.collect_schema()
    moved = [(pl.col("rank") + offset).cast(schema["rank"]).alias("rank")] if "rank" in schema else []
    moved += [(pl.col(c) + shift).alias(c) for c in _CLOCK_COLUMNS if c in schema]
    return frame.with_columns(moved)
