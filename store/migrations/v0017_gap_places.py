"""0017: where each long GPU gap of a step lies, for `receipts explain`'s gap level.

anatomy_gaps: per attached export, every gap of 0.5 ms or more inside a step's GPU span (the gaps idle_long sums),
with the kernel or copy it follows (`after`, as the export names it) and which call of it in the step (`call`).
Exports attached before this revision have none: the gaps' places are not in the store, so `receipts db upgrade`
cannot make them, and `explain` judges those runs' long gaps by idle_long alone; attach the export again
(`receipts ingest EXPORT --attach RUN`) to place them.
"""

from __future__ import annotations

import sqlalchemy as sa

VERSION = 17
DESCRIPTION = "anatomy_gaps: every long GPU gap of each step, after which call of which kernel or copy"


def upgrade(op) -> None:
    op.create_table(
        "anatomy_gaps",
        sa.Column("receipt_id", sa.Text(), nullable=False),
        sa.Column("source_sha256", sa.Text(), nullable=False),
        sa.Column("rank", sa.Integer()),
        sa.Column("step", sa.BigInteger()),
        sa.Column("after", sa.Text()),
        sa.Column("call", sa.BigInteger(), nullable=False),
        sa.Column("gap_ms", sa.Double(), nullable=False),
    )
    op.create_index("ix_anatomy_gaps_receipt", "anatomy_gaps", ["receipt_id"])
