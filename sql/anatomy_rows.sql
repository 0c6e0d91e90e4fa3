-- Step-time anatomy of one receipt per (rank, step, category).
-- Reads: anatomy_rows.  Params: $receipt_id, $source_sha256.
-- Columns: rank, step (null = whole profiled window when the export had no step markers), category,
--          time_ms (ms of busy time, union per category; idle and exposed_comm derived), warmup (bool).
SELECT rank, step, category, time_ms, warmup
FROM anatomy_rows
WHERE receipt_id = $receipt_id AND source_sha256 = $source_sha256
ORDER BY rank NULLS FIRST, step NULLS FIRST, category
