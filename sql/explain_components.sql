-- The stored component summaries of several receipts (analysis/components.py): for each receipt, the rows of
-- its newest attached export (the one `receipts anatomy` shows) made under the given rule.
-- Reads: receipt_components.
-- Params: $ids (VARCHAR[]: receipt ids), $exports (VARCHAR[]: the source_sha256 of each one's
--         newest attached export, as sql/explain_profiled.sql gives it: the export explain reads),
--         $rule (text: analysis/components.py RULE).
-- Columns: receipt_id, source_sha256, level ('category' | 'kernel' | 'nvtx' | 'rank'), name, category (a kernel's
--          category, 'exposed_comm' for a rank, else null), ms_per_step (ms per steady step), calls_per_step
--          (kernel calls or NVTX ranges per rank-step; null for the other levels), n_steps (steady steps).
WITH newest AS (  -- the pairs ($ids[i], $exports[i])
    SELECT unnest(CAST($ids AS VARCHAR[])) AS receipt_id, unnest(CAST($exports AS VARCHAR[])) AS source_sha256
)
SELECT c.receipt_id, c.source_sha256, c.level, c.name, c.category, c.ms_per_step, c.calls_per_step, c.n_steps
FROM receipt_components c
JOIN newest n ON n.receipt_id = c.receipt_id AND n.source_sha256 = c.source_sha256
WHERE c.rule = $rule AND c.receipt_id BETWEEN list_min($ids) AND list_max($ids)
ORDER BY c.receipt_id, c.level, c.name
