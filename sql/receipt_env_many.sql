-- Env overlays of several receipts: unset watched knobs included (is_set = false), secrets redacted.
-- Reads: receipt_env.  Params: $ids (list of receipt ids).
-- Columns: receipt_id, name, value (null when unset or redacted), is_set, redacted.
SELECT receipt_id, name, value, is_set, redacted FROM receipt_env -- The BETWEEN is redundant in DuckDB but lets the postgres scanner push a filter down.
WHERE list_contains($ids, receipt_id) AND receipt_id BETWEEN list_min($ids) AND list_max($ids)
ORDER BY receipt_id, name
