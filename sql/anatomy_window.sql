-- Anatomy summed over a window, per rank and category, steady state and warm-up (badput) kept apart.
-- Reads: anatomy_rows.  Params: $receipt_id, $source_sha256.
-- Columns: rank, phase ('steady' | 'warmup' | 'window' for exports without step markers), category,
--          time_ms (ms, summed over the phase's steps), n_steps, per_step_ms (ms per step, mean).
SELECT rank,
       CASE WHEN step IS NULL THEN 'window' WHEN warmup THEN 'warmup' ELSE 'steady' END AS phase,
       category,
       sum(time_ms) AS time_ms,
       count(DISTINCT step) AS n_steps,
       sum(time_ms) / greatest(count(DISTINCT step), 1) AS per_step_ms
FROM anatomy_rows
WHERE receipt_id = $receipt_id AND source_sha256 = $source_sha256
GROUP BY ALL
ORDER BY rank NULLS FIRST, phase, category
