"""Make an nsys SQLite export small enough to keep in the repository, without changing what receipts reads.

    python3 tests/gpu/trim_nsys_export.py profile.sqlite     (in place; standard library only: runs on the device)

Drops (1) the runtime calls (CUPTI_ACTIVITY_KIND_RUNTIME) whose correlationId no kernel, memcpy or memset
names: the ingest reads runtime calls only to find the launch of a GPU activity (sql/_nsys_launches.sql), and
an FSDP2 step makes several times more runtime calls (event records, synchronisations, queries) than launches;
(2) the tables the ingest never reads and that are large: CUPTI_ACTIVITY_KIND_SYNCHRONIZATION and
CUPTI_ACTIVITY_KIND_CUDA_EVENT. Then VACUUM. Prints the row counts before and after.
"""

from __future__ import annotations

import os
import sqlite3
import sys

RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
ACTIVITY = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
UNREAD = ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_CUDA_EVENT")


def trim(path: str) -> None:
    size = os.path.getsize(path)
    con = sqlite3.connect(path)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    before = con.execute(f"SELECT count(*) FROM {RUNTIME}").fetchone()[0] if RUNTIME in tables else 0
    if RUNTIME in tables:
        launched = " UNION ".join(f"SELECT correlationId FROM {t}" for t in ACTIVITY if t in tables)
        con.execute(f"DELETE FROM {RUNTIME} WHERE correlationId NOT IN ({launched or 'SELECT NULL'})")
    for table in UNREAD:
        if table in tables:
            con.execute(f"DROP TABLE {table}")
    con.commit()
    after = con.execute(f"SELECT count(*) FROM {RUNTIME}").fetchone()[0] if RUNTIME in tables else 0
    con.execute("VACUUM")
    con.close()
    print(f"trimmed {path}: {RUNTIME} {before} -> {after} rows; dropped {', '.join(t for t in UNREAD if t in tables)}; "
          f"{size} -> {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        trim(arg)
