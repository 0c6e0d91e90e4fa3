"""0008: DuckDB stores drop the ART index on receipt_steps(receipt_id) (bounded-memory ingest).

DuckDB keeps an ART index's inserted keys in memory until the transaction commits: ingesting a 10M-step log
held ~490 MiB more with it than without. Reads do not need it there: each receipt's step rows are written
together, so DuckDB's zone maps find them (measured on a 10,000-receipt, 6.9M-row store: one receipt's steps
1.0 ms with the index, 0.7 ms without; 200 receipts' steady steps 91 vs 93 ms). PostgreSQL keeps its B-tree,
which its per-receipt reads use (schema/tables.py marks the index PostgreSQL-only).
"""

from __future__ import annotations

VERSION = 8
DESCRIPTION = "DuckDB: receipt_steps without the ART index on receipt_id (zone maps serve per-receipt reads)"
BACKENDS = ("duckdb",)


def upgrade(op) -> None:
    op.drop_index("ix_receipt_steps_receipt", table_name="receipt_steps", if_exists=True)
