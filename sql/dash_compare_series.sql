-- The steady-state step times of two receipts, aligned by their position in the steady window (runs whose
-- warm-up ends at different steps still line up), for the compare view's overlay and distributions.
-- Reads: receipt_steps (through steady_step_times).  Params: $a_id, $b_id.
-- Columns: side (text: 'A' or 'B'), receipt_id, steady_index (0 = first steady step), step, step_ms (ms, slowest
--          rank).
SELECT CASE WHEN receipt_id = $a_id THEN 'A' ELSE 'B' END AS side, receipt_id,
       row_number() OVER (PARTITION BY receipt_id ORDER BY step) - 1 AS steady_index, step, step_ms
FROM steady_step_times([$a_id, $b_id])
ORDER BY side, step
