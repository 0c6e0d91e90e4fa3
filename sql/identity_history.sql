-- One receipt's identity changes (`receipts retag`), oldest first: who, when, why, and the identity
-- before and after each change.
-- Reads: identity_history.  Params: $receipt_id.
-- Columns: seq (1, 2, ...), changed_at (ISO-8601 UTC), changed_by (OS user or PostgreSQL role), why, and
--          old_<field> / new_<field> for each field schema/version.py IDENTITY_FIELDS names (run name, tags, each
--          identity field raw and canonical: text; identity_complete: bool).
SELECT seq, changed_at, changed_by, why, COLUMNS('^(old|new)_')
FROM identity_history
WHERE receipt_id = $receipt_id
ORDER BY seq
