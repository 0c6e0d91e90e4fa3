-- The runtime calls of an Nsight Systems export (CUPTI_ACTIVITY_KIND_RUNTIME, every CUDA API call the
-- capture traced), each with the process and correlation id a GPU activity names its launch by; streamed
-- to ingest/correlation.py, which keeps the earliest call per (process, correlation id).
-- Reads: nsys.CUPTI_ACTIVITY_KIND_RUNTIME (the attached export; columns checked by ingest/nsys_activity.py).
-- Columns: pid_key (globalTid with its thread bits cleared: the globalPid of the calling process),
--          corr_id (correlationId), launch_ns (the call's start, ns, CPU clock of the capture).
SELECT globalTid - (globalTid & 16777215) AS pid_key,  -- 16777215 = 0xFFFFFF, the thread id bits
       correlationId AS corr_id,
       start AS launch_ns
FROM nsys.CUPTI_ACTIVITY_KIND_RUNTIME
