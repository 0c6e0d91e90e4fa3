"""0007: kernel totals by name per attached export (a top-N kernels table per category).

anatomy_kernels: per rank, category and kernel name, the calls and summed duration over the receipt's steady
steps, and how many steps that is. Exports attached before this revision have no rows (their kernel names were
not kept): the anatomy view and `receipts anatomy --by kernel` say so.
"""

from __future__ import annotations

import sqlalchemy as sa

VERSION = 7
DESCRIPTION = "anatomy_kernels: kernel calls and time by name over the steady steps, per attached export"


def upgrade(op) -> None:
    op.create_table(
        "anatomy_kernels",
        sa.Column("receipt_id", sa.Text(), nullable=False),
        sa.Column("source_sha256", sa.Text(), nullable=False),
        sa.Column("rank", sa.Integer()),
        sa.Column("category", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("calls", sa.BigInteger(), nullable=False),
        sa.Column("total_ms", sa.Double(), nullable=False),
        sa.Column("steps", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_anatomy_kernels_receipt", "anatomy_kernels", ["receipt_id"])
