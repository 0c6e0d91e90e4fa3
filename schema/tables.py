"""Table definitions (SQLAlchemy Core): one definition for DuckDB and PostgreSQL.

DDL is compiled with the PostgreSQL dialect; DuckDB accepts it as is. JSON payloads are TEXT so
both engines and every sql/ query read them the same way. Units live in column names.
"""

from __future__ import annotations

from sqlalchemy import (BigInteger, Boolean, Column, Double, Index, Integer, MetaData, PrimaryKeyConstraint, Table, Text,
                        UniqueConstraint)
from sqlalchemy.dialects import postgresql
from sqlalchemy.schema import CreateIndex, CreateTable

from receipts.schema.version import IDENTITY_FIELDS, SCHEMA_VERSION

__all__ = ["BULK_TABLES", "IDENTITY_FIELDS", "SCHEMA_VERSION", "ddl_statements", "metadata"]

metadata = MetaData()

schema_meta = Table(
    "schema_meta", metadata,
    Column("key", Text, primary_key=True),
    Column("value", Text, nullable=False),
)

receipts = Table(
    "receipts", metadata,
    Column("id", Text, primary_key=True),                 # first 16 hex of content_sha256
    Column("content_sha256", Text, nullable=False),       # sha256 of the primary source file
    Column("run_name", Text, nullable=False),
    Column("source_format", Text, nullable=False),
    Column("format_version", Text),
    Column("ingested_at", Text, nullable=False),          # ISO-8601 UTC
    Column("started_at", Text),                           # when the run says it started
    Column("hostname", Text),
    Column("raw_host_lineage", Text),
    Column("host_lineage", Text),
    Column("raw_preset", Text),
    Column("preset_family", Text),
    Column("raw_regime", Text),
    Column("launch_regime", Text),
    Column("engine", Text),
    Column("compile_mode", Text),
    Column("parallel_json", Text),                        # {"tp": 2, ...}
    Column("identity_complete", Boolean, nullable=False),
    Column("resolution_json", Text),                      # alias-resolution notes, in order
    Column("machine_class", Text),                        # e.g. H200:8
    Column("gpu_model", Text),
    Column("gpu_count", Integer),
    Column("world_size", Integer),                        # ranks in the job
    Column("ranks_traced", Integer),                      # ranks a profile holds (null for a log)
    Column("gpus_on_host", Integer),                      # CUDA devices the host listed
    Column("window_first_step", BigInteger),
    Column("window_last_step", BigInteger),
    Column("warmup_steps", Integer, nullable=False),
    Column("warmup_last_step", BigInteger),
    Column("window_rule", Text, nullable=False),
    Column("ended_early", Text),                          # why the log looks cut short; null = complete
    Column("peak_allocated_bytes", BigInteger),
    Column("peak_reserved_bytes", BigInteger),
    Column("tags_json", Text, nullable=False),
    Column("features_json", Text, nullable=False),
    Column("software_json", Text, nullable=False),
    Column("topology_json", Text, nullable=False),
    Column("provenance_json", Text, nullable=False),
    Column("phases_json", Text, nullable=False),
    Column("warnings_json", Text, nullable=False),
    Column("model_version", Integer, nullable=False),
    # v3: the identity lifecycle. A receipt is current while superseded_by is null; a later ingest of the
    # same run (a growing log, or a RECEIPT header with the same run key) sets it to the newer receipt's id.
    Column("superseded_by", Text),
    Column("run_key", Text),                              # the run a RECEIPT header names; null for other formats
    # v11: run order and log families (store/migrations/v0011_run_order.py)
    Column("ingest_seq", BigInteger),                     # the store's write count: ties of ingested_at in write order
    Column("log_head_sha256", Text),                      # sha256 of a log's first 256 bytes: its byte-prefix family
    Column("lane_key", Text),                             # v14: schema/lane.py Lane.key, what the lane queries match
    UniqueConstraint("content_sha256", name="uq_receipts_content"),
)

receipt_steps = Table(
    "receipt_steps", metadata,
    Column("receipt_id", Text, nullable=False),
    Column("step", BigInteger, nullable=False),
    Column("rank", Integer),
    Column("step_ms", Double),
    Column("tokens_per_s", Double),
    Column("loss", Double),
    Column("mfu_pct", Double),
    Column("allocated_bytes", BigInteger),
    Column("reserved_bytes", BigInteger),
    Column("line", BigInteger),
    Column("warmup", Boolean, nullable=False),
)

receipt_env = Table(
    "receipt_env", metadata,
    Column("receipt_id", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("value", Text),                                # null when unset or redacted
    Column("is_set", Boolean, nullable=False),
    Column("redacted", Boolean, nullable=False),
    PrimaryKeyConstraint("receipt_id", "name"),
)

receipt_memory = Table(
    "receipt_memory", metadata,
    Column("receipt_id", Text, nullable=False),
    Column("rank", Integer),
    Column("peak_allocated_bytes", BigInteger),
    Column("peak_reserved_bytes", BigInteger),
)

# v15: what NVML said while the run ran, one row per rank (or GPU) (schema/telemetry.py): medians over busy samples
receipt_telemetry = Table(
    "receipt_telemetry", metadata,
    Column("receipt_id", Text, nullable=False),
    Column("rank", Integer),
    Column("gpu_index", Integer),
    Column("gpu_name", Text),
    Column("pci_bus_id", Text),
    Column("samples", Integer, nullable=False),
    Column("busy_samples", Integer, nullable=False),
    Column("interval_s", Double),
    Column("sm_clock_mhz", Double),
    Column("sm_clock_min_mhz", Double),
    Column("sm_clock_max_mhz", Double),
    Column("mem_clock_mhz", Double),
    Column("power_w", Double),
    Column("power_limit_w", Double),
    Column("temperature_c", Double),
    Column("gpu_util_pct", Double),
    Column("mem_util_pct", Double),
    Column("throttle_json", Text, nullable=False),       # reason -> share of busy samples
    Column("ecc_corrected_added", BigInteger),
    Column("ecc_uncorrected_added", BigInteger),
    Column("xids_json", Text, nullable=False),           # the Xid codes seen
)

receipt_sources = Table(
    "receipt_sources", metadata,
    Column("receipt_id", Text, nullable=False),
    Column("sha256", Text, nullable=False),
    Column("path", Text, nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    Column("format", Text, nullable=False),
    Column("role", Text, nullable=False),
    Column("ingested_at", Text, nullable=False),
    Column("forced", Text),                               # v3: the contradiction `--attach --force` overrode
    PrimaryKeyConstraint("receipt_id", "sha256"),
)

# v3, append-only: one row per change of a receipt's claimed identity (`receipts retag`), with the values
# before and after, raw and canonical. Writers may INSERT here but never UPDATE or DELETE (docs/teams.md).
identity_history = Table(
    "identity_history", metadata,
    Column("receipt_id", Text, nullable=False),
    Column("seq", Integer, nullable=False),               # 1, 2, ... per receipt
    Column("changed_at", Text, nullable=False),           # ISO-8601 UTC
    Column("changed_by", Text, nullable=False),           # OS user (DuckDB) or current_user (PostgreSQL)
    Column("why", Text, nullable=False),
    *(Column(f"{age}_{name}", Boolean if name == "identity_complete" else Text)
      for age in ("old", "new") for name in IDENTITY_FIELDS),
    PrimaryKeyConstraint("receipt_id", "seq"),
)

receipt_summaries = Table(
    "receipt_summaries", metadata,
    Column("receipt_id", Text, nullable=False),
    Column("rule", Text, nullable=False),                 # analysis/summary.py RULE that made it
    Column("n_steady_steps", Integer, nullable=False),
    Column("median_step_ms", Double),                     # ms, steady state, a step = its slowest rank
    Column("summary_json", Text, nullable=False),         # Summary + RunInterval of step_ms and tokens_per_s
    PrimaryKeyConstraint("receipt_id"),
)

anatomy_rows = Table(
    "anatomy_rows", metadata,
    Column("receipt_id", Text, nullable=False),
    Column("source_sha256", Text, nullable=False),
    Column("rank", Integer),
    Column("step", BigInteger),                           # null = the whole profiled window
    Column("category", Text, nullable=False),
    Column("time_ms", Double, nullable=False),
    Column("warmup", Boolean, nullable=False),
)

anatomy_steps = Table(
    "anatomy_steps", metadata,
    Column("receipt_id", Text, nullable=False),
    Column("source_sha256", Text, nullable=False),
    Column("rank", Integer),
    Column("step", BigInteger),
    Column("start_ns", BigInteger),
    Column("wall_ms", Double),
    Column("gpu_ms", Double),
    Column("kernels", BigInteger),
    Column("comm_ms", Double),
    Column("overlap_pct", Double),
    Column("warmup", Boolean, nullable=False),
)

anatomy_nvtx = Table(
    "anatomy_nvtx", metadata,
    Column("receipt_id", Text, nullable=False),
    Column("source_sha256", Text, nullable=False),
    Column("rank", Integer),
    Column("range_name", Text, nullable=False),
    Column("count", BigInteger, nullable=False),
    Column("total_ms", Double, nullable=False),
    Column("gpu_ms", Double),
)

anatomy_kernels = Table(
    "anatomy_kernels", metadata,
    Column("receipt_id", Text, nullable=False),
    Column("source_sha256", Text, nullable=False),
    Column("rank", Integer),
    Column("category", Text, nullable=False),
    Column("name", Text, nullable=False),                 # kernel name as the export states it
    Column("calls", BigInteger, nullable=False),          # steady steps only (the receipt's window)
    Column("total_ms", Double, nullable=False),           # ms, sum of kernel durations (not a union)
    Column("steps", BigInteger, nullable=False),          # the rank's steady steps the totals are over
)

# v12: the longest kernels of each step of each rank (warm-up too), the rest in one row: a slow step's drill-down.
anatomy_step_kernels = Table(
    "anatomy_step_kernels", metadata,
    Column("receipt_id", Text, nullable=False),
    Column("source_sha256", Text, nullable=False),
    Column("rank", Integer),
    Column("step", BigInteger),
    Column("category", Text),                             # null on the '(other kernels)' row
    Column("name", Text, nullable=False),
    Column("calls", BigInteger, nullable=False),
    Column("time_ms", Double, nullable=False),            # ms, sum of the kernel's durations in the step
)

# v16: each kernel's calls by launch shape (grid and block), steady totals: evidence for `explain`'s pricing of added
# calls; a kernel whose profile records no shape has no rows.
anatomy_kernel_shapes = Table(
    "anatomy_kernel_shapes", metadata,
    Column("receipt_id", Text, nullable=False),
    Column("source_sha256", Text, nullable=False),
    Column("rank", Integer),
    Column("name", Text, nullable=False),                 # kernel name as the export states it (anatomy_kernels')
    Column("shape", Text, nullable=False),                # 'grid (2,66,1) block (384,1,1)' (ingest/launch_shape.py)
    Column("calls", BigInteger, nullable=False),          # steady steps only (the receipt's window)
    Column("total_ms", Double, nullable=False),           # ms, sum of the calls' durations
    Column("steps", BigInteger, nullable=False),          # the rank's steady steps the totals are over
)

# v17: every long GPU gap (0.5 ms or more) of each step, where it lies: after which call of which kernel or copy
# (ingest/gap_places.py); a step's gaps sum to its idle_long. What `explain`'s gap level is made of.
anatomy_gaps = Table(
    "anatomy_gaps", metadata,
    Column("receipt_id", Text, nullable=False),
    Column("source_sha256", Text, nullable=False),
    Column("rank", Integer),
    Column("step", BigInteger),
    Column("after", Text),                                # kernel name as the export states it, a copy's category
    Column("call", BigInteger, nullable=False),           # which call of it in the step, from 1 (0: none before)
    Column("gap_ms", Double, nullable=False),
)

anatomy_sources = Table(
    "anatomy_sources", metadata,
    Column("receipt_id", Text, nullable=False),
    Column("source_sha256", Text, nullable=False),
    Column("source_format", Text, nullable=False),
    Column("schema_version", Text),
    Column("step_marker", Text, nullable=False),
    Column("attribution", Text, nullable=False),
    Column("unattributed", BigInteger, nullable=False),
    Column("raw_events_path", Text),                      # Parquet beside the store, optional
    Column("warnings_json", Text, nullable=False),
    Column("stragglers_json", Text),                      # analysis/stragglers.py report; null = one rank
    # v13: the kernel-category rules the anatomy was made under (schema/categories.py CategoryRules: the shipped
    # kernel_categories.toml with ./receipts.toml's and --categories' rules before it); null: attached before v13
    Column("category_rules_version", Integer),            # the rules' format version (RULES_VERSION)
    Column("category_rules_sha256", Text),                # digest of the effective rules: equal digests, equal rules
    Column("category_rules_json", Text),                  # the rules themselves, [category, kind, pattern] in order
    PrimaryKeyConstraint("receipt_id", "source_sha256"),
)

# Per attached export, what the run spends per steady step in each component (analysis/components.py), computed
# when the export is stored: what `receipts explain` reads instead of every anatomy row of a lane's runs.
receipt_components = Table(
    "receipt_components", metadata,
    Column("receipt_id", Text, nullable=False),
    Column("source_sha256", Text, nullable=False),
    Column("rule", Text, nullable=False),                 # analysis/components.py RULE that made it
    Column("level", Text, nullable=False),                # 'category' | 'kernel' | 'nvtx' | 'rank'
    Column("name", Text, nullable=False),
    Column("category", Text),                             # a kernel's category; null for most other rows
    Column("ms_per_step", Double, nullable=False),        # ms per steady step
    Column("calls_per_step", Double),                     # kernel calls / NVTX ranges per rank-step
    Column("n_steps", BigInteger, nullable=False),        # steady steps the value is over
)

# v10, memory geometry by source (schema/memory.py): a receipt's capture (its own log), an attached snapshot or
# estimate. memory_sources is the guard: one row per source on a receipt.
memory_sources = Table(
    "memory_sources", metadata,
    Column("receipt_id", Text, nullable=False),
    Column("source_sha256", Text, nullable=False),
    Column("kind", Text, nullable=False),                 # capture | snapshot | estimate
    PrimaryKeyConstraint("receipt_id", "source_sha256"),
)

memory_ranks = Table(
    "memory_ranks", metadata,
    Column("receipt_id", Text, nullable=False),
    Column("source_sha256", Text, nullable=False),
    Column("rank", Integer),                              # null: a snapshot's device, or an estimate (any rank)
    Column("device", Integer),                            # CUDA device index, when the source says
    Column("peak_allocated_bytes", BigInteger),
    Column("peak_reserved_bytes", BigInteger),
    Column("resident_bytes", BigInteger),                 # what stays allocated between steps
    Column("fragmentation_at_peak_bytes", BigInteger),    # reserved - allocated at the allocated peak
    Column("device_total_bytes", BigInteger),             # the device's HBM
    Column("alloc_retries", BigInteger),                  # cudaMalloc retries after freeing the cache
    Column("ooms", BigInteger),
    Column("detail_json", Text, nullable=False),          # how it was measured; an estimate's inputs
    Column("warnings_json", Text, nullable=False),
)

memory_categories = Table(
    "memory_categories", metadata,
    Column("receipt_id", Text, nullable=False),
    Column("source_sha256", Text, nullable=False),
    Column("rank", Integer),
    Column("device", Integer),
    Column("category", Text, nullable=False),             # a bucket (capture, estimate) or category (snapshot)
    Column("bytes", BigInteger, nullable=False),
)

# PostgreSQL only: DuckDB finds a receipt's steps by its zone maps (each receipt's rows are written together),
# as fast with as without the ART index (1.0 vs 0.7 ms for one receipt, 91 vs 93 ms for 200, in a 6.9M-row
# store), and an ART index held the inserted keys in memory until commit: +490 MiB to ingest a 10M-step log.
Index("ix_receipt_steps_receipt", receipt_steps.c.receipt_id, info={"backends": ("postgresql",)})
Index("ix_receipt_memory_receipt", receipt_memory.c.receipt_id)
Index("ix_receipt_telemetry_receipt", receipt_telemetry.c.receipt_id)
Index("ix_anatomy_rows_receipt", anatomy_rows.c.receipt_id)
Index("ix_anatomy_steps_receipt", anatomy_steps.c.receipt_id)
Index("ix_anatomy_nvtx_receipt", anatomy_nvtx.c.receipt_id)
Index("ix_anatomy_kernels_receipt", anatomy_kernels.c.receipt_id)
Index("ix_anatomy_step_kernels_receipt", anatomy_step_kernels.c.receipt_id)
Index("ix_anatomy_kernel_shapes_receipt", anatomy_kernel_shapes.c.receipt_id)
Index("ix_anatomy_gaps_receipt", anatomy_gaps.c.receipt_id)
Index("ix_receipt_components_receipt", receipt_components.c.receipt_id)
Index("ix_memory_ranks_receipt", memory_ranks.c.receipt_id)
Index("ix_memory_categories_receipt", memory_categories.c.receipt_id)
Index("ix_receipts_run_name", receipts.c.run_name)
Index("ix_receipts_ingested_at", receipts.c.ingested_at)
Index("ix_receipts_run_key", receipts.c.run_key)
Index("ix_receipts_ingest_seq", receipts.c.ingest_seq)
Index("ix_receipts_log_head", receipts.c.log_head_sha256)
Index("ix_receipts_lane_key", receipts.c.lane_key)

BULK_TABLES = ("receipt_steps", "anatomy_rows", "anatomy_steps", "anatomy_nvtx", "anatomy_kernels",
               "anatomy_step_kernels", "anatomy_kernel_shapes", "anatomy_gaps")


def ddl_statements(backend: str) -> list[str]:
    """CREATE TABLE statements for `backend` ('duckdb' | 'postgresql'; PostgreSQL dialect, which DuckDB reads),
    without the indexes meant for the other backend (Index info 'backends')."""
    dialect = postgresql.dialect()
    out = []
    for table in metadata.sorted_tables:
        out.append(str(CreateTable(table, if_not_exists=True).compile(dialect=dialect)).strip())
        for index in table.indexes:
            if backend in index.info.get("backends", (backend,)):
                out.append(str(CreateIndex(index, if_not_exists=True).compile(dialect=dialect)).strip())
    return out
