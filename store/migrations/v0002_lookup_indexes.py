"""0002: indexes for the two lookups every command and the dashboard make.

- receipts(run_name): `receipts show run_b` resolves a run name (sql/resolve_ref.sql); DuckDB's
  postgres scanner pushes `run_name = $ref` down to PostgreSQL, where a team store with thousands of
  receipts would otherwise scan the whole table for every CLI call.
- receipts(ingested_at): list_receipts orders newest first and "what arrived since" filters on it.
"""

from __future__ import annotations

VERSION = 2
DESCRIPTION = "indexes on receipts(run_name) and receipts(ingested_at)"


def upgrade(op) -> None:
    op.create_index("ix_receipts_run_name", "receipts", ["run_name"], if_not_exists=True)
    op.create_index("ix_receipts_ingested_at", "receipts", ["ingested_at"], if_not_exists=True)
