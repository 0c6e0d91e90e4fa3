-- The GPU telemetry of several receipts: what NVML said while each run ran, one row per rank (or GPU).
-- Reads: receipt_telemetry.  Params: $ids (list of receipt ids).
-- Rows: by receipt, then rank (a GPU without a rank last), then NVML index.
-- Columns: receipt_id, rank, gpu_index, gpu_name, pci_bus_id, samples, busy_samples (counts), interval_s (s),
--          sm_clock_mhz, sm_clock_min_mhz, sm_clock_max_mhz, mem_clock_mhz (MHz), power_w, power_limit_w (W),
--          temperature_c (C), gpu_util_pct, mem_util_pct (percent): medians over busy samples;
--          throttle_json (reason -> share of busy samples), ecc_corrected_added, ecc_uncorrected_added (counts),
--          xids_json (the Xid codes seen).
SELECT receipt_id, rank, gpu_index, gpu_name, pci_bus_id, samples, busy_samples, interval_s, sm_clock_mhz,
       sm_clock_min_mhz, sm_clock_max_mhz, mem_clock_mhz, power_w, power_limit_w, temperature_c, gpu_util_pct,
       mem_util_pct, throttle_json, ecc_corrected_added, ecc_uncorrected_added, xids_json
FROM receipt_telemetry
WHERE list_contains($ids, receipt_id)
ORDER BY receipt_id, rank NULLS LAST, gpu_index
