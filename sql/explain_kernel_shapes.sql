-- Each kernel's calls and time per launch shape of several receipts (anatomy_kernel_shapes): for each receipt, its
-- newest attached export's (the one its components come from), per rank-step as analysis/components.py's kernel
-- level (the totals over the ranks' steady steps, divided by the sum of those steps).
-- Reads: anatomy_kernel_shapes, anatomy_kernels.
-- Params: $ids (VARCHAR[]: receipt ids), $exports (VARCHAR[]: the source_sha256 of each one's
--         newest attached export, as sql/explain_profiled.sql gives it: the export explain reads).
-- Columns: receipt_id, name (kernel name as the export states it), shape ('grid (x,y,z) block (x,y,z)'),
--          calls_per_step (calls per rank-step), ms_per_step (ms per rank-step, sum of the calls' durations).
WITH newest AS (  -- the pairs ($ids[i], $exports[i])
    SELECT unnest(CAST($ids AS VARCHAR[])) AS receipt_id, unnest(CAST($exports AS VARCHAR[])) AS source_sha256
), _rank_steps AS (
    SELECT r.receipt_id, r.source_sha256, sum(r.steps) AS rank_steps
    FROM (SELECT DISTINCT k.receipt_id, k.source_sha256, k.rank, k.steps
          FROM anatomy_kernels k JOIN newest n ON n.receipt_id = k.receipt_id AND n.source_sha256 = k.source_sha256
          WHERE k.receipt_id BETWEEN list_min($ids) AND list_max($ids)) r
    GROUP BY r.receipt_id, r.source_sha256
)
SELECT s.receipt_id, s.name, s.shape, sum(s.calls) / r.rank_steps AS calls_per_step,
       sum(s.total_ms) / r.rank_steps AS ms_per_step
FROM anatomy_kernel_shapes s
JOIN _rank_steps r ON r.receipt_id = s.receipt_id AND r.source_sha256 = s.source_sha256
WHERE s.receipt_id BETWEEN list_min($ids) AND list_max($ids) AND r.rank_steps > 0
GROUP BY s.receipt_id, s.name, s.shape, r.rank_steps
ORDER BY s.receipt_id, s.name, s.shape
