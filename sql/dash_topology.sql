-- The GPU/NIC connection matrix of one receipt (`nvidia-smi topo -m`), one row per cell, health judged.
-- Seed 003: on a healthy H100/H200 node every GPU-GPU cell reads NV# (NV18); SYS, PHB or NODE between two
-- GPUs means that pair's traffic falls back onto PCIe / the CPU interconnect.
-- Reads: receipts.topology_json ({"devices": [...], "matrix": {row: {col: cell}}}).  Params: $receipt_id.
-- Columns: row_device, col_device (text, e.g. GPU0 / NIC0), cell (text: X, NV18, SYS, PHB, NODE, PIX, PXB),
--          gpu_pair (bool: both ends are GPUs), unhealthy (bool: a GPU pair not on NVLink).
WITH t AS (SELECT CAST(topology_json AS JSON) AS j FROM receipts WHERE id = $receipt_id),
rows_ AS (SELECT unnest(json_keys(j -> 'matrix')) AS row_device, j FROM t),
cells AS (
    SELECT row_device, unnest(json_keys(j -> 'matrix' -> row_device)) AS col_device, j FROM rows_
)
SELECT row_device, col_device,
       json_extract_string(j -> 'matrix' -> row_device, '$."' || col_device || '"') AS cell,
       starts_with(row_device, 'GPU') AND starts_with(col_device, 'GPU') AS gpu_pair,
       gpu_pair AND row_device <> col_device AND NOT starts_with(coalesce(cell, ''), 'NV') AS unhealthy
FROM cells
ORDER BY row_device, col_device
