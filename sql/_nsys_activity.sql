-- GPU activity of an Nsight Systems export with the start of its launching runtime call: the one pass
-- over the large tables (kernel, memcpy, memset, graph replays joined to the runtime calls).
-- Reads (a WITH clause that ingest/nsys.py puts before this text, from the export's own column names):
--   _gpu(pid_key, device_id, stream_id, corr_id, start_ns, end_ns, kind, name_id, short_id, copy_kind, in_graph)
--                                              kind: 0 kernel, 1 memcpy, 2 memset, 3 graph (one CUDA-graph
--                                              replay of GRAPH_TRACE, whose correlation id is its
--                                              cudaGraphLaunch call's); in_graph: a kernel row that ran
--                                              inside a graph (--cuda-graph-trace=node)
--   _rt(pid_key, corr_id, launch_ns, calls)    CUPTI_ACTIVITY_KIND_RUNTIME, one row per (process, correlation
--                                              id): the earliest call, and how many calls carried that id
-- The step (NVTX range open at launch_ns) and the category are assigned in ingest/nsys.py over these
-- columns (a binary search per activity, a dict per distinct name): an ASOF join here sorted every row.
-- Columns: pid_key (globalPid), device_id, stream_id, kind, name_id / short_id (StringIds ids of the
--          kernel's demangled / short name, NULL for other kinds), copy_kind (memcpy only), in_graph,
--          start_ns, end_ns (GPU clock, ns), launch_ns (runtime call start, ns; NULL when the call was not
--          captured), repeated (the number of (process, correlation id) pairs of the runtime table with
--          more than one call; the same value on every row).
SELECT g.pid_key, g.device_id, g.stream_id, g.kind, g.name_id, g.short_id, g.copy_kind, g.in_graph,
       g.start_ns, g.end_ns,
       r.launch_ns,  -- _rt is unique on (pid_key, corr_id): at most one match, a linear hash join
       (SELECT count(*) FROM _rt WHERE calls > 1) AS repeated
FROM _gpu AS g
LEFT JOIN _rt AS r ON r.pid_key = g.pid_key AND r.corr_id = g.corr_id
