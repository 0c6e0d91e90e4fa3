-- Rank-skew attribution of the profiler exports attached to several receipts, each receipt's newest first: what
-- sql/stragglers.sql reads for one, in one query for a lane's history (a query per run would take 4 s of 7 over a
-- lane of 278 runs).
-- Reads: anatomy_sources, receipt_sources.  Params: $ids (VARCHAR[]: receipt ids).
-- Columns: receipt_id, source_sha256, source_format, path (the export), stragglers_json (text: analysis/
--          stragglers.py's report_json of that export, with per_step; null for a single-rank profile).
SELECT a.receipt_id, a.source_sha256, a.source_format, s.path, a.stragglers_json
FROM anatomy_sources a
LEFT JOIN receipt_sources s ON s.receipt_id = a.receipt_id AND s.sha256 = a.source_sha256
WHERE list_contains($ids, a.receipt_id) AND a.receipt_id BETWEEN list_min($ids) AND list_max($ids)
ORDER BY a.receipt_id, s.ingested_at DESC, a.source_sha256
