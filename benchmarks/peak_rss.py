"""Peak RSS of this process, in MiB, for the benchmarks' measuring children.

VmHWM from /proc/self/status (Linux), which exec resets. Not getrusage's ru_maxrss: a child started by
fork + exec reports at least its parent's RSS at the fork (measured: a fresh `python -c` started by a
611 MiB parent said 611 MiB through ru_maxrss and 11 MiB through VmHWM), so a benchmark parent that had
grown would floor every child's figure at its own size. Elsewhere (macOS) ru_maxrss, in bytes there.
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path


def peak_rss_mib() -> float:
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024
