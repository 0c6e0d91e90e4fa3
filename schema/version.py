"""What opening a store needs to know of its tables, without SQLAlchemy: the schema version it must carry, and
the identity columns every retag records. The table definitions themselves (schema/tables.py, SQLAlchemy Core)
are imported only where a table is created, migrated or written: SQLAlchemy's import is 0.1 s and ~20 MiB of
every read command's start-up (`list`, `show`, `compare`, the gate)."""

from __future__ import annotations

from receipts.schema.lane import FIELDS, RAW

# Bump with a migration (store/migrations) whenever a table changes.
SCHEMA_VERSION = 18

# identity_history's columns, each recorded before and after a change of a receipt's claimed identity.
IDENTITY_FIELDS = ("run_name", "tags_json", *(c for f in FIELDS for c in (RAW[f], f)), "identity_complete")
