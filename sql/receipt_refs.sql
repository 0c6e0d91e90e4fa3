-- Every receipt's id and run name, newest first: resolving many references in one read.
-- Reads: receipts.
-- Columns: id, run_name, ingested_at, superseded_by (null = current; a run name resolves to its current receipt).
SELECT id, run_name, ingested_at, superseded_by FROM receipts ORDER BY ingested_at DESC, id
