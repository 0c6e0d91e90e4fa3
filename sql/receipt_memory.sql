-- Per-rank memory peaks of one receipt.
-- Reads: receipt_memory.  Params: $receipt_id.
-- Columns: rank (null = as printed by the logging rank), peak_allocated_bytes, peak_reserved_bytes (bytes).
SELECT rank, max(peak_allocated_bytes) AS peak_allocated_bytes, max(peak_reserved_bytes) AS peak_reserved_bytes
FROM receipt_memory WHERE receipt_id = $receipt_id GROUP BY rank ORDER BY rank NULLS FIRST
