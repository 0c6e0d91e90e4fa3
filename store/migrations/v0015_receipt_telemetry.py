"""0015: GPU telemetry per rank (or GPU) of a receipt: what NVML said while the run ran.

receipt_telemetry: medians over the busy samples of SM and memory clocks, power and its limit, temperature and
utilisation, the share of busy samples under each clocks-event (throttle) reason, the ECC errors the run added and
its Xid codes (schema/telemetry.py). Receipts stored before this revision have none: their logs carried no
telemetry, so there is nothing for `receipts db upgrade` to fill in.
"""

from __future__ import annotations

import sqlalchemy as sa

VERSION = 15
DESCRIPTION = "receipt_telemetry: GPU clocks, power, temperature, throttle reasons, ECC and Xids per rank"


def upgrade(op) -> None:
    op.create_table(
        "receipt_telemetry",
        sa.Column("receipt_id", sa.Text(), nullable=False),
        sa.Column("rank", sa.Integer()),
        sa.Column("gpu_index", sa.Integer()),
        sa.Column("gpu_name", sa.Text()),
        sa.Column("pci_bus_id", sa.Text()),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("busy_samples", sa.Integer(), nullable=False),
        sa.Column("interval_s", sa.Double()),
        sa.Column("sm_clock_mhz", sa.Double()),
        sa.Column("sm_clock_min_mhz", sa.Double()),
        sa.Column("sm_clock_max_mhz", sa.Double()),
        sa.Column("mem_clock_mhz", sa.Double()),
        sa.Column("power_w", sa.Double()),
        sa.Column("power_limit_w", sa.Double()),
        sa.Column("temperature_c", sa.Double()),
        sa.Column("gpu_util_pct", sa.Double()),
        sa.Column("mem_util_pct", sa.Double()),
        sa.Column("throttle_json", sa.Text(), nullable=False),
        sa.Column("ecc_corrected_added", sa.BigInteger()),
        sa.Column("ecc_uncorrected_added", sa.BigInteger()),
        sa.Column("xids_json", sa.Text(), nullable=False),
    )
    op.create_index("ix_receipt_telemetry_receipt", "receipt_telemetry", ["receipt_id"])
