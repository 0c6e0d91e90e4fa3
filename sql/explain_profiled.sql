-- Which of several receipts have a profiler export attached, and of what format (the newest export's).
-- Reads: anatomy_sources, receipt_sources.  Params: $ids (VARCHAR[]: receipt ids).
-- Columns: receipt_id, source_sha256, source_format ('nsys' | 'kineto'), has_steps (bool: the export has
--          steady steps, so it has component rows), category_rules_json (the kernel-category rules it was
--          categorised under, schema/categories.py CategoryRules.text; null: attached before they were kept),
--          raw_events_path (its raw events as Parquet, `ingest --keep-raw`; null: none kept).
SELECT a.receipt_id, a.source_sha256, a.source_format, a.category_rules_json, a.raw_events_path,
       EXISTS (SELECT 1 FROM anatomy_steps t WHERE t.receipt_id = a.receipt_id AND t.source_sha256 = a.source_sha256
               AND t.step IS NOT NULL AND NOT t.warmup) AS has_steps
FROM anatomy_sources a SEMI JOIN (SELECT unnest(CAST($ids AS VARCHAR[])) AS id) w ON w.id = a.receipt_id
LEFT JOIN receipt_sources s ON s.receipt_id = a.receipt_id AND s.sha256 = a.source_sha256
WHERE a.receipt_id BETWEEN list_min($ids) AND list_max($ids)
QUALIFY row_number() OVER (PARTITION BY a.receipt_id ORDER BY s.ingested_at DESC, a.source_sha256) = 1
ORDER BY a.receipt_id
