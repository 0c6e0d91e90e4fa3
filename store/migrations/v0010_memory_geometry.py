"""0010: memory geometry per receipt, by source: what receipts.capture measured (a RECEIPT footer's `memory`),
what a PyTorch memory snapshot replays to, what `receipts estimate` expects.

memory_sources: one row per source on a receipt (its kind; the guard that makes attaching one twice a no-op);
memory_ranks: per rank (or device) the peaks, resident bytes, fragmentation at the peak, device HBM, allocator
retries and OOMs; memory_categories: per rank the bytes of each bucket or category. Receipts stored before this
revision have none: `show` gives their geometry from the receipt's own peaks.
"""

from __future__ import annotations

import sqlalchemy as sa

VERSION = 10
DESCRIPTION = "memory_sources, memory_ranks, memory_categories: memory geometry measured and estimated, by bucket"


def upgrade(op) -> None:
    op.create_table(
        "memory_sources",
        sa.Column("receipt_id", sa.Text(), nullable=False),
        sa.Column("source_sha256", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("receipt_id", "source_sha256"),
    )
    op.create_table(
        "memory_ranks",
        sa.Column("receipt_id", sa.Text(), nullable=False),
        sa.Column("source_sha256", sa.Text(), nullable=False),
        sa.Column("rank", sa.Integer()),
        sa.Column("device", sa.Integer()),
        sa.Column("peak_allocated_bytes", sa.BigInteger()),
        sa.Column("peak_reserved_bytes", sa.BigInteger()),
        sa.Column("resident_bytes", sa.BigInteger()),
        sa.Column("fragmentation_at_peak_bytes", sa.BigInteger()),
        sa.Column("device_total_bytes", sa.BigInteger()),
        sa.Column("alloc_retries", sa.BigInteger()),
        sa.Column("ooms", sa.BigInteger()),
        sa.Column("detail_json", sa.Text(), nullable=False),
        sa.Column("warnings_json", sa.Text(), nullable=False),
    )
    op.create_table(
        "memory_categories",
        sa.Column("receipt_id", sa.Text(), nullable=False),
        sa.Column("source_sha256", sa.Text(), nullable=False),
        sa.Column("rank", sa.Integer()),
        sa.Column("device", sa.Integer()),
        sa.Column("category", sa.Text(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_memory_ranks_receipt", "memory_ranks", ["receipt_id"])
    op.create_index("ix_memory_categories_receipt", "memory_categories", ["receipt_id"])
