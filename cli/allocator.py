"""Freed memory goes back to the system at once in the command-line process: polars' allocator option, set at
start-up before polars loads (glibc's heap is trimmed where a parser asks: ingest/heap.py).

polars allocates through its own jemalloc, which it configures when it loads to keep freed pages for reuse
(dirty_decay_ms:500, muzzy_decay_ms:1000; pola-rs/polars#18088). An ingest runs phases that each peak in turn
(the parse, the window, the summary, the bulk write), with numpy and DuckDB allocating outside jemalloc in
between, so the pages polars freed in one phase stayed resident under the next: a 2M-step nanochat log's ingest
peaks at 295 MiB under polars' setting and at 245 MiB with freed pages returned at once, a 10M-step one at 596 and
340 MiB, for ~0.45 s more CPU in the parse of 2M lines (2.17 against 1.71 s: benchmarks/bench_log_ingest.py, with
and without --allocator polars). A shorter decay does not split the difference: 200 ms kept 274 and 435 MiB.
polars appends what _RJEM_MALLOC_CONF holds when it loads to its own options (later ones win), and reads it only
then; a value the user set wins, and child processes (rank workers, the dashboard's server) inherit it.
"""

from __future__ import annotations

import os
import sys

JEMALLOC_CONF = "dirty_decay_ms:0,muzzy_decay_ms:0"


def return_freed_memory_at_once() -> bool:
    """Set the option for polars' jemalloc, before polars loads; False when too late or already set."""
    if "polars" in sys.modules or "_RJEM_MALLOC_CONF" in os.environ:
        return False
    os.environ["_RJEM_MALLOC_CONF"] = JEMALLOC_CONF
    return True
