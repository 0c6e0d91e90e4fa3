-- Every current receipt (or, with $all, every receipt) with its identity and steady-state headline,
-- newest first. Current = not superseded by a later ingest of the same run.
-- Reads: receipts, receipt_summaries (the stored steady-state summary), receipt_steps (only for receipts stored
--        before summaries existed, through run_medians).
-- Params: $all (bool: include superseded receipts), $unsummarised (VARCHAR[]: the receipts without a stored
--         summary, sql/unsummarised_receipts.sql). A list given as a value, not a subquery here: over a
--         subquery's list the macro's id range filter was checked on every step row, 0.05 s of a 0.08 s list
--         of 10,000 receipts with nothing to summarise (benchmarks/bench_gate.py).
-- Columns: id, run_name, lane_key (the canonical identity, schema/lane.py Lane.key), identity_complete (bool),
--          machine_class, source_format, tags_json,
--          n_steady_steps, median_step_ms (ms), peak_allocated_bytes, peak_reserved_bytes (bytes),
--          ended_early, started_at, ingested_at, superseded_by (id of the receipt that replaced it; null = current),
--          provenance_json (text: MLPerf's step_unit and time_to_train_ms, read by analysis.listing.series_headline).
SELECT r.id, r.run_name, r.lane_key, r.identity_complete, r.machine_class, r.source_format, r.tags_json,
       coalesce(s.n_steps, 0) AS n_steady_steps, s.median_step_ms,
       r.peak_allocated_bytes, r.peak_reserved_bytes, r.ended_early, r.started_at, r.ingested_at, r.superseded_by,
       r.provenance_json
FROM receipts r
     LEFT JOIN run_medians((SELECT list(id) FROM receipts WHERE $all OR superseded_by IS NULL),
                           CAST($unsummarised AS VARCHAR[])) s ON s.receipt_id = r.id
WHERE $all OR r.superseded_by IS NULL
ORDER BY r.ingested_at DESC, r.ingest_seq DESC, r.id
