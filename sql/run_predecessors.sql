-- Current receipts that may be an earlier view of the run being ingested: the same run key (a RECEIPT
-- header naming the same run), or a log shorter than the new file (a candidate byte prefix: the caller
-- hashes the new file's first size_bytes bytes and compares with sha256).
-- Reads: receipts, receipt_sources.
-- Params: $run_key (text or NULL), $size (bytes of the new log), $id (the new receipt's id, excluded).
-- Columns: id (text), same_run (bool: the same run key), size_bytes (bytes of that receipt's log),
--          sha256 (of that log).
SELECT r.id, coalesce(r.run_key = $run_key, false) AS same_run, s.size_bytes, s.sha256
FROM receipts r JOIN receipt_sources s ON s.receipt_id = r.id AND s.sha256 = r.content_sha256
WHERE r.superseded_by IS NULL AND r.id <> $id AND s.role = 'log'
  AND (r.run_key = $run_key OR (s.size_bytes > 0 AND s.size_bytes < $size))
ORDER BY s.size_bytes, r.id
