-- The current runs of one or more lanes, in run order, each with its steady-state median: the input of
-- a lane's noise floor (analysis.noise) and of `receipts history`.
-- Reads: receipts, receipt_summaries (stored medians), receipt_steps (only receipts stored without a summary,
--        through every_run_median, sql/_macros.sql).
-- Params: $lane_keys (VARCHAR[]: the lanes, each its stored key receipts.lane_key, schema/lane.py Lane.key); $tag (text or NULL: only receipts carrying this lineage tag);
--         $last (integer or NULL: only each lane's most recent $last runs); $unsummarised (VARCHAR[]: the receipts
--         without a stored summary, sql/unsummarised_receipts.sql). A value, not a subquery here: over a
--         subquery's list the postgres scanner could push no filter down and read every step row of the store
--         (2.3 s of a 10,000-receipt store's history on PostgreSQL; 12 against 8 ms in DuckDB).
-- Current: superseded_by IS NULL (a superseded receipt is an older copy of a run, never evidence).
-- Run order: run_date (to the microsecond), then ingest_seq (the store's write order, so runs without a date of
--            their own keep the order they were ingested in), then id.
-- Columns: lane_key (the lane), receipt_id, run_name,
--          run_date (timestamp, UTC: the run's own start from its log/header, else the ingest time),
--          run_date_source (text: 'header' when from the run, 'ingest' when the run gave none),
--          n_steps (steady steps with a time), median_step_ms (ms, warm-up excluded, slowest rank per
--          step; null without steady steps), tags (VARCHAR[]), git_rev (text, null when unrecorded).
WITH lanes AS (
    SELECT unnest(CAST($lane_keys AS VARCHAR[])) AS lane_key
), picked AS (
    SELECT r.*, run_date(r.started_at, r.ingested_at) AS run_date, run_date_source(r.started_at) AS run_date_source,
           receipt_tags(r.tags_json) AS tags
    FROM receipts r SEMI JOIN lanes l ON l.lane_key = r.lane_key
    WHERE r.identity_complete AND r.superseded_by IS NULL AND ($tag IS NULL OR list_contains(receipt_tags(r.tags_json), $tag))
    QUALIFY $last IS NULL
         OR row_number() OVER (PARTITION BY lane_key ORDER BY run_date DESC, ingest_seq DESC, id DESC) <= $last
)
SELECT p.lane_key, p.id AS receipt_id, p.run_name, p.run_date,
       p.run_date_source, coalesce(m.n_steps, 0) AS n_steps, m.median_step_ms, p.tags, git_rev(p.provenance_json) AS git_rev
FROM picked p LEFT JOIN every_run_median(CAST($unsummarised AS VARCHAR[])) m
     ON m.receipt_id = p.id
ORDER BY p.lane_key, p.run_date, p.ingest_seq, p.id
