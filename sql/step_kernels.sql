-- One rank's kernels step by step, as stored (each step's longest kernels and an '(other kernels)' row): a
-- drill-down's input, one step against the rank's other steps.
-- Reads: anatomy_step_kernels.  Params: $receipt_id, $source_sha256, $rank.
-- Columns: step, category (null on the '(other kernels)' row), name, calls (count), time_ms (ms, sum of the
--          kernel's durations in the step).
SELECT step, category, name, calls, time_ms
FROM anatomy_step_kernels
WHERE receipt_id = $receipt_id AND source_sha256 = $source_sha256 AND rank IS NOT DISTINCT FROM $rank
ORDER BY step, time_ms DESC, name
