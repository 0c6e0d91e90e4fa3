-- Every receipt's id and run name, newest first: resolving many references in one read.
-- Reads: receipts.
-- Columns: id, run_name, ingested_at.
SELECT id, run_name, ingested_at FROM receipts ORDER BY ingested_at DESC, id
