-- Current receipts (superseded ones are left out) for the lane view, filtered, each with its lane key and
-- whether it is a rumor.
-- Reads: receipts, receipt_summaries (the stored steady-state summary), receipt_steps (only receipts stored
--        without a summary, through steady_step_times).
-- Params: $hosts, $presets, $regimes (VARCHAR[] or NULL = any), $tag (text or NULL), $since, $until
--         (ISO date text or NULL; compared with run_at), $search (text or NULL: case-insensitive substring of
--         run name, id, hostname or a raw identity value); $unsummarised (VARCHAR[]: the receipts without a stored
--         summary, analysis.listing.unsummarised; a value, not a subquery: see sql/lane_runs.sql).
-- Columns: id, run_name, host_lineage, preset_family, launch_regime (canonical; null when missing),
--          rumor (bool: identity incomplete), missing (text: the absent identity fields, '' when complete),
--          lane (text: 'host · preset · regime', or 'rumor' for incomplete receipts),
--          run_at (timestamp: started_at, else ingested_at, UTC), tags (VARCHAR[]), git_rev (text),
--          n_steady_steps (count), median_step_ms (ms, steady state, slowest rank per step),
--          peak_allocated_bytes, peak_reserved_bytes (bytes), ended_early (text, null = complete log).
WITH r AS (
    SELECT *,
           coalesce(TRY_CAST(started_at AS TIMESTAMP), TRY_CAST(ingested_at AS TIMESTAMP)) AS run_at,
           from_json(tags_json, '["VARCHAR"]') AS tags
    FROM receipts
    WHERE superseded_by IS NULL
), picked AS (
    SELECT * FROM r
    WHERE ($hosts IS NULL OR list_contains($hosts, host_lineage))
      AND ($presets IS NULL OR list_contains($presets, preset_family))
      AND ($regimes IS NULL OR list_contains($regimes, launch_regime))
      AND ($tag IS NULL OR list_contains(tags, $tag))
      AND ($since IS NULL OR run_at >= CAST($since AS TIMESTAMP))
      AND ($until IS NULL OR run_at < CAST($until AS TIMESTAMP) + INTERVAL 1 DAY)
      AND ($search IS NULL
           OR contains(lower(concat_ws(' ', run_name, id, hostname, raw_host_lineage, raw_preset, raw_regime)),
                       lower($search)))
), summarised AS (
    -- Summaries are stored at ingest (analysis/summary.py): the lane view reads one row per receipt.
    SELECT m.receipt_id, m.n_steady_steps, m.median_step_ms
    FROM receipt_summaries m SEMI JOIN picked p ON p.id = m.receipt_id
), t AS (
    SELECT * FROM steady_step_times(CAST($unsummarised AS VARCHAR[]))
    WHERE receipt_id IN (SELECT id FROM picked) AND receipt_id NOT IN (SELECT receipt_id FROM summarised)
), m AS (
    SELECT * FROM summarised
    UNION ALL
    SELECT receipt_id, count(*), median(step_ms) FROM t GROUP BY receipt_id
)
SELECT p.id, p.run_name, p.host_lineage, p.preset_family, p.launch_regime,
       NOT p.identity_complete AS rumor,
       concat_ws(', ', CASE WHEN p.host_lineage IS NULL THEN 'host_lineage' END,
                       CASE WHEN p.preset_family IS NULL THEN 'preset_family' END,
                       CASE WHEN p.launch_regime IS NULL THEN 'launch_regime' END) AS missing,
       CASE WHEN p.identity_complete THEN concat_ws(' · ', p.host_lineage, p.preset_family, p.launch_regime)
            ELSE 'rumor' END AS lane,
       p.run_at, p.tags, json_extract_string(p.provenance_json, '$.git_rev') AS git_rev,
       coalesce(m.n_steady_steps, 0) AS n_steady_steps, m.median_step_ms,
       p.peak_allocated_bytes, p.peak_reserved_bytes, p.ended_early
FROM picked p LEFT JOIN m ON m.receipt_id = p.id
ORDER BY p.run_at DESC, p.id
