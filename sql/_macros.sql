-- The building blocks the other queries call, each defined once: a step's time, a run's date and order, a
-- run's steady-state median, a receipt's tags and source revision. Store connections create them on open
-- (store/base.py Store._create_macros), DuckDB and the PostgreSQL reader alike; a macro binds the tables it
-- reads when created, so it is created on a connection that already sees the store's tables.
-- Reads: receipt_steps (step_times), receipt_summaries (run_medians), anatomy_sources and receipt_sources
--        (newest_exports).
-- Params: the macros' own arguments, below.
-- Columns:
--   step_times(ids VARCHAR[], steady_only BOOLEAN), steady_step_times(ids VARCHAR[]) -> receipt_id, step,
--       step_ms (ms, slowest rank), tokens_per_s (tokens/s, summed over ranks when the log reports per rank, else
--       as reported), n_ranks (ranks with a time there).
--   run_medians(ids VARCHAR[], unsummarised VARCHAR[]) -> receipt_id, n_steps (steady steps with a time),
--       median_step_ms, p10_step_ms, p90_step_ms (ms, warm-up excluded, slowest rank per step).
--   every_run_median(unsummarised VARCHAR[]) -> receipt_id, n_steps, median_step_ms: run_medians' first three
--       columns for every receipt, to be joined to the few a query picked.
--   utc_time(iso text) -> TIMESTAMP (UTC); run_date(started_at, ingested_at) -> TIMESTAMP (UTC);
--   run_date_source(started_at) -> 'header' | 'ingest'; receipt_tags(tags_json) -> VARCHAR[];
--   git_rev(provenance_json) -> text (null when unrecorded);
--   lane_label(identity_complete, lane_key) -> text.
--   lane_values(lane_key) -> VARCHAR[] (the lane's values, in schema/lane.py FIELDS' order).
--   newest_exports(ids VARCHAR[]) -> the anatomy_sources row of each receipt's newest attached profiler export.

-- "A step's time is its slowest rank's" (a step ends when its last rank does), over the steps of the given
-- receipts (only the steady ones when steady_only); steps without a time are left out. The SEMI JOIN over
-- unnest(ids) keeps it a hash join (list_contains(ids, receipt_id) scans the list per row: seconds at 10,000
-- receipts); the BETWEEN is redundant for DuckDB but lets the postgres scanner push a range filter down for a
-- few ids.
CREATE OR REPLACE TEMP MACRO step_times(ids, steady_only) AS TABLE
SELECT s.receipt_id, s.step, max(s.step_ms) AS step_ms,
       CASE WHEN count(DISTINCT s.rank) > 1 THEN sum(s.tokens_per_s) ELSE max(s.tokens_per_s) END AS tokens_per_s,
       count(*) AS n_ranks
FROM receipt_steps s SEMI JOIN (SELECT unnest(ids) AS id) wanted ON wanted.id = s.receipt_id
WHERE (NOT steady_only OR NOT s.warmup) AND s.step_ms IS NOT NULL
  AND s.receipt_id BETWEEN list_min(ids) AND list_max(ids)
GROUP BY s.receipt_id, s.step;

-- The steady state's step times: warm-up steps left out.
CREATE OR REPLACE TEMP MACRO steady_step_times(ids) AS TABLE SELECT * FROM step_times(ids, true);

-- Each receipt's newest attached profiler export (an nsys export, Kineto traces): the one `receipts anatomy`
-- shows and `explain` reads components, shapes and rules from; the latest ingested, a tie broken by its sha256.
-- A receipt without one has no row.
CREATE OR REPLACE TEMP MACRO newest_exports(ids) AS TABLE
SELECT a.*
FROM anatomy_sources a SEMI JOIN (SELECT unnest(ids) AS id) wanted ON wanted.id = a.receipt_id
LEFT JOIN receipt_sources s ON s.receipt_id = a.receipt_id AND s.sha256 = a.source_sha256
WHERE a.receipt_id BETWEEN list_min(ids) AND list_max(ids)
QUALIFY row_number() OVER (PARTITION BY a.receipt_id ORDER BY s.ingested_at DESC, a.source_sha256) = 1;

-- Each receipt's steady-state median: the summary stored at ingest (analysis/summary.py: numpy's linear
-- percentiles, as quantile_cont), else computed from its steady step times. `unsummarised`: the receipts
-- without a stored summary (sql/unsummarised_receipts.sql), a value and not a subquery: over a subquery's list
-- the postgres scanner could push no filter down and read every step row of the store. No CTE: a CTE read
-- twice is materialised whole, parsing every summary's JSON for p10/p90 even where the caller does not select
-- them (twice the time of `receipts list` over 10,000 receipts).
CREATE OR REPLACE TEMP MACRO run_medians(ids, unsummarised) AS TABLE
SELECT m.receipt_id, m.n_steady_steps AS n_steps, m.median_step_ms,
       TRY_CAST(json_extract(m.summary_json, '$.step_ms.summary.p10') AS DOUBLE) AS p10_step_ms,
       TRY_CAST(json_extract(m.summary_json, '$.step_ms.summary.p90') AS DOUBLE) AS p90_step_ms
FROM receipt_summaries m SEMI JOIN (SELECT unnest(ids) AS id) wanted ON wanted.id = m.receipt_id
UNION ALL
SELECT receipt_id, count(*), median(step_ms), quantile_cont(step_ms, 0.10), quantile_cont(step_ms, 0.90)
FROM steady_step_times(unsummarised) t
WHERE receipt_id IN (SELECT unnest(ids))
  AND NOT EXISTS (SELECT 1 FROM receipt_summaries m WHERE m.receipt_id = t.receipt_id)  -- summarised since: one row
GROUP BY receipt_id;

-- Every receipt's steady-state median, as run_medians gives it, without the ids: a query joins it to the runs it
-- picked (sql/lane_runs.sql). Handing run_medians those runs' ids as a subquery over the query's own CTE reads the
-- CTE twice, and DuckDB takes ~12 ms to plan that against ~6 ms for the join (a lane of four runs), in every show,
-- compare, explain and check; the summaries' two columns of every receipt are a few thousand rows at most.
CREATE OR REPLACE TEMP MACRO every_run_median(unsummarised) AS TABLE
SELECT m.receipt_id, m.n_steady_steps AS n_steps, m.median_step_ms FROM receipt_summaries m
UNION ALL
SELECT receipt_id, count(*), median(step_ms)
FROM steady_step_times(unsummarised) t
WHERE NOT EXISTS (SELECT 1 FROM receipt_summaries m WHERE m.receipt_id = t.receipt_id)  -- summarised since: one row
GROUP BY receipt_id;

-- An ISO-8601 time as a UTC timestamp: one with an offset ('+02:00', 'Z') converted to UTC; one without
-- taken as written (a log's local time, offset unknown), never shifted by the reading session's TimeZone
-- (a cast to TIMESTAMP drops an offset; a cast to TIMESTAMPTZ reads an offset-less time in the session's zone).
CREATE OR REPLACE TEMP MACRO utc_time(iso) AS
CASE WHEN regexp_matches(iso, '\d[T ]\d{2}:\d{2}(:\d{2}(\.\d*)?)?\s*(Z|[+-]\d{2}(:?\d{2})?)$')
     THEN timezone('UTC', TRY_CAST(iso AS TIMESTAMPTZ))
     ELSE TRY_CAST(iso AS TIMESTAMP) END;

-- A run's date: its own start from its log, header or export when the source gives one, else when it was
-- ingested; run_date_source says which.
CREATE OR REPLACE TEMP MACRO run_date(started_at, ingested_at) AS coalesce(utc_time(started_at), utc_time(ingested_at));
CREATE OR REPLACE TEMP MACRO run_date_source(started_at) AS
CASE WHEN utc_time(started_at) IS NOT NULL THEN 'header' ELSE 'ingest' END;

CREATE OR REPLACE TEMP MACRO receipt_tags(tags_json) AS from_json(tags_json, '["VARCHAR"]');
CREATE OR REPLACE TEMP MACRO git_rev(provenance_json) AS json_extract_string(provenance_json, '$.git_rev');

-- A receipt's lane key (receipts.lane_key, schema/lane.py Lane.key) as its values, and as people read it:
-- 'host · preset · regime', or 'rumor' for an incomplete identity.
CREATE OR REPLACE TEMP MACRO lane_values(lane_key) AS from_json(lane_key, '["VARCHAR"]');
CREATE OR REPLACE TEMP MACRO lane_label(identity_complete, lane_key) AS
CASE WHEN identity_complete THEN array_to_string(lane_values(lane_key), ' · ') ELSE 'rumor' END;
