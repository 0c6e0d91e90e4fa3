-- The values the lane view's filters offer: every canonical identity value and tag of the current
-- (not superseded) receipts.
-- Reads: receipts.
-- Columns: kind ('host_lineage' | 'preset_family' | 'launch_regime' | 'tag' | 'date'), value (text; for
--          'date' the earliest and latest run date, ISO), n_receipts (count).
SELECT 'host_lineage' AS kind, host_lineage AS value, count(*) AS n_receipts
FROM receipts WHERE superseded_by IS NULL AND host_lineage IS NOT NULL GROUP BY ALL
UNION ALL
SELECT 'preset_family', preset_family, count(*) FROM receipts WHERE superseded_by IS NULL AND preset_family IS NOT NULL GROUP BY ALL
UNION ALL
SELECT 'launch_regime', launch_regime, count(*) FROM receipts WHERE superseded_by IS NULL AND launch_regime IS NOT NULL GROUP BY ALL
UNION ALL
SELECT 'tag', tag, count(*) FROM (SELECT unnest(receipt_tags(tags_json)) AS tag FROM receipts WHERE superseded_by IS NULL) GROUP BY ALL
UNION ALL
SELECT 'date', strftime(d, '%Y-%m-%d'), 1
FROM (SELECT unnest([min(run_at), max(run_at)]) AS d
      FROM (SELECT run_date(started_at, ingested_at) AS run_at
            FROM receipts WHERE superseded_by IS NULL))
WHERE d IS NOT NULL
ORDER BY kind, value
