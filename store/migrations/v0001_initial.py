"""0001: the first released schema (receipts 0.1.0), frozen here as it shipped.

Never edit this file: stores created by 0.1.0 hold exactly these tables, and every later revision
starts from them. Fresh stores are created from schema/tables.py at the current version instead.
"""

from __future__ import annotations

import sqlalchemy as sa

VERSION = 1
DESCRIPTION = "initial schema: receipts, steps, env, memory, sources, anatomy"


def upgrade(op) -> None:
    op.create_table(
        "anatomy_nvtx",
        sa.Column("receipt_id", sa.Text(), nullable=False),
        sa.Column("source_sha256", sa.Text(), nullable=False),
        sa.Column("rank", sa.Integer()),
        sa.Column("range_name", sa.Text(), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("total_ms", sa.Double(), nullable=False),
        sa.Column("gpu_ms", sa.Double()),
    )
    op.create_index("ix_anatomy_nvtx_receipt", "anatomy_nvtx", ["receipt_id"])
    op.create_table(
        "anatomy_rows",
        sa.Column("receipt_id", sa.Text(), nullable=False),
        sa.Column("source_sha256", sa.Text(), nullable=False),
        sa.Column("rank", sa.Integer()),
        sa.Column("step", sa.BigInteger()),
        sa.Column("category", sa.Text(), nullable=False),
        sa.Column("time_ms", sa.Double(), nullable=False),
        sa.Column("warmup", sa.Boolean(), nullable=False),
    )
    op.create_index("ix_anatomy_rows_receipt", "anatomy_rows", ["receipt_id"])
    op.create_table(
        "anatomy_sources",
        sa.Column("receipt_id", sa.Text(), nullable=False),
        sa.Column("source_sha256", sa.Text(), nullable=False),
        sa.Column("source_format", sa.Text(), nullable=False),
        sa.Column("schema_version", sa.Text()),
        sa.Column("step_marker", sa.Text(), nullable=False),
        sa.Column("attribution", sa.Text(), nullable=False),
        sa.Column("unattributed", sa.BigInteger(), nullable=False),
        sa.Column("raw_events_path", sa.Text()),
        sa.Column("warnings_json", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("receipt_id", "source_sha256"),
    )
    op.create_table(
        "anatomy_steps",
        sa.Column("receipt_id", sa.Text(), nullable=False),
        sa.Column("source_sha256", sa.Text(), nullable=False),
        sa.Column("rank", sa.Integer()),
        sa.Column("step", sa.BigInteger()),
        sa.Column("start_ns", sa.BigInteger()),
        sa.Column("wall_ms", sa.Double()),
        sa.Column("gpu_ms", sa.Double()),
        sa.Column("kernels", sa.BigInteger()),
        sa.Column("comm_ms", sa.Double()),
        sa.Column("overlap_pct", sa.Double()),
        sa.Column("warmup", sa.Boolean(), nullable=False),
    )
    op.create_index("ix_anatomy_steps_receipt", "anatomy_steps", ["receipt_id"])
    op.create_table(
        "receipt_env",
        sa.Column("receipt_id", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("value", sa.Text()),
        sa.Column("is_set", sa.Boolean(), nullable=False),
        sa.Column("redacted", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("receipt_id", "name"),
    )
    op.create_table(
        "receipt_memory",
        sa.Column("receipt_id", sa.Text(), nullable=False),
        sa.Column("rank", sa.Integer()),
        sa.Column("peak_allocated_bytes", sa.BigInteger()),
        sa.Column("peak_reserved_bytes", sa.BigInteger()),
    )
    op.create_index("ix_receipt_memory_receipt", "receipt_memory", ["receipt_id"])
    op.create_table(
        "receipt_sources",
        sa.Column("receipt_id", sa.Text(), nullable=False),
        sa.Column("sha256", sa.Text(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("format", sa.Text(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("ingested_at", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("receipt_id", "sha256"),
    )
    op.create_table(
        "receipt_steps",
        sa.Column("receipt_id", sa.Text(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("rank", sa.Integer()),
        sa.Column("step_ms", sa.Double()),
        sa.Column("tokens_per_s", sa.Double()),
        sa.Column("loss", sa.Double()),
        sa.Column("mfu_pct", sa.Double()),
        sa.Column("allocated_bytes", sa.BigInteger()),
        sa.Column("reserved_bytes", sa.BigInteger()),
        sa.Column("line", sa.BigInteger()),
        sa.Column("warmup", sa.Boolean(), nullable=False),
    )
    op.create_index("ix_receipt_steps_receipt", "receipt_steps", ["receipt_id"])
    op.create_table(
        "receipts",
        sa.Column("id", sa.Text(), primary_key=True),
        sa.Column("content_sha256", sa.Text(), nullable=False),
        sa.Column("run_name", sa.Text(), nullable=False),
        sa.Column("source_format", sa.Text(), nullable=False),
        sa.Column("format_version", sa.Text()),
        sa.Column("ingested_at", sa.Text(), nullable=False),
        sa.Column("started_at", sa.Text()),
        sa.Column("hostname", sa.Text()),
        sa.Column("raw_host_lineage", sa.Text()),
        sa.Column("host_lineage", sa.Text()),
        sa.Column("raw_preset", sa.Text()),
        sa.Column("preset_family", sa.Text()),
        sa.Column("raw_regime", sa.Text()),
        sa.Column("launch_regime", sa.Text()),
        sa.Column("engine", sa.Text()),
        sa.Column("compile_mode", sa.Text()),
        sa.Column("parallel_json", sa.Text()),
        sa.Column("identity_complete", sa.Boolean(), nullable=False),
        sa.Column("resolution_json", sa.Text()),
        sa.Column("machine_class", sa.Text()),
        sa.Column("gpu_model", sa.Text()),
        sa.Column("gpu_count", sa.Integer()),
        sa.Column("world_size", sa.Integer()),
        sa.Column("window_first_step", sa.BigInteger()),
        sa.Column("window_last_step", sa.BigInteger()),
        sa.Column("warmup_steps", sa.Integer(), nullable=False),
        sa.Column("warmup_last_step", sa.BigInteger()),
        sa.Column("window_rule", sa.Text(), nullable=False),
        sa.Column("ended_early", sa.Text()),
        sa.Column("peak_allocated_bytes", sa.BigInteger()),
        sa.Column("peak_reserved_bytes", sa.BigInteger()),
        sa.Column("tags_json", sa.Text(), nullable=False),
        sa.Column("features_json", sa.Text(), nullable=False),
        sa.Column("software_json", sa.Text(), nullable=False),
        sa.Column("topology_json", sa.Text(), nullable=False),
        sa.Column("provenance_json", sa.Text(), nullable=False),
        sa.Column("phases_json", sa.Text(), nullable=False),
        sa.Column("warnings_json", sa.Text(), nullable=False),
        sa.Column("model_version", sa.Integer(), nullable=False),
        sa.UniqueConstraint("content_sha256", name="uq_receipts_content"),
    )
    op.create_index("ix_receipts_lane", "receipts", ["host_lineage", "preset_family", "launch_regime"])
    op.create_table(
        "schema_meta",
        sa.Column("key", sa.Text(), primary_key=True),
        sa.Column("value", sa.Text(), nullable=False),
    )
