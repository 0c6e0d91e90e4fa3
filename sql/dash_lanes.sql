-- Current receipts (superseded ones are left out) for the lane view, filtered, each with its lane key and
-- whether it is a rumor.
-- Reads: receipts, receipt_summaries (the stored steady-state summary), receipt_steps (only receipts stored
--        without a summary, through run_medians).
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
-- NOT MATERIALIZED: read twice (its rows, and their ids for run_medians); materialised, every column of every
-- receipt would be copied first (up to twice the query's time over 10,000 receipts).
WITH r AS NOT MATERIALIZED (
    SELECT *, run_date(started_at, ingested_at) AS run_at, receipt_tags(tags_json) AS tags
    FROM receipts
    WHERE superseded_by IS NULL
), picked AS NOT MATERIALIZED (
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
)
SELECT p.id, p.run_name, p.host_lineage, p.preset_family, p.launch_regime,
       NOT p.identity_complete AS rumor,
       concat_ws(', ', CASE WHEN p.host_lineage IS NULL THEN 'host_lineage' END,
                       CASE WHEN p.preset_family IS NULL THEN 'preset_family' END,
                       CASE WHEN p.launch_regime IS NULL THEN 'launch_regime' END) AS missing,
       lane_label(p.identity_complete, p.host_lineage, p.preset_family, p.launch_regime) AS lane,
       p.run_at, p.tags, git_rev(p.provenance_json) AS git_rev,
       coalesce(m.n_steps, 0) AS n_steady_steps, m.median_step_ms,
       p.peak_allocated_bytes, p.peak_reserved_bytes, p.ended_early
FROM picked p LEFT JOIN run_medians((SELECT list(id) FROM picked), CAST($unsummarised AS VARCHAR[])) m
     ON m.receipt_id = p.id
ORDER BY p.run_at DESC, p.ingest_seq DESC, p.id
