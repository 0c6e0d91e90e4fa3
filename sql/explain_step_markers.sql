-- The step markers of several receipts' newest attached exports (the one explain reads components from): which
-- steps are steady, each rank-step's range, and when the next one starts (analysis/explain_inputs.py spread_many).
-- Reads: anatomy_steps.
-- Params: $ids (VARCHAR[]: receipt ids), $exports (VARCHAR[]: the source_sha256 of each one's
--         newest attached export, as sql/explain_profiled.sql gives it: the export explain reads).
-- Columns: receipt_id, rank, step (null: the whole profiled window of an export without step markers),
--          wall_ms (ms, the marker's range), start_ns (the marker's start on the trace's clock), warmup (bool).
WITH newest AS (  -- the pairs ($ids[i], $exports[i])
    SELECT unnest(CAST($ids AS VARCHAR[])) AS receipt_id, unnest(CAST($exports AS VARCHAR[])) AS source_sha256
)
SELECT t.receipt_id, t.rank, t.step, t.wall_ms, t.start_ns, t.warmup
FROM anatomy_steps t JOIN newest n ON n.receipt_id = t.receipt_id AND n.source_sha256 = t.source_sha256
WHERE t.receipt_id BETWEEN list_min($ids) AND list_max($ids)
ORDER BY t.receipt_id, t.rank, t.step
