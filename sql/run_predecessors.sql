-- Current receipts that may be another view of the run being ingested: the same run key (a RECEIPT header
-- naming the same run); a log shorter than the new file (a candidate byte prefix of it: the caller hashes the new
-- file's first size_bytes bytes and compares with sha256); or a longer log of the same family (the same first
-- 256 bytes: the new file may be a byte prefix of it, which the caller checks by reading that log at path).
-- Reads: receipts, receipt_sources.
-- Params: $run_key (text or NULL), $size (bytes of the new log), $id (the new receipt's id, excluded),
--         $head (text or NULL: sha256 of the new log's first 256 bytes, lifecycle.log_head_sha256).
-- Columns: id (text), run_name (text), same_run (bool: the same run key), same_head (bool: the same first 256
--          bytes), size_bytes (bytes of that receipt's log), sha256 (of that log), path (where it was ingested from),
--          started_at (text: the run's start as its log says, null when it does not).
SELECT r.id, r.run_name, coalesce(r.run_key = $run_key, false) AS same_run,
       coalesce(r.log_head_sha256 = $head, false) AS same_head, s.size_bytes, s.sha256, s.path, r.started_at
FROM receipts r JOIN receipt_sources s ON s.receipt_id = r.id AND s.sha256 = r.content_sha256
WHERE r.superseded_by IS NULL AND r.id <> $id AND s.role = 'log'
  AND (r.run_key = $run_key OR (s.size_bytes > 0 AND s.size_bytes < $size)
       OR (r.log_head_sha256 = $head AND s.size_bytes > $size))
ORDER BY s.size_bytes, r.id
