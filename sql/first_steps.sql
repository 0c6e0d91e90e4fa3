-- The first step rows of one receipt, in step and rank order: what a shorter log of the same run must begin with.
-- Reads: receipt_steps.  Params: $receipt_id, $n (rows).
-- Columns: step, rank, step_ms (ms), line (source line).
SELECT step, rank, step_ms, line
FROM receipt_steps WHERE receipt_id = $receipt_id
ORDER BY step, rank NULLS FIRST
LIMIT $n
