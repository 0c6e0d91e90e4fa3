"""Make a PyTorch profiler (Kineto) trace small enough to keep, without changing what receipts reads.

    python3 tests/gpu/trim_kineto_trace.py rank0.pt.trace.json.gz ...   (in place; standard library only: runs on
                                                                        the device)

The ingest (ingest/kineto_trace.py) keeps GPU activities (kernel, gpu_memcpy, gpu_memset), the runtime and driver
calls that launched them (by correlation id), user annotations and the ProfilerStep#N step markers. This drops
what it never reads and what makes most of a trace's bytes: every cpu_op but the ProfilerStep#N markers, Python
function events, flow events (ac2g) and GPU-side copies of the annotations (gpu_user_annotation), and the runtime
and driver calls whose correlation id no GPU activity carries (event records, synchronisations, queries), as
trim_nsys_export.py does for an nsys export. Metadata events and the top-level keys stay. Prints the event counts
and sizes before and after.
"""

from __future__ import annotations

import gzip
import json
import os
import sys

GPU = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
LAUNCH = {"cuda_runtime", "cuda_driver", "Runtime"}
DROPPED = {"python_function", "ac2g", "gpu_user_annotation"}


def _correlation(event: dict) -> object:
    args = event.get("args") or {}
    return args.get("correlation", args.get("correlation id"))


def keep(event: dict, launched: set) -> bool:
    cat = event.get("cat")
    if event.get("ph") == "M" or cat is None:
        return True
    if cat in DROPPED:
        return False
    if cat in ("cpu_op", "Operator"):
        return str(event.get("name", "")).startswith("ProfilerStep")
    if cat in LAUNCH:
        return _correlation(event) in launched
    return True


def trim(path: str) -> None:
    size = os.path.getsize(path)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    events = doc.get("traceEvents") or []
    launched = {_correlation(e) for e in events if e.get("cat") in GPU} - {None}
    kept = [e for e in events if keep(e, launched)]
    doc["traceEvents"] = kept
    with opener(path, "wt") as f:
        json.dump(doc, f, separators=(",", ":"))
    print(f"trimmed {path}: {len(events)} -> {len(kept)} events; {size} -> {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        trim(arg)
