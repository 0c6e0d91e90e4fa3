-- The log steps an attached profile is checked against (pipeline/attach.py): the receipt's first and last
-- step, and the time of each of its steps in [$first, $last] (a step's time is its slowest rank's).
-- Reads: receipt_steps (through step_times).  Params: $receipt_id, $first, $last (the profile's first and last step).
-- Columns: step (null on the one row of a receipt with no step in the range), step_ms (ms),
--          first_step, last_step (the receipt's whole step range; null when it has no steps).
WITH bounds AS (
    SELECT min(step) AS first_step, max(step) AS last_step FROM receipt_steps WHERE receipt_id = $receipt_id
), timed AS (
    SELECT step, step_ms FROM step_times([$receipt_id], false) WHERE step BETWEEN $first AND $last
)
SELECT t.step, t.step_ms, b.first_step, b.last_step
FROM bounds b LEFT JOIN timed t ON true
ORDER BY t.step
