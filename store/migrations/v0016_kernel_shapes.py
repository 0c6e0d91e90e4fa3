"""0016: each kernel's calls by launch shape, for `receipts explain`'s pricing of added calls.

anatomy_kernel_shapes: per attached export, rank, kernel name and launch shape ('grid (2,66,1) block (384,1,1)':
nsys's gridX..blockZ, Kineto's args grid and block), the calls and summed duration over the receipt's steady steps.
Exports attached before this revision have none: the launch shapes are not in the store, so `receipts db upgrade`
cannot make them, and `explain` prices those runs' added calls as before (per added call); attach the export again
(`receipts ingest EXPORT --attach RUN`) to price them by shape.
"""

from __future__ import annotations

import sqlalchemy as sa

VERSION = 16
DESCRIPTION = "anatomy_kernel_shapes: each kernel's steady calls and time by launch shape (grid, block)"


def upgrade(op) -> None:
    op.create_table(
        "anatomy_kernel_shapes",
        sa.Column("receipt_id", sa.Text(), nullable=False),
        sa.Column("source_sha256", sa.Text(), nullable=False),
        sa.Column("rank", sa.Integer()),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("shape", sa.Text(), nullable=False),
        sa.Column("calls", sa.BigInteger(), nullable=False),
        sa.Column("total_ms", sa.Double(), nullable=False),
        sa.Column("steps", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_anatomy_kernel_shapes_receipt", "anatomy_kernel_shapes", ["receipt_id"])
