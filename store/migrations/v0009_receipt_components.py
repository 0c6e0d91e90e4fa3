"""0009: per-run component summaries per attached export (what `receipts explain` reads).

receipt_components: per export, one row per component (level category / kernel / nvtx / rank) with its ms per
steady step (analysis/components.py). Exports attached before this revision have no rows until `receipts db
upgrade` computes them from their stored anatomy rows, with the function the ingest uses.
"""

from __future__ import annotations

import sqlalchemy as sa

VERSION = 9
DESCRIPTION = "receipt_components: ms per steady step by category, kernel, NVTX range and rank, per attached export"


def upgrade(op) -> None:
    op.create_table(
        "receipt_components",
        sa.Column("receipt_id", sa.Text(), nullable=False),
        sa.Column("source_sha256", sa.Text(), nullable=False),
        sa.Column("rule", sa.Text(), nullable=False),
        sa.Column("level", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("category", sa.Text()),
        sa.Column("ms_per_step", sa.Double(), nullable=False),
        sa.Column("calls_per_step", sa.Double()),
        sa.Column("n_steps", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_receipt_components_receipt", "receipt_components", ["receipt_id"])
