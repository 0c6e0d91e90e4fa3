-- Profiler exports attached to one receipt, newest first.
-- Reads: anatomy_sources, receipt_sources.  Params: $receipt_id.
-- Columns: source_sha256, source_format, schema_version, step_marker, attribution, unattributed (activities no
--          step claimed), raw_events_path, warnings_json, path, ingested_at.
SELECT a.source_sha256, a.source_format, a.schema_version, a.step_marker, a.attribution, a.unattributed,
       a.raw_events_path, a.warnings_json, s.path, s.ingested_at
FROM anatomy_sources a
LEFT JOIN receipt_sources s ON s.receipt_id = a.receipt_id AND s.sha256 = a.source_sha256
WHERE a.receipt_id = $receipt_id
ORDER BY s.ingested_at DESC, a.source_sha256
