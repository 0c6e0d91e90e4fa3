-- Bytes by bucket (capture, estimate) or category (snapshot) of several receipts, per source and rank.
-- Reads: memory_categories, memory_sources.  Params: $ids (list of receipt ids).
-- Columns: receipt_id, source_sha256, kind (capture | snapshot | estimate), rank, device (as memory_ranks_many),
--          category (schema/memory.py: BUCKETS, SNAPSHOT_CATEGORIES or ESTIMATE_FIELDS), bytes (bytes).
SELECT c.receipt_id, c.source_sha256, s.kind, c.rank, c.device, c.category, c.bytes
FROM memory_categories c
JOIN memory_sources s ON s.receipt_id = c.receipt_id AND s.source_sha256 = c.source_sha256
WHERE list_contains($ids, c.receipt_id) AND c.receipt_id BETWEEN list_min($ids) AND list_max($ids)
ORDER BY c.receipt_id, c.source_sha256, c.rank NULLS FIRST, c.device NULLS FIRST, c.category
