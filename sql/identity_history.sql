-- One receipt's identity changes (`receipts retag`), oldest first: who, when, why, and the identity
-- before and after each change.
-- Reads: identity_history.  Params: $receipt_id.
-- Columns: seq (1, 2, ...), changed_at (ISO-8601 UTC), changed_by (OS user or PostgreSQL role), why,
--          old_/new_ run_name, tags_json, raw_host_lineage, host_lineage, raw_preset, preset_family,
--          raw_regime, launch_regime (text), identity_complete (bool).
SELECT seq, changed_at, changed_by, why,
       old_run_name, new_run_name, old_tags_json, new_tags_json,
       old_raw_host_lineage, new_raw_host_lineage, old_host_lineage, new_host_lineage,
       old_raw_preset, new_raw_preset, old_preset_family, new_preset_family,
       old_raw_regime, new_raw_regime, old_launch_regime, new_launch_regime,
       old_identity_complete, new_identity_complete
FROM identity_history
WHERE receipt_id = $receipt_id
ORDER BY seq
