-- Every step row of one receipt (all ranks), for charts: step time, memory, throughput.
-- Reads: receipt_steps.  Params: $receipt_id.
-- Columns: step, rank, step_ms (ms), tokens_per_s, loss, mfu_pct (%), allocated_bytes, reserved_bytes (bytes),
--          warmup (bool), line (source line).
SELECT step, rank, step_ms, tokens_per_s, loss, mfu_pct, allocated_bytes, reserved_bytes, warmup, line
FROM receipt_steps WHERE receipt_id = $receipt_id ORDER BY step, rank NULLS FIRST
