-- The steady-state time of each step of the given receipts: the one definition of "a step's time is its
-- slowest rank's" (a step ends when its last rank does). Every query that needs per-step times calls it;
-- store connections create it on open (store/base.py STEP_TIMES_MACRO), DuckDB and the PostgreSQL reader alike.
-- Reads: receipt_steps.  Params: ids (VARCHAR[]: receipt ids, e.g. (SELECT list(id) FROM picked)).
-- Columns: receipt_id, step, step_ms (ms, slowest rank), tokens_per_s (tokens/s, summed over ranks when the
--          log reports per rank, else as reported), n_ranks (ranks with a time at that step).
-- Warm-up steps and steps without a time are left out. The SEMI JOIN over unnest(ids) keeps it a hash join
-- (list_contains(ids, receipt_id) scans the list per row: seconds at 10,000 receipts); the BETWEEN is
-- redundant for DuckDB but lets the postgres scanner push a range filter down for a few ids.
CREATE OR REPLACE TEMP MACRO steady_step_times(ids) AS TABLE
SELECT s.receipt_id, s.step, max(s.step_ms) AS step_ms,
       CASE WHEN count(DISTINCT s.rank) > 1 THEN sum(s.tokens_per_s) ELSE max(s.tokens_per_s) END AS tokens_per_s,
       count(*) AS n_ranks
FROM receipt_steps s SEMI JOIN (SELECT unnest(ids) AS id) wanted ON wanted.id = s.receipt_id
WHERE NOT s.warmup AND s.step_ms IS NOT NULL AND s.receipt_id BETWEEN list_min(ids) AND list_max(ids)
GROUP BY s.receipt_id, s.step
