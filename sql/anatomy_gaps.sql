-- Every long GPU gap of one attached export's steps, where it lies (ingest/gap_places.py).
-- Reads: anatomy_gaps.  Params: $receipt_id, $source_sha256.
-- Columns: rank, step, after (the kernel or copy the gap follows; null: none), call (which call of it in the step,
--          from 1), gap_ms.
SELECT rank, step, after, call, gap_ms
FROM anatomy_gaps
WHERE receipt_id = $receipt_id AND source_sha256 = $source_sha256
ORDER BY rank NULLS FIRST, step NULLS FIRST, call, after
