-- The lineage tags of the current receipts (not superseded), each once with how many carry it: what a mistyped
-- tag is compared with.
-- Reads: receipts.  Params: none.
-- Columns: tag (text), n_receipts (count).
SELECT tag, count(*) AS n_receipts
FROM (SELECT unnest(receipt_tags(tags_json)) AS tag FROM receipts WHERE superseded_by IS NULL)
GROUP BY tag
ORDER BY tag
