-- Files behind one receipt, with sha256: evidence stays attached. The receipt's own file comes first
-- (an attachment stored with it, or older receipts' times kept to the second, can share its ingested_at),
-- then attachments in the order they came.
-- Reads: receipt_sources, receipts.  Params: $receipt_id.
-- Columns: path, sha256, size_bytes (bytes), format, role, ingested_at,
--          forced (text: the GPU model/count contradiction `--attach --force` overrode; null = none).
SELECT s.path, s.sha256, s.size_bytes, s.format, s.role, s.ingested_at, s.forced
FROM receipt_sources s JOIN receipts r ON r.id = s.receipt_id
WHERE s.receipt_id = $receipt_id
ORDER BY s.sha256 <> r.content_sha256, s.ingested_at, s.path
