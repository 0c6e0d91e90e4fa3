-- Receipts whose stored steady-state summary is missing (stored before schema 6) or was made under another
-- rule than this build's (analysis/summary.py RULE): what `receipts db upgrade` re-summarises.
-- Reads: receipts, receipt_summaries.  Params: $rule (text: the current RULE).
-- Columns: receipt_id, stored_rule (text, null = no summary).
SELECT r.id AS receipt_id, m.rule AS stored_rule
FROM receipts r LEFT JOIN receipt_summaries m ON m.receipt_id = r.id
WHERE m.rule IS NULL OR m.rule <> $rule
ORDER BY r.id
