-- One lane's current receipts over time (superseded ones left out): steady-state step time and peak
-- memory, oldest first.
-- Reads: receipts, receipt_summaries (the stored steady-state summary), receipt_steps (only receipts stored
--        without a summary, through steady_step_times).
-- Params: $host_lineage, $preset_family, $launch_regime (the canonical identity triple of the lane);
--         $unsummarised (VARCHAR[]: the receipts without a stored summary, analysis.listing.unsummarised; a
--         value, not a subquery: see sql/lane_runs.sql).
-- Columns: receipt_id, run_name, run_at (timestamp: started_at, else ingested_at, UTC),
--          git_rev (text: source revision from provenance, null when unrecorded), n_steps (steady steps),
--          median_step_ms, p10_step_ms, p90_step_ms (ms, warm-up excluded, slowest rank per step),
--          peak_allocated_bytes, peak_reserved_bytes (bytes), window_rule (how warm-up was cut).
WITH lane AS (
    SELECT * FROM receipts
    WHERE identity_complete AND superseded_by IS NULL AND host_lineage = $host_lineage AND preset_family = $preset_family
      AND launch_regime = $launch_regime
), summarised AS (
    -- the stored summary's numbers (analysis.stats.summarize: numpy's linear percentiles, as quantile_cont)
    SELECT m.receipt_id, m.n_steady_steps AS n_steps, m.median_step_ms,
           TRY_CAST(json_extract(m.summary_json, '$.step_ms.summary.p10') AS DOUBLE) AS p10_step_ms,
           TRY_CAST(json_extract(m.summary_json, '$.step_ms.summary.p90') AS DOUBLE) AS p90_step_ms
    FROM receipt_summaries m SEMI JOIN lane l ON l.id = m.receipt_id
), t AS (
    SELECT * FROM steady_step_times(CAST($unsummarised AS VARCHAR[]))
    WHERE receipt_id IN (SELECT id FROM lane) AND receipt_id NOT IN (SELECT receipt_id FROM summarised)
), m AS (
    SELECT * FROM summarised
    UNION ALL
    SELECT receipt_id, count(*) AS n_steps, median(step_ms) AS median_step_ms,
           quantile_cont(step_ms, 0.10) AS p10_step_ms, quantile_cont(step_ms, 0.90) AS p90_step_ms
    FROM t GROUP BY receipt_id
)
SELECT l.id AS receipt_id, l.run_name,
       coalesce(timezone('UTC', TRY_CAST(l.started_at AS TIMESTAMPTZ)),
                timezone('UTC', TRY_CAST(l.ingested_at AS TIMESTAMPTZ))) AS run_at,
       json_extract_string(l.provenance_json, '$.git_rev') AS git_rev,
       coalesce(m.n_steps, 0) AS n_steps, m.median_step_ms, m.p10_step_ms, m.p90_step_ms,
       l.peak_allocated_bytes, l.peak_reserved_bytes, l.window_rule
FROM lane l LEFT JOIN m ON m.receipt_id = l.id
ORDER BY run_at, l.id  -- the order of sql/lane_runs.sql, which the change points are computed over
