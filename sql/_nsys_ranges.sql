-- NVTX ranges of an Nsight Systems export, named and timed the way `nsys stats --report nvtx_sum`
-- does: push/pop (eventType 59) AND start/end (60) ranges, plus their NVTX-text forms (70, 71);
-- an unclosed range ends at the last NVTX timestamp; the name is 'domain:text' when the range's
-- domain was registered (eventType 75) in the same process, else the text alone.
-- A range whose end comes before its start, or with a start or end 2^62 ns or more from the capture's
-- start (nsys writes neither: a damaged export), is zero length at its start, as GPU activity is
-- (ingest/nsys_activity.py); such times set no unclosed range's end.
-- Reads: _nvtx(pid_key, event_type, start_ns, end_ns, domain_id, text)  (temp view, ingest/nsys_activity.py)
-- Columns: pid_key (globalPid of the thread that opened the range), text (the range's own text),
--          range_name (as nvtx_sum shows it), start_ns, end_ns (ns), duration_ns (ns),
--          damaged (the range was made zero length).
WITH timed AS (
    SELECT *,
           start_ns > -4611686018427387904 AND start_ns < 4611686018427387904
           AND (end_ns IS NULL OR (end_ns > -4611686018427387904 AND end_ns < 4611686018427387904)) AS near
    FROM _nvtx
),
domains AS (
    SELECT pid_key, domain_id, min(text) AS domain_name
    FROM _nvtx
    WHERE event_type = 75
    GROUP BY ALL
),
maxts AS (
    SELECT greatest(max(start_ns), max(end_ns)) AS m FROM timed WHERE near
),
closed AS (
    SELECT n.*, coalesce(n.end_ns, (SELECT m FROM maxts)) AS closed_end_ns
    FROM timed AS n
    WHERE n.event_type IN (59, 60, 70, 71)
)
SELECT n.pid_key,
       coalesce(n.text, '') AS text,
       CASE WHEN d.domain_name IS NOT NULL THEN d.domain_name || ':' || coalesce(n.text, '')
            ELSE coalesce(n.text, '') END AS range_name,
       n.start_ns,
       CASE WHEN n.near AND n.closed_end_ns >= n.start_ns THEN n.closed_end_ns ELSE n.start_ns END AS end_ns,
       CASE WHEN n.near AND n.closed_end_ns >= n.start_ns THEN n.closed_end_ns - n.start_ns ELSE 0 END AS duration_ns,
       NOT coalesce(n.near AND n.closed_end_ns >= n.start_ns, false) AS damaged
FROM closed AS n
LEFT JOIN domains AS d ON d.pid_key = n.pid_key AND d.domain_id = n.domain_id
