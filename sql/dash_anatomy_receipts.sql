-- Current receipts that carry step-time anatomy (a profiler export attached), newest first.
-- Reads: anatomy_sources, receipts.
-- Columns: id, run_name, lane (text: 'host · preset · regime' or 'rumor'), n_exports (count).
SELECT r.id, r.run_name,
       lane_label(r.identity_complete, r.lane_key) AS lane,
       count(*) AS n_exports
FROM anatomy_sources a JOIN receipts r ON r.id = a.receipt_id
WHERE r.superseded_by IS NULL
GROUP BY ALL
ORDER BY max(r.ingested_at) DESC, r.id
