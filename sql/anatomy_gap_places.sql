-- The long GPU gaps of one attached export by place, over the receipt's steady steps, all ranks together: where
-- the GPU sat idle for 0.5 ms or more, after which call of which kernel or copy (ingest/gap_places.py).
-- Reads: anatomy_gaps, anatomy_steps.  Params: $receipt_id, $source_sha256.
-- Columns: place ('AFTER #CALL', explain's gap level's name; null: from the span's start), after (the kernel name
--          or copy category the gap follows), call (which call of it in the step, from 1), steps (steady rank-steps with a gap there), steady_steps (steady rank-steps
--          in all), share_pct (% of them), ms_per_step (the gap time over every steady rank-step, as explain's gap
--          level), mean_ms and max_ms (of the gaps themselves).
WITH steady AS (
    SELECT rank, step FROM anatomy_steps
    WHERE receipt_id = $receipt_id AND source_sha256 = $source_sha256 AND NOT warmup AND step IS NOT NULL
), n AS (
    SELECT count(*) AS rank_steps FROM steady
)
SELECT g.after || ' #' || g.call AS place, g.after, g.call, count(*)::BIGINT AS steps, max(n.rank_steps)::BIGINT AS steady_steps,
       100.0 * count(*) / max(n.rank_steps) AS share_pct, sum(g.gap_ms) / max(n.rank_steps) AS ms_per_step,
       avg(g.gap_ms) AS mean_ms, max(g.gap_ms) AS max_ms
FROM anatomy_gaps g
JOIN steady s ON s.step = g.step AND s.rank IS NOT DISTINCT FROM g.rank
CROSS JOIN n
WHERE g.receipt_id = $receipt_id AND g.source_sha256 = $source_sha256
GROUP BY g.after, g.call
ORDER BY ms_per_step DESC, g.call, g.after
