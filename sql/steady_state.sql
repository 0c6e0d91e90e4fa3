-- Steady-state step time per receipt: the warm-up / compile window is excluded, always.
-- Reads: receipt_steps (via the _step_times shape), receipts.
-- Params: $receipt_id (text, or NULL for every receipt).
-- Columns: receipt_id, n_steps (count of steady steps with a time), median_step_ms, p10_step_ms,
--          p90_step_ms, mean_step_ms (ms), cv (std/mean, fraction), median_tokens_per_s (tokens/s),
--          first_step, last_step, warmup_steps (rows excluded), window_rule.
WITH t AS (
    SELECT receipt_id, step, max(step_ms) AS step_ms,
           CASE WHEN count(DISTINCT rank) > 1 THEN sum(tokens_per_s) ELSE max(tokens_per_s) END AS tokens_per_s
    FROM receipt_steps
    WHERE NOT warmup AND ($receipt_id IS NULL OR receipt_id = $receipt_id)
    GROUP BY receipt_id, step
)
SELECT r.id AS receipt_id,
       count(t.step_ms) AS n_steps,
       median(t.step_ms) AS median_step_ms,
       quantile_cont(t.step_ms, 0.10) AS p10_step_ms,
       quantile_cont(t.step_ms, 0.90) AS p90_step_ms,
       avg(t.step_ms) AS mean_step_ms,
       CASE WHEN avg(t.step_ms) > 0 THEN stddev_samp(t.step_ms) / avg(t.step_ms) END AS cv,
       median(t.tokens_per_s) AS median_tokens_per_s,
       r.window_first_step AS first_step,
       r.window_last_step AS last_step,
       r.warmup_steps,
       r.window_rule
FROM receipts r LEFT JOIN t ON t.receipt_id = r.id
WHERE $receipt_id IS NULL OR r.id = $receipt_id
GROUP BY r.id, r.window_first_step, r.window_last_step, r.warmup_steps, r.window_rule
