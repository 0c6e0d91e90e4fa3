"""Nsight Systems SQLite export -> Anatomy (step-time anatomy, NVTX ranges, identity evidence).

One export is read in four steps, a module each:
- ingest/nsys_schema.py: the file checked, its schema probed by column name, its small tables read (metadata, the
  captured environment, the GPUs listed, the session's start, the names of kernels);
- ingest/nsys_activity.py: the large tables in one pass, out of DuckDB in record batches: the NVTX step ranges, the
  runtime calls (ingest/correlation.py), the GPU activity given its step and category and kept (ingest/column_bins.py);
- ingest/nsys_ranks.py: which rank each process is;
- ingest/nsys_anatomy.py: the per-step numbers, events, kernel sums and NVTX ranges of the ranked processes.
A `.nsys-rep` report is exported to SQLite first (ingest/nsys_export.py).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from receipts.ingest.nsys_activity import Progress, ShapesUnreadable, read_activity
from receipts.ingest.nsys_anatomy import anatomy_frames, nvtx_frame, raw_events
from receipts.ingest.nsys_ranks import env_evidence, parse_environment, ranks
from receipts.ingest.nsys_schema import MEMCPY, MEMSET, ExportFacts, read_facts
from receipts.schema.categories import CategoryRules
from receipts.schema.model import Anatomy, IdentityClaim, epoch_iso
from receipts.schema.secrets import EnvRules

def parse(path: Path, *, rules: CategoryRules, step_pattern: str = r"^step[ _#:]*(\d+)$",
          keep_raw: bool = False, env_rules: EnvRules | None = None, progress: Progress | None = None,
          spill: Path | None = None) -> Anatomy:
    """`env_rules`: the secret rules of the loaded configuration (shipped + ./receipts.toml + --registry);
    None: the shipped ones. `progress`: called with the fraction of the large tables' rows streamed so far.
    `spill`: a directory (the caller's, removed after the anatomy is used) where the runtime calls and the kept
    activity wait as they stream in (read back by correlation-id partition and by step group or time bin) and
    where each process's attributed activity (`events`) is written as Parquet as it is made, the anatomy's
    `events` a lazy scan of those files; else all of them are held in memory."""
    path = Path(path)
    facts = read_facts(path)
    shape_note = []
    try:
        read = read_activity(path, facts, rules=rules, step_pattern=step_pattern, keep_raw=keep_raw,
                             progress=progress, spill=spill)
    except ShapesUnreadable as exc:  # launch shapes are evidence, not the anatomy: read again without them
        shape_note.append(f"the kernels' launch shapes are left out: column {exc.column} of CUPTI_ACTIVITY_KIND_KERNEL "
                          f"holds a value that is no integer ({exc.why}); added kernel calls are priced without them")
        read = read_activity(path, facts, rules=rules, step_pattern=step_pattern, keep_raw=keep_raw,
                             progress=progress, spill=spill, shapes=False)
    environ = parse_environment(facts.env_rows.get("DeviceEnvironment"))
    rank_of, attribution_rank, world, ranks_stated = ranks(read.devices, environ, read.thread_ranks)
    has_steps = read.step_ranges.height > 0
    warnings = [*_missing_tables(facts), *shape_note, *read.warnings]
    if has_steps:
        unattributed = read.activity.unclaimed(read.with_graphs)
        marker = f"NVTX ranges matching {step_pattern!r} in table {facts.nvtx_table}"
    else:
        unattributed = 0
        marker = f"none: no NVTX range matches {step_pattern!r}; one window (step null) covers the whole capture"
        if facts.nvtx_table is not None:  # without the table, its warning says there are no ranges
            warnings.append(f"no NVTX ranges matching {step_pattern!r} found in table {facts.nvtx_table}")
    raw = raw_events(read.activity.raw_frame(read.with_graphs, rank_of), facts.names) if keep_raw else None
    rows, steps, kernels, events, gaps = anatomy_frames(read.activity, read.with_graphs, read.step_ranges, rank_of,
                                                  has_steps, facts.names, spill)
    gpu_model, gpus_on_host, gpu_count = _machine(facts, read.devices)
    if not facts.gpus:
        warnings.append("no TARGET_INFO_GPU / TARGET_INFO_CUDA_DEVICE rows: GPU count is the devices that ran work")
    env_rows, meta = facts.env_rows, facts.meta
    return Anatomy(
        category_rules=rules,
        source_format="nsys",
        schema_version=meta.get("EXPORT_SCHEMA_VERSION"),
        rows=rows, steps=steps, nvtx=nvtx_frame(read.ranges, rank_of),
        step_marker=marker,
        attribution=("GPU activity -> runtime call by (globalPid, correlationId); step = NVTX range open on ANY "
                     f"thread of the launching process at the call's start; {attribution_rank}"),
        unattributed=unattributed,
        claim=IdentityClaim(hostname=env_rows.get("Hostname")),
        gpu_model=gpu_model, gpu_count=gpu_count, world_size=world, ranks_traced=len(rank_of) or None,
        ranks_stated=ranks_stated, gpus_on_host=gpus_on_host,
        started_at=epoch_iso(facts.session_start_ns / 1e9) if facts.session_start_ns else None,
        clock_origin_ns=facts.session_start_ns,
        env=env_evidence(environ, env_rules),
        software={k: v for k, v in {"nsys": meta.get("EXPORT_PRODUCT_VERSION"),
                                    "nvidia_driver": env_rows.get("NvDriverVersion"),
                                    "cuda_driver": env_rows.get("CudaDriverVersion"),
                                    "os": env_rows.get("OsDescription")}.items() if v},
        warnings=tuple(warnings),
        raw_events=raw,
        events=events,
        kernel_steps=kernels,
        gap_places=gaps,
    )


def _missing_tables(facts: ExportFacts) -> list[str]:
    """What the export lacks that the anatomy would show."""
    missing = []
    if facts.nvtx_table is None:
        missing.append("no NVTX table (NVTX_EVENTS*) in the export: no NVTX ranges, so no steps (one window covers "
                       "the whole capture)")
    for table in (MEMCPY, MEMSET):
        if table not in facts.schema:
            missing.append(f"table {table} absent: no {table.rsplit('_', 1)[1].lower()} activity recorded")
    return missing


def _machine(facts: ExportFacts, devices: pl.DataFrame) -> tuple[str | None, int | None, int | None]:
    """(GPU model, GPUs on the host, GPU count). The model is the devices' that ran kernels: Windows exports also list
    display adapters (Intel HD, 'Microsoft Basic Render Driver'), which are no CUDA device (smCount 0) and ran
    nothing; None when no table names one. Without a listed GPU, the count is the devices that ran work."""
    ran = set(devices["device_id"].drop_nulls().unique().to_list())
    cuda_devices = [(i, n) for i, n, sm in facts.gpus if sm != 0]
    used = [n for i, n in cuda_devices if i in ran and n] or [n for _, n in cuda_devices if n]
    gpu_model = max(sorted(set(used)), key=used.count) if used else None
    gpus_on_host = len(cuda_devices) or None
    return gpu_model, gpus_on_host, gpus_on_host or len(ran) or None
