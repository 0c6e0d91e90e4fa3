-- Which receipts a user's reference points at: an exact id, a run name, or an id prefix.
-- Reads: receipts.
-- Params: $ref (as typed), $prefix (lower-cased ref followed by '%').
-- Columns: id (text), run_name (text), match ('id' | 'run_name' | 'prefix'), ingested_at (ISO-8601 text),
--          superseded_by (text; null = current: a run name resolves to its current receipt).
SELECT id, run_name, 'id' AS match, ingested_at, superseded_by FROM receipts WHERE id = $ref
UNION ALL
SELECT id, run_name, 'run_name' AS match, ingested_at, superseded_by FROM receipts WHERE run_name = $ref
UNION ALL
SELECT id, run_name, 'prefix' AS match, ingested_at, superseded_by FROM receipts WHERE id LIKE $prefix
ORDER BY ingested_at DESC
