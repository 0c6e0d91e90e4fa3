-- One receipt's stored row, every column.
-- Reads: receipts.  Params: $receipt_id.
-- Columns: every column of receipts (schema/tables.py), one row.
SELECT * FROM receipts WHERE id = $receipt_id
