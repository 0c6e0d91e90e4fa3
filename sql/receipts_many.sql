-- Stored rows of several receipts at once (the gate and lane history load hundreds).
-- Reads: receipts.  Params: $ids (list of receipt ids).
SELECT * FROM receipts WHERE list_contains($ids, id)
