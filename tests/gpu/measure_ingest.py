"""Peak RSS and time of receipts' snapshot reader on one file (tests/gpu/memory_fit.sh runs it on the GPU machine,
where the snapshot is made; it cannot travel): `memory_snapshot.parse`, standard library only, one process.

    python3 tests/gpu/measure_ingest.py SNAPSHOT
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

from receipts.ingest import memory_snapshot


def main() -> None:
    path = sys.argv[1]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    (g,) = memory_snapshot.parse(path)
    seconds = time.perf_counter() - t0
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss   # Linux: KiB
    print("INGEST " + json.dumps({
        "path": path, "bytes": os.path.getsize(path), "seconds": round(seconds, 1),
        "peak_rss_mib": round(peak_kib / 1024, 1), "rss_before_parse_mib": round(before / 1024, 1),
        "trace_events": g.detail.get("trace_events"), "peak_allocated_bytes": g.peak_allocated_bytes,
        "peak_reserved_bytes": g.peak_reserved_bytes, "categories": dict(g.categories),
        "warnings": list(g.warnings)}), flush=True)


if __name__ == "__main__":
    main()
