-- Current receipts already addressed by a run name (an explicit --run-name must not silently share one).
-- Reads: receipts.  Params: $run_name.
-- Columns: id (text), content_sha256 (text), ingested_at (ISO-8601 UTC).
SELECT id, content_sha256, ingested_at FROM receipts
WHERE run_name = $run_name AND superseded_by IS NULL
ORDER BY ingested_at DESC, id
