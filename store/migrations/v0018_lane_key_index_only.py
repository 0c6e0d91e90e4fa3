"""0018: the lane is found by its stored key alone: receipts loses the index over the lane's three canonical
columns.

Every lane query (sql/lane_runs.sql, sql/lane_history.sql, the dashboard's lanes) matches receipts.lane_key,
which ix_receipts_lane_key indexes since revision 14; no query filters on the three columns, so their index
(revision 1) only cost every ingest and retag a second index write. A field added to the lane changes the key,
never an index.
"""

from __future__ import annotations

VERSION = 18
DESCRIPTION = "receipts: the lane's index is ix_receipts_lane_key alone (the three-column lane index dropped)"


def upgrade(op) -> None:
    op.drop_index("ix_receipts_lane", table_name="receipts", if_exists=True)
