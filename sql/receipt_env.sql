-- The env overlay of one receipt, unset watched knobs included (is_set = false), secrets redacted.
-- Reads: receipt_env.  Params: $receipt_id.
-- Columns: name, value (null when unset or redacted), is_set, redacted.
SELECT name, value, is_set, redacted FROM receipt_env WHERE receipt_id = $receipt_id ORDER BY name
