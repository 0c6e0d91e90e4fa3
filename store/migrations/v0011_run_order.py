"""0011: a total order for runs, and a log's byte-prefix family.

- receipts.ingest_seq: the store's count of receipts written, in write order (the newest is the largest). Runs
  without a date of their own are ordered by ingested_at (now to the microsecond), then by it: a batch keeps its
  command-line order. Receipts stored before this revision read null and keep their order.
- receipts.log_head_sha256: the sha256 of a log's first 256 bytes. Logs that are byte prefixes of one another
  (a log read while it grew) share it, so an earlier view ingested after the longer one is found and stored
  superseded by it; PostgreSQL writers of one family decide one at a time under an advisory lock on it. Null for
  receipts stored before this revision and for profiles.
"""

from __future__ import annotations

import sqlalchemy as sa

VERSION = 11
DESCRIPTION = "run order and log families: receipts.ingest_seq, receipts.log_head_sha256"


def upgrade(op) -> None:
    op.add_column("receipts", sa.Column("ingest_seq", sa.BigInteger()))
    op.add_column("receipts", sa.Column("log_head_sha256", sa.Text()))
    op.create_index("ix_receipts_ingest_seq", "receipts", ["ingest_seq"], if_not_exists=True)
    op.create_index("ix_receipts_log_head", "receipts", ["log_head_sha256"], if_not_exists=True)
