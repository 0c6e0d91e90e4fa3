"""Receipt and Anatomy objects -> table rows. Shared by every backend so both store the same bytes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import polars as pl

from receipts.schema.identity import identity_columns
from receipts.schema.model import (ANATOMY_GAP_SCHEMA, ANATOMY_KERNEL_SCHEMA, ANATOMY_KERNEL_SHAPE_SCHEMA, ANATOMY_NVTX_SCHEMA,
                                   ANATOMY_ROW_SCHEMA,
                                   ANATOMY_STEP_KERNEL_SCHEMA, ANATOMY_STEP_SCHEMA, COMPONENT_SCHEMA,
                                   RECEIPT_MODEL_VERSION,
                                   Anatomy, Receipt, SourceFile, Steps, as_text, mark_warmup)


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))


def now_iso() -> str:
    """Now, UTC, to the microsecond: logs without a date of their own are ordered by when they were ingested, and
    a batch is ingested in far less than a second."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def receipt_row(receipt: Receipt, ingested_at: str) -> dict[str, Any]:
    ident, parsed, window = receipt.identity, receipt.parsed, receipt.window
    return {
        "id": receipt.id,
        "content_sha256": receipt.content_sha256,
        "run_name": receipt.run_name,
        "source_format": parsed.source_format,
        "format_version": parsed.format_version,
        "ingested_at": ingested_at,
        "started_at": parsed.started_at,
        "hostname": ident.hostname,
        **identity_columns(ident),
        "machine_class": receipt.machine_class,
        "gpu_model": parsed.gpu_model,
        "gpu_count": parsed.gpu_count,
        "world_size": parsed.world_size,
        "ranks_traced": parsed.ranks_traced,
        "gpus_on_host": parsed.gpus_on_host,
        "window_first_step": window.first_step,
        "window_last_step": window.last_step,
        "warmup_steps": window.warmup_steps,
        "warmup_last_step": window.warmup_last_step,
        "window_rule": window.rule,
        "ended_early": parsed.ended_early,
        "peak_allocated_bytes": receipt.peak_allocated_bytes,
        "peak_reserved_bytes": receipt.peak_reserved_bytes,
        "tags_json": dumps(sorted(set(receipt.tags) | set(parsed.tags))),
        "features_json": dumps({**dict(ident.features), **parsed.features}),
        "software_json": dumps(parsed.software),
        "topology_json": dumps(parsed.topology),
        "provenance_json": dumps(parsed.provenance),
        "phases_json": dumps([list(p) for p in parsed.phases]),
        "warnings_json": dumps(list(parsed.warnings)),
        "model_version": RECEIPT_MODEL_VERSION,
        "superseded_by": None,
        "run_key": run_key(receipt),
        "ingest_seq": None,               # the store numbers it as it writes (Store._write)
        "log_head_sha256": None,          # a log's family: lifecycle.write_current sets it
    }


def run_key(receipt: Receipt) -> str | None:
    """The run a RECEIPT header names: its `run_id`, else hostname@started_at (the launcher stamps
    milliseconds). Two logs with one run key are one run seen twice (e.g. a log that kept growing)."""
    parsed = receipt.parsed
    if parsed.source_format.split("+")[0] != "receipt":  # "receipt+nanochat": a launcher header over third-party steps
        return None
    if parsed.provenance.get("run_id"):
        return str(parsed.provenance["run_id"])
    if receipt.identity.hostname and parsed.started_at:
        return f"{receipt.identity.hostname}@{parsed.started_at}"
    return None


def step_frame(receipt: Receipt) -> Steps:
    steps = mark_warmup(receipt.parsed.steps, receipt.window)
    return steps.select(pl.lit(receipt.id).alias("receipt_id"), pl.all())


# Rows per slice of a bulk write: each is one copy (a log's constant receipt_id made real, an Arrow table or
# a CSV buffer), never the whole series at once (2^16: 2^18-row slices held ~60 MiB more at 2M steps, measured).
BULK_SLICE_ROWS = 1 << 16


def bulk_slices(frame: Steps, rows: int = BULK_SLICE_ROWS) -> Iterator[pl.DataFrame]:
    """A bulk frame in order, `rows` at a time: slices of a DataFrame, or of a spilled step frame collected
    one at a time (a scan of the settled Parquet file: ingest/spool.py), so a write holds one slice."""
    if isinstance(frame, pl.DataFrame):
        for start in range(0, frame.height, rows):
            yield frame.slice(start, rows)
        return
    start = 0
    while True:
        part = frame.slice(start, rows).collect()
        if part.height:
            yield part
        if part.height < rows:
            return
        start += rows


def summary_rows(receipt: Receipt) -> list[dict[str, Any]]:
    return [] if receipt.summary is None else [summary_row(receipt.id, receipt.summary)]


def summary_row(receipt_id: str, s: dict[str, Any]) -> dict[str, Any]:
    """A receipt_summaries row from analysis/summary.py's stored form."""
    step = s["step_ms"]["summary"]
    return {"receipt_id": receipt_id, "rule": s["rule"], "n_steady_steps": step["n"] if step else 0,
            "median_step_ms": step["median"] if step else None, "summary_json": dumps(s)}


def env_rows(receipt: Receipt) -> list[dict[str, Any]]:
    return [{"receipt_id": receipt.id, "name": e.name, "value": None if e.redacted else e.value,
             "is_set": e.is_set, "redacted": e.redacted} for e in receipt.parsed.env]


def memory_rows(receipt: Receipt) -> list[dict[str, Any]]:
    return [{"receipt_id": receipt.id, "rank": m.rank, "peak_allocated_bytes": m.peak_allocated_bytes,
             "peak_reserved_bytes": m.peak_reserved_bytes} for m in receipt.parsed.memory]


def telemetry_rows(receipt: Receipt) -> list[dict[str, Any]]:
    from dataclasses import asdict

    out = []
    for t in receipt.parsed.telemetry:
        row = asdict(t)
        row["throttle_json"] = json.dumps(row.pop("throttle_share"), sort_keys=True)
        row["xids_json"] = json.dumps(list(row.pop("xids")))
        out.append({"receipt_id": receipt.id, **row})
    return out


def source_rows(receipt_id: str, sources: tuple[SourceFile, ...], ingested_at: str,
                forced: str | None = None) -> list[dict[str, Any]]:
    return [{"receipt_id": receipt_id, "sha256": s.sha256, "path": as_text(s.path), "size_bytes": s.size_bytes,
             "format": s.format, "role": s.role, "ingested_at": ingested_at, "forced": forced} for s in sources]


def _typed(frame: pl.DataFrame, schema: dict) -> pl.DataFrame:
    return frame.select([pl.col(c).cast(t) if c in frame.columns else pl.lit(None, dtype=t).alias(c)
                         for c, t in schema.items()])


def anatomy_frames(receipt_id: str, source_sha256: str, anatomy: Anatomy) -> dict[str, pl.DataFrame]:
    """Rows for anatomy_rows / anatomy_steps / anatomy_nvtx; a row is warm-up when its step is."""
    prefix = [pl.lit(receipt_id).alias("receipt_id"), pl.lit(source_sha256).alias("source_sha256")]
    steps = _typed(anatomy.steps, ANATOMY_STEP_SCHEMA)
    warm = steps.filter(pl.col("warmup")).select("rank", "step")
    rows = _typed(anatomy.rows.drop("warmup", strict=False), {k: v for k, v in ANATOMY_ROW_SCHEMA.items() if k != "warmup"})
    rows = rows.join(warm.with_columns(pl.lit(True).alias("warmup")), on=["rank", "step"], how="left", nulls_equal=True)
    rows = rows.with_columns(pl.col("warmup").fill_null(False))
    return {
        "anatomy_rows": rows.select(*prefix, *ANATOMY_ROW_SCHEMA),
        "anatomy_steps": steps.select(*prefix, *ANATOMY_STEP_SCHEMA),
        "anatomy_nvtx": _typed(anatomy.nvtx, ANATOMY_NVTX_SCHEMA).select(*prefix, *ANATOMY_NVTX_SCHEMA),
        "anatomy_kernels": _typed(anatomy.kernels if anatomy.kernels is not None else pl.DataFrame(),
                                  ANATOMY_KERNEL_SCHEMA).select(*prefix, *ANATOMY_KERNEL_SCHEMA),
        "anatomy_step_kernels": _typed(anatomy.step_kernels if anatomy.step_kernels is not None else pl.DataFrame(),
                                       ANATOMY_STEP_KERNEL_SCHEMA).select(*prefix, *ANATOMY_STEP_KERNEL_SCHEMA),
        "anatomy_kernel_shapes": _typed(anatomy.kernel_shapes if anatomy.kernel_shapes is not None else pl.DataFrame(),
                                        ANATOMY_KERNEL_SHAPE_SCHEMA).select(*prefix, *ANATOMY_KERNEL_SHAPE_SCHEMA),
        "anatomy_gaps": _typed(anatomy.gap_places if anatomy.gap_places is not None else pl.DataFrame(),
                               ANATOMY_GAP_SCHEMA).select(*prefix, *ANATOMY_GAP_SCHEMA),
    }


def component_rows(receipt_id: str, source_sha256: str, anatomy: Anatomy) -> list[dict[str, Any]]:
    """receipt_components rows of one export (analysis/components.py computed them; none when it did not)."""
    if anatomy.components is None:
        return []
    return [{"receipt_id": receipt_id, "source_sha256": source_sha256, **row}
            for row in _typed(anatomy.components, COMPONENT_SCHEMA).to_dicts()]


def anatomy_source_row(receipt_id: str, source_sha256: str, anatomy: Anatomy, raw_path: str | None) -> dict[str, Any]:
    return {"receipt_id": receipt_id, "source_sha256": source_sha256, "source_format": anatomy.source_format,
            "schema_version": anatomy.schema_version, "step_marker": anatomy.step_marker,
            "attribution": anatomy.attribution, "unattributed": anatomy.unattributed,
            "raw_events_path": raw_path, "warnings_json": dumps(list(anatomy.warnings)),
            "stragglers_json": None if anatomy.straggler_summary is None else dumps(
                {**anatomy.straggler_summary, "per_step": _rows_of(anatomy.straggler_steps)}),
            **_rules_columns(anatomy)}


def _rules_columns(anatomy: Anatomy) -> dict[str, Any]:
    rules = anatomy.category_rules
    if rules is None:
        raise ValueError("an anatomy without the category rules it was made under (pipeline/parse.parse_profile)")
    return {"category_rules_version": rules.version, "category_rules_sha256": rules.sha256,
            "category_rules_json": rules.text}


def _rows_of(frame: pl.DataFrame | None) -> list[dict[str, Any]]:
    return [] if frame is None else frame.to_dicts()
