-- Files behind one receipt, with sha256: evidence stays attached.
-- Reads: receipt_sources.  Params: $receipt_id.
-- Columns: path, sha256, size_bytes (bytes), format, role, ingested_at,
--          forced (text: the GPU model/count contradiction `--attach --force` overrode; null = none).
SELECT path, sha256, size_bytes, format, role, ingested_at, forced FROM receipt_sources
WHERE receipt_id = $receipt_id ORDER BY ingested_at, path
