-- The steady-state step series of one receipt, for confidence intervals.
-- Reads: receipt_steps.
-- Params: $receipt_id.
-- Columns: step, step_ms (ms, slowest rank), tokens_per_s (tokens/s).
SELECT step, max(step_ms) AS step_ms,
       CASE WHEN count(DISTINCT rank) > 1 THEN sum(tokens_per_s) ELSE max(tokens_per_s) END AS tokens_per_s
FROM receipt_steps
WHERE receipt_id = $receipt_id AND NOT warmup AND step_ms IS NOT NULL
GROUP BY step
ORDER BY step
