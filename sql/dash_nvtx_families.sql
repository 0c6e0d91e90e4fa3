-- NVTX ranges of one export grouped into families: the range name without per-call suffixes
-- (PyTorch's emit_nvtx appends ', op_id = N' / ', seq = N' to every op, which would make each call its own
-- range), so block families (ablock / eblock / mblock / rblock) and ops add up across calls.
-- Reads: anatomy_nvtx.  Params: $receipt_id, $source_sha256.
-- Columns: family (text), block_family (bool: one of the model's A/E/M/R block ranges), rank,
--          count (ranges), total_ms (ms, summed CPU-side range durations, as nsys nvtx_sum reports).
SELECT regexp_replace(range_name, '(,\s*(op_id|seq|sizes)\s*=.*)$', '') AS family,
       regexp_matches(lower(range_name), '^[aemr]block') AS block_family,
       rank, CAST(sum(count) AS BIGINT) AS count, sum(total_ms) AS total_ms
FROM anatomy_nvtx
WHERE receipt_id = $receipt_id AND source_sha256 = $source_sha256
GROUP BY ALL
ORDER BY total_ms DESC
