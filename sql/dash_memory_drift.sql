-- Does the fragmentation gap grow while allocated memory stays flat? (the allocator drifts, not the model)
-- Compares the first and last quarter of the steady-state steps (warm-up excluded, rule 3).
-- Documented thresholds: drift when the gap grows by more than 5% of allocated memory
-- AND allocated memory moves by less than 2% between the two quarters.
-- Reads: receipt_steps (through dash_memory_steps' shape).  Params: $receipt_id.
-- Columns: n_steps (count of steady steps with memory), allocated_first_bytes, allocated_last_bytes,
--          gap_first_bytes, gap_last_bytes (bytes, means over each quarter), gap_growth_bytes (bytes),
--          drift (bool; null when fewer than 8 steady steps carry memory).
WITH m AS (
    SELECT step, arg_max(allocated_bytes, reserved_bytes) AS alloc,
           max(reserved_bytes) - arg_max(allocated_bytes, reserved_bytes) AS gap
    FROM receipt_steps
    WHERE receipt_id = $receipt_id AND NOT warmup AND allocated_bytes IS NOT NULL AND reserved_bytes IS NOT NULL
    GROUP BY step
), q AS (SELECT *, ntile(4) OVER (ORDER BY step) AS quarter FROM m),
agg AS (
    SELECT count(*) AS n_steps,
           avg(alloc) FILTER (WHERE quarter = 1) AS a1, avg(alloc) FILTER (WHERE quarter = 4) AS a4,
           avg(gap) FILTER (WHERE quarter = 1) AS g1, avg(gap) FILTER (WHERE quarter = 4) AS g4
    FROM q
)
SELECT n_steps,
       CAST(a1 AS BIGINT) AS allocated_first_bytes, CAST(a4 AS BIGINT) AS allocated_last_bytes,
       CAST(g1 AS BIGINT) AS gap_first_bytes, CAST(g4 AS BIGINT) AS gap_last_bytes,
       CAST(g4 - g1 AS BIGINT) AS gap_growth_bytes,
       CASE WHEN n_steps < 8 OR a1 IS NULL OR a1 = 0 THEN NULL
            ELSE (g4 - g1) > 0.05 * a1 AND abs(a4 - a1) < 0.02 * a1 END AS drift
FROM agg
