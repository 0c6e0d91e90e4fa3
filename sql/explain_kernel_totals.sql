-- The stored kernel totals of one attached export, as the ingest computed them (per rank, category and name,
-- over the receipt's steady steps): the input of analysis/components.py's kernel level when `db upgrade`
-- recomputes it.
-- Reads: anatomy_kernels.  Params: $receipt_id, $source_sha256.
-- Columns: rank, category, name (kernel name as the export states it), calls (count), total_ms (ms, sum of
--          durations), steps (the rank's steady steps).
SELECT rank, category, name, calls, total_ms, steps
FROM anatomy_kernels
WHERE receipt_id = $receipt_id AND source_sha256 = $source_sha256
ORDER BY rank NULLS FIRST, category, name
