-- One receipt's stored row, every column.
-- Reads: receipts.  Params: $receipt_id.
SELECT * FROM receipts WHERE id = $receipt_id
