-- Current receipts (superseded ones are left out) for the lane view, filtered, each with its lane key and
-- whether it is a rumor.
-- Reads: receipts, receipt_steps.
-- Params: $hosts, $presets, $regimes (VARCHAR[] or NULL = any), $tag (text or NULL), $since, $until
--         (ISO date text or NULL; compared with run_at), $search (text or NULL: case-insensitive substring of
--         run name, id, hostname or a raw identity value).
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
), one AS (
    -- Fast path: a receipt logged by one rank (or by the logging rank only, rank null) has one row per
    -- step, so the median of its rows is the median of its per-step times. Grouping 10k receipts' millions
    -- of rows by (receipt, step) instead costs seconds; only multi-rank receipts take that path below.
    SELECT s.receipt_id, count(*) AS n, median(s.step_ms) AS median_step_ms,
           min(s.rank) IS DISTINCT FROM max(s.rank) AS multi_rank
    FROM receipt_steps s SEMI JOIN picked p ON p.id = s.receipt_id
    WHERE NOT s.warmup AND s.step_ms IS NOT NULL
    GROUP BY s.receipt_id
), t AS (
    -- one time per step: a step ends when its slowest rank does
    SELECT s.receipt_id, s.step, max(s.step_ms) AS step_ms
    FROM receipt_steps s SEMI JOIN (SELECT receipt_id FROM one WHERE multi_rank) o ON o.receipt_id = s.receipt_id
    WHERE NOT s.warmup AND s.step_ms IS NOT NULL
    GROUP BY s.receipt_id, s.step
), m AS (
    SELECT receipt_id, n AS n_steady_steps, median_step_ms FROM one WHERE NOT multi_rank
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
