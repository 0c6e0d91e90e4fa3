-- Rank-skew attribution of the profiler exports attached to one receipt, newest first.
-- Reads: anatomy_sources, receipt_sources.  Params: $receipt_id.
-- Columns: source_sha256, source_format, path (the export), stragglers_json (text: analysis/stragglers.py's
--          report_json of that export, with per_step; null for a single-rank profile).
SELECT a.source_sha256, a.source_format, s.path, a.stragglers_json
FROM anatomy_sources a
LEFT JOIN receipt_sources s ON s.receipt_id = a.receipt_id AND s.sha256 = a.source_sha256
WHERE a.receipt_id = $receipt_id
ORDER BY s.ingested_at DESC, a.source_sha256
