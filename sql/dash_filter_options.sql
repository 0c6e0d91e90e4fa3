-- The values the lane view's filters offer: every canonical identity value and tag of the current
-- (not superseded) receipts.
-- Reads: receipts.  Params: $fields (VARCHAR[]: schema/lane.py FIELDS, the names of the lane key's values).
-- Columns: kind (a name of $fields | 'tag' | 'date'), value (text; for 'date' the earliest and latest run date,
--          ISO), n_receipts (count).
SELECT kind, value, count(*) AS n_receipts
FROM (SELECT unnest(CAST($fields AS VARCHAR[])) AS kind, unnest(lane_values(lane_key)) AS value
      FROM receipts WHERE superseded_by IS NULL)
WHERE value IS NOT NULL GROUP BY ALL
UNION ALL
SELECT 'tag', tag, count(*) FROM (SELECT unnest(receipt_tags(tags_json)) AS tag FROM receipts WHERE superseded_by IS NULL) GROUP BY ALL
UNION ALL
SELECT 'date', strftime(d, '%Y-%m-%d'), 1
FROM (SELECT unnest([min(run_at), max(run_at)]) AS d
      FROM (SELECT run_date(started_at, ingested_at) AS run_at
            FROM receipts WHERE superseded_by IS NULL))
WHERE d IS NOT NULL
ORDER BY kind, value
