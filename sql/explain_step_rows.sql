-- The per-step anatomy rows of several receipts' newest attached exports (the one explain reads components
-- from): what a component's within-run spread is measured from (analysis/explain_inputs.py spread_many).
-- Reads: anatomy_rows, anatomy_sources, receipt_sources (newest_exports, sql/_macros.sql).
-- Params: $ids (VARCHAR[]: receipt ids).
-- Columns: receipt_id, rank, step, category, time_ms (ms of busy time, union per category; idle and exposed_comm
--          derived). Rows without a step (an export without step markers) are left out.
WITH newest AS (  -- sql/_macros.sql
    SELECT receipt_id, source_sha256 FROM newest_exports(CAST($ids AS VARCHAR[]))
)
SELECT r.receipt_id, r.rank, r.step, r.category, r.time_ms
FROM anatomy_rows r JOIN newest n ON n.receipt_id = r.receipt_id AND n.source_sha256 = r.source_sha256
WHERE r.receipt_id BETWEEN list_min($ids) AND list_max($ids) AND r.step IS NOT NULL
ORDER BY r.receipt_id, r.rank, r.step, r.category
