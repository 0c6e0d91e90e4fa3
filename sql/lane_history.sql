-- One lane's current receipts over time (superseded ones left out): steady-state step time and peak
-- memory, oldest first.
-- Reads: receipts, receipt_steps (through steady_step_times).
-- Params: $host_lineage, $preset_family, $launch_regime (the canonical identity triple of the lane).
-- Columns: receipt_id, run_name, run_at (timestamp: started_at, else ingested_at, UTC),
--          git_rev (text: source revision from provenance, null when unrecorded), n_steps (steady steps),
--          median_step_ms, p10_step_ms, p90_step_ms (ms, warm-up excluded, slowest rank per step),
--          peak_allocated_bytes, peak_reserved_bytes (bytes), window_rule (how warm-up was cut).
WITH lane AS (
    SELECT * FROM receipts
    WHERE identity_complete AND superseded_by IS NULL AND host_lineage = $host_lineage AND preset_family = $preset_family
      AND launch_regime = $launch_regime
), t AS (
    SELECT * FROM steady_step_times((SELECT list(id) FROM lane))
), m AS (
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
