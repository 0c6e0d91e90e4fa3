-- The current runs of one or more lanes, in run order, each with its steady-state median: the input of
-- a lane's noise floor (analysis.noise) and of `receipts history`.
-- Reads: receipts, receipt_summaries (stored medians), receipt_steps (only receipts stored without a summary,
--        through steady_step_times).
-- Params: $hosts, $presets, $regimes (VARCHAR[], parallel: lane i is (hosts[i], presets[i], regimes[i]),
--         canonical identity values); $tag (text or NULL: only receipts carrying this lineage tag);
--         $last (integer or NULL: only each lane's most recent $last runs); $unsummarised (VARCHAR[]: the receipts
--         without a stored summary, sql/unsummarised_receipts.sql). A value, not a subquery here: over a
--         subquery's list the postgres scanner could push no filter down and read every step row of the store
--         (2.3 s of a 10,000-receipt store's history on PostgreSQL; 12 against 8 ms in DuckDB).
-- Current: superseded_by IS NULL (a superseded receipt is an older copy of a run, never evidence).
-- Columns: host_lineage, preset_family, launch_regime (the lane), receipt_id, run_name,
--          run_date (timestamp, UTC: the run's own start from its log/header, else the ingest time),
--          run_date_source (text: 'header' when from the run, 'ingest' when the run gave none),
--          n_steps (steady steps with a time), median_step_ms (ms, warm-up excluded, slowest rank per
--          step; null without steady steps), tags (VARCHAR[]), git_rev (text, null when unrecorded).
WITH lanes AS (
    SELECT unnest($hosts) AS host_lineage, unnest($presets) AS preset_family, unnest($regimes) AS launch_regime
), dated AS (
    SELECT r.*, timezone('UTC', TRY_CAST(r.started_at AS TIMESTAMPTZ)) AS _started,
           timezone('UTC', TRY_CAST(r.ingested_at AS TIMESTAMPTZ)) AS _ingested,
           from_json(r.tags_json, '["VARCHAR"]') AS tags
    FROM receipts r SEMI JOIN lanes l
      ON l.host_lineage = r.host_lineage AND l.preset_family = r.preset_family AND l.launch_regime = r.launch_regime
    WHERE r.identity_complete AND r.superseded_by IS NULL
), picked AS (
    SELECT *, coalesce(_started, _ingested) AS run_date,
           CASE WHEN _started IS NOT NULL THEN 'header' ELSE 'ingest' END AS run_date_source
    FROM dated
    WHERE $tag IS NULL OR list_contains(tags, $tag)
    QUALIFY $last IS NULL
         OR row_number() OVER (PARTITION BY host_lineage, preset_family, launch_regime
                               ORDER BY coalesce(_started, _ingested) DESC, id DESC) <= $last
), summarised AS (
    SELECT m.receipt_id, m.n_steady_steps AS n_steps, m.median_step_ms
    FROM receipt_summaries m SEMI JOIN picked p ON p.id = m.receipt_id
), t AS (
    SELECT * FROM steady_step_times(CAST($unsummarised AS VARCHAR[]))
    WHERE receipt_id IN (SELECT id FROM picked) AND receipt_id NOT IN (SELECT receipt_id FROM summarised)
), m AS (
    SELECT * FROM summarised
    UNION ALL
    SELECT receipt_id, count(*) AS n_steps, median(step_ms) AS median_step_ms FROM t GROUP BY receipt_id
)
SELECT p.host_lineage, p.preset_family, p.launch_regime, p.id AS receipt_id, p.run_name, p.run_date,
       p.run_date_source, coalesce(m.n_steps, 0) AS n_steps, m.median_step_ms, p.tags,
       json_extract_string(p.provenance_json, '$.git_rev') AS git_rev
FROM picked p LEFT JOIN m ON m.receipt_id = p.id
ORDER BY p.host_lineage, p.preset_family, p.launch_regime, p.run_date, p.id
