-- Which of several receipts have a profiler export attached, and of what format (the newest export's).
-- Reads: anatomy_sources, receipt_sources (newest_exports, sql/_macros.sql), anatomy_steps.  Params: $ids (VARCHAR[]: receipt ids).
-- Columns: receipt_id, source_sha256, source_format ('nsys' | 'kineto'), has_steps (bool: the export has
--          steady steps, so it has component rows), category_rules_json (the kernel-category rules it was
--          categorised under, schema/categories.py CategoryRules.text; null: attached before they were kept),
--          raw_events_path (its raw events as Parquet, `ingest --keep-raw`; null: none kept).
SELECT a.receipt_id, a.source_sha256, a.source_format, a.category_rules_json, a.raw_events_path,
       EXISTS (SELECT 1 FROM anatomy_steps t WHERE t.receipt_id = a.receipt_id AND t.source_sha256 = a.source_sha256
               AND t.step IS NOT NULL AND NOT t.warmup) AS has_steps
FROM newest_exports(CAST($ids AS VARCHAR[])) a
ORDER BY a.receipt_id
