-- Per (rank, step): marker wall time, GPU busy time, communication and its overlap with compute.
-- Reads: anatomy_steps.  Params: $receipt_id, $source_sha256.
-- Columns: rank, step, wall_ms (ms, step marker), gpu_ms (ms, union of GPU work), kernels (count of kernels, not memcpy/memset),
--          comm_ms (ms, union of NCCL), overlap_pct (% of comm hidden under compute), warmup (bool),
--          start_ns (the marker's start on the trace's clock: the time between steps).
SELECT rank, step, wall_ms, gpu_ms, kernels, comm_ms, overlap_pct, warmup, start_ns
FROM anatomy_steps
WHERE receipt_id = $receipt_id AND source_sha256 = $source_sha256
ORDER BY rank NULLS FIRST, step NULLS FIRST
