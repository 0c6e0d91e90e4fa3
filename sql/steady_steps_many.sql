-- Steady-state step series of several receipts, for confidence intervals.
-- Reads: receipt_steps (through steady_step_times).  Params: $ids (list of receipt ids).
-- Columns: receipt_id, step, step_ms (ms, slowest rank), tokens_per_s (tokens/s, summed over ranks when per-rank).
SELECT receipt_id, step, step_ms, tokens_per_s
FROM steady_step_times($ids)
ORDER BY receipt_id, step
