-- Receipts without a stored steady-state summary (stored before schema 6, and not re-summarised since):
-- the ones list_receipts summarises from their steps, passed to it as $unsummarised.
-- Reads: receipts, receipt_summaries.
-- Columns: id.
SELECT r.id FROM receipts r
WHERE NOT EXISTS (SELECT 1 FROM receipt_summaries m WHERE m.receipt_id = r.id)
ORDER BY r.id
