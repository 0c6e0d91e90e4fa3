"""0003: the identity lifecycle: retag with an audit trail, and superseded receipts.

- receipts.superseded_by: the id of the receipt that replaced this one (a growing log ingested again,
  or a RECEIPT header naming the same run). Current receipt = `superseded_by IS NULL`; every listing,
  lane, compare default and the gate read only current ones.
- receipts.run_key: the run a RECEIPT header names (its `run_id`, else hostname@started_at), indexed so
  a re-ingest finds the earlier receipt of the same run with one lookup. Back-filled for native logs.
- receipt_sources.forced: the contradiction `ingest --attach --force` overrode (null = none).
- identity_history: append-only, one row per `receipts retag`, old and new identity side by side.

Only adds; nothing existing changes meaning, so older receipts read as current and never retagged.
"""

from __future__ import annotations

import sqlalchemy as sa

VERSION = 3
DESCRIPTION = "identity lifecycle: receipts.superseded_by/run_key, receipt_sources.forced, identity_history"

IDENTITY_FIELDS = ("run_name", "tags_json", "raw_host_lineage", "host_lineage", "raw_preset", "preset_family",
                   "raw_regime", "launch_regime", "identity_complete")


def upgrade(op) -> None:
    op.add_column("receipts", sa.Column("superseded_by", sa.Text()))
    op.add_column("receipts", sa.Column("run_key", sa.Text()))
    op.add_column("receipt_sources", sa.Column("forced", sa.Text()))
    op.create_index("ix_receipts_run_key", "receipts", ["run_key"], if_not_exists=True)
    op.create_table(
        "identity_history",
        sa.Column("receipt_id", sa.Text(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("changed_at", sa.Text(), nullable=False),
        sa.Column("changed_by", sa.Text(), nullable=False),
        sa.Column("why", sa.Text(), nullable=False),
        *(sa.Column(f"{age}_{name}", sa.Boolean() if name == "identity_complete" else sa.Text())
          for age in ("old", "new") for name in IDENTITY_FIELDS),
        sa.PrimaryKeyConstraint("receipt_id", "seq"),
    )
    # Native logs written before v3 carry their run in the header's hostname and started_at columns.
    op.execute("UPDATE receipts SET run_key = hostname || '@' || started_at "
               "WHERE source_format = 'receipt' AND hostname IS NOT NULL AND started_at IS NOT NULL")
