-- The current receipts carrying one lineage tag: `receipts check tag:pr-123 ...` names its candidates
-- by tag.
-- Reads: receipts.
-- Params: $tag (text).
-- Current: superseded_by IS NULL (a superseded receipt is an older copy of a run, never a candidate).
-- Columns: id, run_name, run_date (timestamp, UTC: the run's own start, else the ingest time).
SELECT id, run_name,
       coalesce(timezone('UTC', TRY_CAST(started_at AS TIMESTAMPTZ)),
                timezone('UTC', TRY_CAST(ingested_at AS TIMESTAMPTZ))) AS run_date
FROM receipts
WHERE superseded_by IS NULL AND list_contains(from_json(tags_json, '["VARCHAR"]'), $tag)
ORDER BY run_date, id
