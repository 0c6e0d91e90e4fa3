-- Stored rows of several receipts at once (the gate and lane history load hundreds).
-- Reads: receipts.  Params: $ids (list of receipt ids).
-- Columns: every column of receipts (schema/tables.py), one row per receipt found.
-- The BETWEEN is redundant in DuckDB but lets the postgres scanner push a filter down.
SELECT * FROM receipts WHERE list_contains($ids, id) AND id BETWEEN list_min($ids) AND list_max($ids)
