-- The steady-state step times of two receipts, and of any more runs of their lane overlaid with them, aligned
-- by their position in the steady window (runs whose warm-up ends at different steps still line up), for the
-- compare view's overlay and distributions.
-- Reads: receipt_steps (through steady_step_times).  Params: $a_id, $b_id, $more (VARCHAR[], more receipt ids;
--        empty for the pair alone).
-- Columns: side (text: 'A', 'B', or 'more' for an overlaid run), receipt_id, steady_index (0 = first steady
--          step), step, step_ms (ms, slowest rank).
SELECT CASE WHEN receipt_id = $a_id THEN 'A' WHEN receipt_id = $b_id THEN 'B' ELSE 'more' END AS side, receipt_id,
       row_number() OVER (PARTITION BY receipt_id ORDER BY step) - 1 AS steady_index, step, step_ms
FROM steady_step_times(list_concat([$a_id, $b_id], $more::VARCHAR[]))
ORDER BY side, receipt_id, step
