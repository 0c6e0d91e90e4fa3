-- Current receipts (superseded ones are left out) for the lane view, filtered, each with its lane key and
-- whether it is a rumor.
-- Reads: receipts, receipt_summaries (the stored steady-state summary), receipt_steps (only receipts stored
--        without a summary, through run_medians).
-- Params: $lane_filter (VARCHAR[][] or NULL = any lane: per value of the lane key, in schema/lane.py FIELDS'
--         order, the values wanted, or NULL = any), $tag (text or NULL), $since, $until
--         (ISO date text or NULL; compared with run_at), $search (text or NULL: case-insensitive substring of
--         run name, id, hostname or a raw identity value); $unsummarised (VARCHAR[]: the receipts without a stored
--         summary, analysis.listing.unsummarised; a value, not a subquery: see sql/lane_runs.sql).
-- Columns: id, run_name, lane_key (the canonical identity, schema/lane.py Lane.key; null values when missing),
--          rumor (bool: identity incomplete), lane (text: 'host · preset · regime', or 'rumor' for incomplete
--          receipts),
--          run_at (timestamp: started_at, else ingested_at, UTC), tags (VARCHAR[]), git_rev (text),
--          n_steady_steps (count), median_step_ms (ms, steady state, slowest rank per step),
--          peak_allocated_bytes, peak_reserved_bytes (bytes), ended_early (text, null = complete log).
-- NOT MATERIALIZED: read twice (its rows, and their ids for run_medians); materialised, every column of every
-- receipt would be copied first (up to twice the query's time over 10,000 receipts).
WITH r AS NOT MATERIALIZED (
    SELECT *, run_date(started_at, ingested_at) AS run_at, receipt_tags(tags_json) AS tags,
           lower(concat_ws(' ', run_name, id, hostname, *COLUMNS('^raw_'))) AS searched  -- the raw identity values
    FROM receipts
    WHERE superseded_by IS NULL
), picked AS NOT MATERIALIZED (
    SELECT * FROM r
    WHERE ($lane_filter IS NULL
           OR list_bool_and(list_transform(list_zip(CAST($lane_filter AS VARCHAR[][]), lane_values(lane_key)),
                                           x -> x[1] IS NULL OR coalesce(list_contains(x[1], x[2]), false))))
      AND ($tag IS NULL OR list_contains(tags, $tag))
      AND ($since IS NULL OR run_at >= CAST($since AS TIMESTAMP))
      AND ($until IS NULL OR run_at < CAST($until AS TIMESTAMP) + INTERVAL 1 DAY)
      AND ($search IS NULL
           OR contains(searched, lower($search)))
)
SELECT p.id, p.run_name, p.lane_key, NOT p.identity_complete AS rumor, lane_label(p.identity_complete, p.lane_key) AS lane,
       p.run_at, p.tags, git_rev(p.provenance_json) AS git_rev,
       coalesce(m.n_steps, 0) AS n_steady_steps, m.median_step_ms,
       p.peak_allocated_bytes, p.peak_reserved_bytes, p.ended_early
FROM picked p LEFT JOIN run_medians((SELECT list(id) FROM picked), CAST($unsummarised AS VARCHAR[])) m
     ON m.receipt_id = p.id
ORDER BY p.run_at DESC, p.ingest_seq DESC, p.id
