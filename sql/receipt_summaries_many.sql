-- Stored steady-state summaries of several receipts (analysis/summary.py), one row per receipt that has one.
-- Reads: receipt_summaries.  Params: $ids (list of receipt ids).
-- Columns: receipt_id, rule (the rule that made it), n_steady_steps (count), median_step_ms (ms),
--          summary_json (text: Summary and moving-block interval of step_ms and tokens_per_s).
SELECT receipt_id, rule, n_steady_steps, median_step_ms, summary_json
FROM receipt_summaries
WHERE list_contains($ids, receipt_id) AND receipt_id BETWEEN list_min($ids) AND list_max($ids)
