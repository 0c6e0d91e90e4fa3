-- The per-step anatomy rows of several receipts' newest attached exports (the one explain reads components
-- from): what a component's within-run spread is measured from (analysis/explain_inputs.py spread_many).
-- Reads: anatomy_rows.
-- Params: $ids (VARCHAR[]: receipt ids), $exports (VARCHAR[]: the source_sha256 of each one's
--         newest attached export, as sql/explain_profiled.sql gives it: the export explain reads).
-- Columns: receipt_id, rank, step, category, time_ms (ms of busy time, union per category; idle and exposed_comm
--          derived). Rows without a step (an export without step markers) are left out.
WITH newest AS (  -- the pairs ($ids[i], $exports[i])
    SELECT unnest(CAST($ids AS VARCHAR[])) AS receipt_id, unnest(CAST($exports AS VARCHAR[])) AS source_sha256
)
SELECT r.receipt_id, r.rank, r.step, r.category, r.time_ms
FROM anatomy_rows r JOIN newest n ON n.receipt_id = r.receipt_id AND n.source_sha256 = r.source_sha256
WHERE r.receipt_id BETWEEN list_min($ids) AND list_max($ids) AND r.step IS NOT NULL
ORDER BY r.receipt_id, r.rank, r.step, r.category
