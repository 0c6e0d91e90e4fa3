-- The memory geometry of several receipts, one row per source and rank (or device): what receipts.capture
-- measured, what an attached PyTorch memory snapshot replays to, what an attached estimate expects.
-- Reads: memory_ranks, memory_sources, receipt_sources.  Params: $ids (list of receipt ids).
-- Rows: by receipt, then capture, snapshots, estimates, each in the order attached (the last estimate last).
-- Columns: receipt_id, source_sha256, kind (capture | snapshot | estimate), path (the source file; an estimate's
--          config or flags), rank (null: a snapshot's device, an estimate), device (CUDA index or null),
--          peak_allocated_bytes, peak_reserved_bytes, resident_bytes, fragmentation_at_peak_bytes,
--          device_total_bytes (bytes), alloc_retries, ooms (counts), detail_json, warnings_json (text, JSON).
SELECT m.receipt_id, m.source_sha256, s.kind, f.path, m.rank, m.device, m.peak_allocated_bytes,
       m.peak_reserved_bytes, m.resident_bytes, m.fragmentation_at_peak_bytes, m.device_total_bytes,
       m.alloc_retries, m.ooms, m.detail_json, m.warnings_json
FROM memory_ranks m
JOIN memory_sources s ON s.receipt_id = m.receipt_id AND s.source_sha256 = m.source_sha256
LEFT JOIN receipt_sources f ON f.receipt_id = m.receipt_id AND f.sha256 = m.source_sha256
WHERE list_contains($ids, m.receipt_id) AND m.receipt_id BETWEEN list_min($ids) AND list_max($ids)
ORDER BY m.receipt_id, CASE s.kind WHEN 'capture' THEN 0 WHEN 'snapshot' THEN 1 ELSE 2 END, f.ingested_at, f.path,
         m.source_sha256, m.rank NULLS FIRST, m.device NULLS FIRST
