"""The RECEIPT line format, owned here: what receipts.capture and `receipts run` write and ingest/native.py reads.

A record is one line `RECEIPT {json}` with "v" (the record version) and "kind" (header | step | phase |
footer); docs/receipt-format.md describes the fields. Standard library only: the in-training recorder
imports this without polars, duckdb or the store.
"""

from __future__ import annotations

import json
from typing import Any

PREFIX = "RECEIPT "
RECORD_VERSION = 1            # what this build writes
SUPPORTED_VERSIONS = (1,)     # what this build reads
KINDS = ("header", "step", "phase", "footer")
LINE_PATTERN = r"RECEIPT (\{.*)$"  # a record anywhere on a line (a launcher may prefix its own rank tag)


def encode(record: dict[str, Any]) -> bytes:
    """One record as the bytes of one log line."""
    return (PREFIX + json.dumps(record, separators=(",", ":")) + "\n").encode("utf-8")
