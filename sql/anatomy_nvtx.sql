-- NVTX ranges / user annotations of one receipt per rank (block families ablock/eblock/mblock/rblock among them).
-- Reads: anatomy_nvtx.  Params: $receipt_id, $source_sha256.
-- Columns: rank, range_name, count, total_ms (ms, summed range durations), gpu_ms (ms, null when not computed).
SELECT rank, range_name, count, total_ms, gpu_ms
FROM anatomy_nvtx
WHERE receipt_id = $receipt_id AND source_sha256 = $source_sha256
ORDER BY rank NULLS FIRST, total_ms DESC, range_name
