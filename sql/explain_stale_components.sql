-- Attached exports with steady steps but no component rows under this build's rule (attached before
-- receipt_components existed, or under another analysis/components.py RULE): what `receipts db upgrade` computes.
-- Reads: anatomy_sources, anatomy_steps, receipt_components.  Params: $rule (text: the current RULE).
-- Columns: receipt_id, source_sha256.
SELECT a.receipt_id, a.source_sha256
FROM anatomy_sources a
WHERE NOT EXISTS (SELECT 1 FROM receipt_components c
                  WHERE c.receipt_id = a.receipt_id AND c.source_sha256 = a.source_sha256 AND c.rule = $rule)
  AND EXISTS (SELECT 1 FROM anatomy_steps t
              WHERE t.receipt_id = a.receipt_id AND t.source_sha256 = a.source_sha256
                AND t.step IS NOT NULL AND NOT t.warmup)
ORDER BY a.receipt_id, a.source_sha256
