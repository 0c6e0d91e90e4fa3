-- Each steady step's value of the category and rank components of several receipts (their newest attached
-- export's): the series whose step-to-step spread is a component's within-run noise (analysis/explain_inputs.py),
-- as analysis/components.py category_steps and rank_steps make it from the same rows.
-- Reads: anatomy_rows, anatomy_steps, anatomy_sources, receipt_sources (newest_exports, sql/_macros.sql).
-- Params: $ids (VARCHAR[]: receipt ids), $decomposition (VARCHAR[]: the GPU span's parts, schema/categories.py
--         DECOMPOSITION), $host_gap, $between_steps, $exposed (text: those categories' names).
-- Columns: receipt_id, level ('category' | 'rank'), name (a category, $host_gap, $between_steps; 'rank N'),
--          step, ms (ms in that steady step: a category's time summed over the ranks that ran the step and divided
--          by them, a rank without it counting 0; the host gap a rank-step's marker range less its span's parts;
--          the time between steps from a range's end to its rank's next range's start, the mean over the ranks
--          that have one; a rank's exposed communication, 0 where it has none).
WITH newest AS (  -- sql/_macros.sql
    SELECT receipt_id, source_sha256 FROM newest_exports(CAST($ids AS VARCHAR[]))
), _steps AS (
    SELECT t.receipt_id, t.rank, t.step, t.wall_ms, t.start_ns, t.warmup
    FROM anatomy_steps t JOIN newest n ON n.receipt_id = t.receipt_id AND n.source_sha256 = t.source_sha256
    WHERE t.receipt_id BETWEEN list_min($ids) AND list_max($ids)
), _steady AS (
    SELECT DISTINCT receipt_id, rank, step FROM _steps WHERE step IS NOT NULL AND NOT coalesce(warmup, false)
), _rows AS (
    SELECT r.receipt_id, r.rank, r.step, r.category, r.time_ms
    FROM anatomy_rows r JOIN newest n ON n.receipt_id = r.receipt_id AND n.source_sha256 = r.source_sha256
    SEMI JOIN _steady s ON s.receipt_id = r.receipt_id AND s.rank = r.rank AND s.step = r.step
    WHERE r.receipt_id BETWEEN list_min($ids) AND list_max($ids)
), _with_gap AS (
    SELECT receipt_id, rank, step, category, time_ms FROM _rows
    UNION ALL
    SELECT t.receipt_id, t.rank, t.step, $host_gap, t.wall_ms - coalesce(p.span_ms, 0.0)
    FROM _steps t
    SEMI JOIN _steady s ON s.receipt_id = t.receipt_id AND s.rank = t.rank AND s.step = t.step
    LEFT JOIN (SELECT receipt_id, rank, step, sum(time_ms) AS span_ms FROM _rows
               WHERE list_contains(CAST($decomposition AS VARCHAR[]), category)
               GROUP BY receipt_id, rank, step) p
           ON p.receipt_id = t.receipt_id AND p.rank = t.rank AND p.step = t.step
    WHERE t.wall_ms IS NOT NULL
), _ranks_in_step AS (
    SELECT receipt_id, step, count(*) AS n_ranks FROM _steady GROUP BY receipt_id, step
), _grid AS (  -- every steady step x every category the receipt has: a step without one counts 0
    SELECT k.receipt_id, k.step, k.n_ranks, c.category
    FROM _ranks_in_step k JOIN (SELECT DISTINCT receipt_id, category FROM _with_gap) c ON c.receipt_id = k.receipt_id
), _parts AS (
    SELECT g.receipt_id, g.category AS name, g.step, coalesce(v.time_ms, 0.0) / g.n_ranks AS ms
    FROM _grid g
    LEFT JOIN (SELECT receipt_id, step, category, sum(time_ms) AS time_ms FROM _with_gap
               GROUP BY receipt_id, step, category) v
           ON v.receipt_id = g.receipt_id AND v.step = g.step AND v.category = g.category
), _between AS (  -- the next marker on the rank, over every marked step (warm-up too), kept for the steady ones
    SELECT m.receipt_id, $between_steps AS name, m.step, avg(m.ms) AS ms
    FROM (SELECT receipt_id, rank, step,
                 CAST(lead(start_ns) OVER (PARTITION BY receipt_id, rank ORDER BY start_ns) - start_ns AS DOUBLE) / 1e6
                     - wall_ms AS ms
          FROM _steps WHERE step IS NOT NULL AND start_ns IS NOT NULL AND wall_ms IS NOT NULL) m
    SEMI JOIN _steady s ON s.receipt_id = m.receipt_id AND s.rank = m.rank AND s.step = m.step
    WHERE m.ms IS NOT NULL
    GROUP BY m.receipt_id, m.step
), _exposed AS (
    SELECT s.receipt_id, 'rank ' || s.rank AS name, s.step, coalesce(r.time_ms, 0.0) AS ms
    FROM _steady s
    LEFT JOIN _rows r ON r.receipt_id = s.receipt_id AND r.rank = s.rank AND r.step = s.step AND r.category = $exposed
)
SELECT receipt_id, 'category' AS level, name, step, ms FROM _parts
UNION ALL SELECT receipt_id, 'category', name, step, ms FROM _between
UNION ALL SELECT receipt_id, 'rank', name, step, ms FROM _exposed
ORDER BY receipt_id, level, name, step
