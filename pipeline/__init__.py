"""Orchestration: what the named paths hold (targets), which parser reads each and how its ranks are read
(parse, execution), and the ingest into a store (ingest). The CLI, `receipts run` and `receipts push` go
through the names below."""

from receipts.pipeline.ingest import IngestOutcome, build_receipt, ingest_each, ingest_paths, read_sidecar
from receipts.pipeline.parse import parse_log, parse_profile
from receipts.pipeline.targets import IngestFailure, ingest_targets

__all__ = ["IngestFailure", "IngestOutcome", "build_receipt", "ingest_each", "ingest_paths", "ingest_targets",
           "parse_log", "parse_profile", "read_sidecar"]
