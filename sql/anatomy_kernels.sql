-- The top kernels of each category in one attached export, over the receipt's steady steps, all ranks together.
-- Reads: anatomy_kernels.  Params: $receipt_id, $source_sha256, $top (kernels kept per category).
-- Columns: category, name (kernel), calls (count), total_ms (ms, sum of durations over ranks and steady steps),
--          ms_per_step (ms: total_ms over rank-steps, the time one rank spends in it per step),
--          share_pct (% of the category's kernel time), rank_in_category (1 = the longest).
WITH k AS (
    SELECT category, name, sum(calls)::BIGINT AS calls, sum(total_ms) AS total_ms
    FROM anatomy_kernels
    WHERE receipt_id = $receipt_id AND source_sha256 = $source_sha256
    GROUP BY category, name
), rank_steps AS (
    SELECT sum(steps)::BIGINT AS n FROM (SELECT DISTINCT rank, steps FROM anatomy_kernels
                                 WHERE receipt_id = $receipt_id AND source_sha256 = $source_sha256)
), ranked AS (
    SELECT k.*, k.total_ms / nullif((SELECT n FROM rank_steps), 0) AS ms_per_step,
           100 * k.total_ms / nullif(sum(k.total_ms) OVER (PARTITION BY k.category), 0) AS share_pct,
           row_number() OVER (PARTITION BY k.category ORDER BY k.total_ms DESC, k.name) AS rank_in_category
    FROM k
)
SELECT category, name, calls, total_ms, ms_per_step, share_pct, rank_in_category
FROM ranked
WHERE rank_in_category <= $top
ORDER BY sum(total_ms) OVER (PARTITION BY category) DESC, category, rank_in_category
