-- Memory per step of one receipt: torch allocated vs reserved, and the gap the caching allocator holds.
-- Reserved minus allocated is memory held but not in tensors: cached blocks and fragmentation (seed 004:
-- leave headroom for allocator scars; the gap is where they show).
-- Reads: receipt_steps.  Params: $receipt_id.
-- Columns: step, allocated_bytes, reserved_bytes, gap_bytes (bytes; the rank with the most reserved memory),
--          warmup (bool: inside the warm-up / compile window).
SELECT step,
       arg_max(allocated_bytes, reserved_bytes) AS allocated_bytes,
       max(reserved_bytes) AS reserved_bytes,
       max(reserved_bytes) - arg_max(allocated_bytes, reserved_bytes) AS gap_bytes,
       bool_or(warmup) AS warmup
FROM receipt_steps
WHERE receipt_id = $receipt_id AND allocated_bytes IS NOT NULL AND reserved_bytes IS NOT NULL
GROUP BY step
ORDER BY step
