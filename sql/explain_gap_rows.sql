-- The long GPU gaps of several receipts' newest attached exports (the one explain reads components from), where
-- each lies: what a gap place's within-run spread is measured from (analysis/explain_inputs.py spread_many).
-- Reads: anatomy_gaps.
-- Params: $ids (VARCHAR[]: receipt ids), $exports (VARCHAR[]: the source_sha256 of each one's
--         newest attached export, as sql/explain_profiled.sql gives it: the export explain reads).
-- Columns: receipt_id, rank, step, after (the kernel or copy the gap follows; null: none), call, gap_ms.
WITH newest AS (  -- the pairs ($ids[i], $exports[i])
    SELECT unnest(CAST($ids AS VARCHAR[])) AS receipt_id, unnest(CAST($exports AS VARCHAR[])) AS source_sha256
)
SELECT g.receipt_id, g.rank, g.step, g.after, g.call, g.gap_ms
FROM anatomy_gaps g JOIN newest n ON n.receipt_id = g.receipt_id AND n.source_sha256 = g.source_sha256
WHERE g.receipt_id BETWEEN list_min($ids) AND list_max($ids) AND g.step IS NOT NULL
ORDER BY g.receipt_id, g.rank, g.step, g.call, g.after
