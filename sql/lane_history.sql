-- One lane's current receipts over time (superseded ones left out): steady-state step time and peak
-- memory, oldest first.
-- Reads: receipts, receipt_summaries (the stored steady-state summary), receipt_steps (only receipts stored
--        without a summary, through run_medians).
-- Params: $lane_key (the lane: its stored key receipts.lane_key, schema/lane.py Lane.key);
--         $unsummarised (VARCHAR[]: the receipts without a stored summary, analysis.listing.unsummarised; a
--         value, not a subquery: see sql/lane_runs.sql).
-- Columns: receipt_id, run_name, run_at (timestamp: started_at, else ingested_at, UTC),
--          git_rev (text: source revision from provenance, null when unrecorded), n_steps (steady steps),
--          median_step_ms, p10_step_ms, p90_step_ms (ms, warm-up excluded, slowest rank per step),
--          peak_allocated_bytes, peak_reserved_bytes (bytes), window_rule (how warm-up was cut).
-- NOT MATERIALIZED: read twice (its rows, and their ids for run_medians); materialised, every column of every
-- receipt would be copied first (up to twice the query's time over 10,000 receipts).
WITH lane AS NOT MATERIALIZED (
    SELECT * FROM receipts
    WHERE identity_complete AND superseded_by IS NULL AND lane_key = $lane_key
)
SELECT l.id AS receipt_id, l.run_name, run_date(l.started_at, l.ingested_at) AS run_at,
       git_rev(l.provenance_json) AS git_rev,
       coalesce(m.n_steps, 0) AS n_steps, m.median_step_ms, m.p10_step_ms, m.p90_step_ms,
       l.peak_allocated_bytes, l.peak_reserved_bytes, l.window_rule
FROM lane l LEFT JOIN run_medians((SELECT list(id) FROM lane), CAST($unsummarised AS VARCHAR[])) m
     ON m.receipt_id = l.id
ORDER BY run_at, l.ingest_seq, l.id  -- the order of sql/lane_runs.sql, which the change points are computed over
