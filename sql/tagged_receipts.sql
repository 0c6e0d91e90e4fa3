-- The current receipts carrying one lineage tag: `receipts check tag:pr-123 ...` names its candidates
-- by tag.
-- Reads: receipts.
-- Params: $tag (text).
-- Current: superseded_by IS NULL (a superseded receipt is an older copy of a run, never a candidate).
-- Columns: id, run_name, run_date (timestamp, UTC: the run's own start, else the ingest time).
SELECT id, run_name, run_date(started_at, ingested_at) AS run_date
FROM receipts
WHERE superseded_by IS NULL AND list_contains(receipt_tags(tags_json), $tag)
ORDER BY run_date, ingest_seq, id
