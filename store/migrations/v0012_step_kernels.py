"""0012: the longest kernels of each step, for a drill-down from one slow step to its kernels.

anatomy_step_kernels: per attached export, rank and step (warm-up steps too), the STEP_KERNELS_KEPT longest
kernel names with their calls and summed duration, and the rest in one '(other kernels)' row. Exports attached
before this revision have none: the raw kernels are not in the store, so `receipts db upgrade` cannot make them;
attach the export again (`receipts ingest EXPORT --attach RUN`) to drill into its steps.
"""

from __future__ import annotations

import sqlalchemy as sa

VERSION = 12
DESCRIPTION = "anatomy_step_kernels: the longest kernels of each step of each rank, per attached export"


def upgrade(op) -> None:
    op.create_table(
        "anatomy_step_kernels",
        sa.Column("receipt_id", sa.Text(), nullable=False),
        sa.Column("source_sha256", sa.Text(), nullable=False),
        sa.Column("rank", sa.Integer()),
        sa.Column("step", sa.BigInteger()),
        sa.Column("category", sa.Text()),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("calls", sa.BigInteger(), nullable=False),
        sa.Column("time_ms", sa.Double(), nullable=False),
    )
    op.create_index("ix_anatomy_step_kernels_receipt", "anatomy_step_kernels", ["receipt_id"])
