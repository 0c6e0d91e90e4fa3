"""0014: one stored lane key.

receipts.lane_key: the canonical identity of the receipt's lane as one value (schema/lane.py Lane.key: compact
JSON of host lineage, preset family and launch regime, null for a missing one), which the lane queries match
instead of three columns side by side. Filled here for the receipts already stored, by the same text Lane.key
writes (DuckDB's and PostgreSQL's to_json of a string write it as Python's json module does).
"""

from __future__ import annotations

import sqlalchemy as sa

VERSION = 14
DESCRIPTION = "one stored lane key: receipts.lane_key"


# Also what a benchmark that writes receipts with SQL runs after them (benchmarks/bench_dashboard.py).
BACKFILL = ("UPDATE receipts SET lane_key = '[' || coalesce(to_json(host_lineage)::text, 'null') || ',' "
            "|| coalesce(to_json(preset_family)::text, 'null') || ',' "
            "|| coalesce(to_json(launch_regime)::text, 'null') || ']'")


def upgrade(op) -> None:
    op.add_column("receipts", sa.Column("lane_key", sa.Text()))
    # the index first: DuckDB creates none over a table with updates outstanding in the transaction
    op.create_index("ix_receipts_lane_key", "receipts", ["lane_key"], if_not_exists=True)
    op.execute(BACKFILL)
