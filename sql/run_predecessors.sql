-- Current receipts that may be an earlier view of the run being ingested: the same run key (a RECEIPT
-- header naming the same run), or a log shorter than the new file (a candidate byte prefix: the caller
-- hashes the new file's first size_bytes bytes and compares with sha256).
-- Reads: receipts, receipt_sources.
-- Params: $run_key (text or NULL), $size (bytes of the new log), $id (the new receipt's id, excluded).
-- Columns: id (text), match ('run_key' | 'prefix_candidate'), size_bytes (bytes of that receipt's log),
--          sha256 (of that log), retagged (bool: its identity was changed by `receipts retag`).
WITH current_logs AS (
    SELECT r.id, r.run_key, s.size_bytes, s.sha256
    FROM receipts r JOIN receipt_sources s ON s.receipt_id = r.id AND s.sha256 = r.content_sha256
    WHERE r.superseded_by IS NULL AND r.id <> $id AND s.role = 'log'
)
SELECT id, 'run_key' AS match, size_bytes, sha256,
       EXISTS (SELECT 1 FROM identity_history h WHERE h.receipt_id = c.id) AS retagged
FROM current_logs c WHERE $run_key IS NOT NULL AND run_key = $run_key
UNION ALL
SELECT id, 'prefix_candidate' AS match, size_bytes, sha256,
       EXISTS (SELECT 1 FROM identity_history h WHERE h.receipt_id = c.id) AS retagged
FROM current_logs c WHERE size_bytes > 0 AND size_bytes < $size
ORDER BY size_bytes, id
