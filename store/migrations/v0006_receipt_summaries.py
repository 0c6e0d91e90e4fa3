"""0006: per-receipt steady-state summaries computed once at ingest.

receipt_summaries: one row per receipt with analysis/summary.py's Summary and moving-block interval of the
steady series (step time and tokens/s), the rule that made it, and the median and step count for SQL. `show`,
`list` and `compare` read it instead of every step row. Receipts stored before this revision have no row:
readers summarise their stored series on the fly, with the same numbers (tests/test_summaries.py).
"""

from __future__ import annotations

import sqlalchemy as sa

VERSION = 6
DESCRIPTION = "receipt_summaries: steady-state statistics per receipt, computed at ingest"


def upgrade(op) -> None:
    op.create_table(
        "receipt_summaries",
        sa.Column("receipt_id", sa.Text(), nullable=False),
        sa.Column("rule", sa.Text(), nullable=False),
        sa.Column("n_steady_steps", sa.Integer(), nullable=False),
        sa.Column("median_step_ms", sa.Double()),
        sa.Column("summary_json", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("receipt_id"),
    )
