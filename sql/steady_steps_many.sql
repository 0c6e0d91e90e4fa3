-- Steady-state step series of several receipts, for confidence intervals.
-- Reads: receipt_steps.  Params: $ids (list of receipt ids).
-- Columns: receipt_id, step, step_ms (ms, slowest rank), tokens_per_s (tokens/s, summed over ranks when per-rank).
SELECT receipt_id, step, max(step_ms) AS step_ms,
       CASE WHEN count(DISTINCT rank) > 1 THEN sum(tokens_per_s) ELSE max(tokens_per_s) END AS tokens_per_s
FROM receipt_steps
-- The BETWEEN is redundant in DuckDB but lets the postgres scanner push a filter down.
WHERE list_contains($ids, receipt_id) AND receipt_id BETWEEN list_min($ids) AND list_max($ids) AND NOT warmup AND step_ms IS NOT NULL
GROUP BY receipt_id, step
ORDER BY receipt_id, step
