-- GPU activity of an Nsight Systems export: the one pass over the activity tables (kernel, memcpy, memset,
-- graph replays), streamed to ingest/nsys_activity.py in record batches. No join here: each batch gets the start of
-- its launching runtime call from ingest/correlation.py (sorted correlation ids per process, built from
-- sql/_nsys_launches.sql), then its step (the NVTX range open at that start) and its category, as it arrives.
-- Reads (a WITH clause that ingest/nsys_activity.py puts before this text, from the export's own column names):
--   _gpu(pid_key, device_id, stream_id, corr_id, start_ns, end_ns, kind, name_id, short_id, copy_kind, in_graph,
--        grid_x, grid_y, grid_z, block_x, block_y, block_z)
--                                              kind: 0 kernel, 1 memcpy, 2 memset, 3 graph (one CUDA-graph
--                                              replay of GRAPH_TRACE, whose correlation id is its
--                                              cudaGraphLaunch call's); in_graph: a kernel row that ran
--                                              inside a graph (--cuda-graph-trace=node)
-- Columns: pid_key (globalPid), device_id, stream_id (NULL without --keep-raw), corr_id (correlationId),
--          kind, name_id / short_id (StringIds ids of the kernel's demangled / short name, NULL for other
--          kinds; short_id NULL without --keep-raw), copy_kind (memcpy only), in_graph,
--          start_ns, end_ns (GPU clock, ns), grid_x .. block_z (a kernel's launch shape, gridX .. blockZ; NULL for
--          other kinds and where the export has none).
SELECT pid_key, device_id, stream_id, corr_id, kind, name_id, short_id, copy_kind, in_graph, start_ns, end_ns,
       grid_x, grid_y, grid_z, block_x, block_y, block_z
FROM _gpu
