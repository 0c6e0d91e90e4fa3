-- GPU activity of an Nsight Systems export, each attributed to the step whose NVTX range was open
-- on ANY thread of the launching process when the launching runtime call started.
-- Reads (temp views made by ingest/nsys.py from the export's own column names):
--   _gpu(pid_key, device_id, stream_id, corr_id, start_ns, end_ns, kind, name_id, short_id, copy_kind)
--                                              kind 'graph': one CUDA-graph replay (GRAPH_TRACE), whose
--                                              correlation id is its cudaGraphLaunch call's
--   _rt(pid_key, corr_id, launch_ns, calls)    CUPTI_ACTIVITY_KIND_RUNTIME, one row per (process, correlation
--                                              id): the earliest call, and how many calls carried that id
--   _step_ranges(pid_key, step, range_start_ns, range_end_ns)
--   _kernel_cat(name_id, category)             categories from kernel_categories.toml (Python re)
--   _copy_cat(copy_kind, category)             memcpy_h2d / _d2h / _d2d / _p2p
-- Why any thread: FSDP / autograd launch backward and collectives from other threads than the
-- one that pushed `step N` (FORMATS.md: same-thread matching finds < 1/3 of the kernels).
-- Columns: pid_key (globalPid), device_id, stream_id, kind ('kernel'|'memcpy'|'memset'|'graph'),
--          name_id / short_id (StringIds ids of the kernel's demangled / short name, NULL for
--          memcpy and memset), category,
--          start_ns, end_ns (GPU clock, ns), launch_ns (runtime call start, ns; NULL when the
--          call was not captured), step (NULL = no step range claimed it).
WITH launched AS (
    SELECT g.*, r.launch_ns  -- _rt is unique on (pid_key, corr_id): at most one match, a linear hash join
    FROM _gpu AS g
    LEFT JOIN _rt AS r ON r.pid_key = g.pid_key AND r.corr_id = g.corr_id
)
SELECT l.pid_key, l.device_id, l.stream_id, l.kind, l.name_id, l.short_id,
       CASE l.kind
           WHEN 'kernel' THEN coalesce(kc.category, 'other')
           WHEN 'memset' THEN 'memset'
           WHEN 'graph' THEN 'cuda_graph'
           ELSE coalesce(cc.category, 'other')
       END AS category,
       l.start_ns, l.end_ns, l.launch_ns,
       -- ASOF picks the latest step range that started at or before the launch; it only claims
       -- the activity if that range was still open (end exclusive).
       CASE WHEN l.launch_ns < s.range_end_ns THEN s.step END AS step
FROM launched AS l
ASOF LEFT JOIN _step_ranges AS s
    ON s.pid_key = l.pid_key AND l.launch_ns >= s.range_start_ns
LEFT JOIN _kernel_cat AS kc ON kc.name_id = l.name_id
LEFT JOIN _copy_cat AS cc ON cc.copy_kind = l.copy_kind
