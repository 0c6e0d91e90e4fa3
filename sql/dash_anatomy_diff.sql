-- Steady-state anatomy of two receipts side by side, per category: ms per step, mean over ranks.
-- Uses each receipt's newest attached export; warm-up steps are excluded (exports without step markers
-- contribute their whole window).
-- Reads: anatomy_rows, anatomy_sources, receipt_sources.  Params: $a_id, $b_id.
-- Columns: category, a_ms_per_step, b_ms_per_step (ms per step; null when the receipt lacks that category
--          or any export), diff_ms_per_step (ms, B minus A; positive = B spends more time there).
WITH src AS (
    SELECT a.receipt_id, arg_max(a.source_sha256, coalesce(s.ingested_at, '')) AS sha
    FROM anatomy_sources a
    LEFT JOIN receipt_sources s ON s.receipt_id = a.receipt_id AND s.sha256 = a.source_sha256
    WHERE a.receipt_id IN ($a_id, $b_id)
    GROUP BY a.receipt_id
), per_rank AS (
    SELECT r.receipt_id, r.rank, r.category, sum(r.time_ms) / greatest(count(DISTINCT r.step), 1) AS ms
    FROM anatomy_rows r JOIN src ON src.receipt_id = r.receipt_id AND src.sha = r.source_sha256
    WHERE NOT r.warmup
    GROUP BY ALL
), per_cat AS (
    SELECT receipt_id, category, avg(ms) AS ms FROM per_rank GROUP BY ALL
)
SELECT category,
       max(ms) FILTER (WHERE receipt_id = $a_id) AS a_ms_per_step,
       max(ms) FILTER (WHERE receipt_id = $b_id) AS b_ms_per_step,
       max(ms) FILTER (WHERE receipt_id = $b_id) - max(ms) FILTER (WHERE receipt_id = $a_id) AS diff_ms_per_step
FROM per_cat
GROUP BY category
ORDER BY category
