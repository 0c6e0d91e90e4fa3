-- The run names of the current receipts (not superseded), each once: what a mistyped reference is compared with.
-- Reads: receipts.  Params: none.
-- Columns: run_name.
SELECT DISTINCT run_name FROM receipts WHERE superseded_by IS NULL ORDER BY run_name
