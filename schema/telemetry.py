"""GPU telemetry of a run, one GpuTelemetry per rank (or GPU): what NVML said while the run ran (the summary
capture/telemetry.py writes into a RECEIPT footer's `telemetry`; docs/receipt-format.md).

Clocks in MHz, power in W, temperature in C, utilisation in percent: medians over the samples where the GPU was
busy. `throttle_share`: the share of those samples under each NVML clocks-event reason. ECC counts are the
errors the run added; `xids` the Xid codes NVML reported during it.

Standard library only: the model, not the analysis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The reasons that slow a busy GPU down (power or thermal capping, hardware slowdown); the others (idle,
# applications clocks, sync boost, display) say what it was set to, not that the infrastructure held it back.
SLOWING_REASONS = ("sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake")
MEDIANS = ("sm_clock_mhz", "mem_clock_mhz", "power_w", "power_limit_w", "temperature_c", "gpu_util_pct",
           "mem_util_pct")


@dataclass(frozen=True)
class GpuTelemetry:
    rank: int | None                 # the rank that ran on this GPU (a launcher's GPU: its local rank)
    gpu_index: int | None            # NVML's index on its host
    gpu_name: str | None
    pci_bus_id: str | None
    samples: int
    busy_samples: int
    interval_s: float | None
    sm_clock_mhz: float | None = None
    sm_clock_min_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    mem_clock_mhz: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: float | None = None
    gpu_util_pct: float | None = None
    mem_util_pct: float | None = None
    throttle_share: dict[str, float] = field(default_factory=dict)
    ecc_corrected_added: int | None = None
    ecc_uncorrected_added: int | None = None
    xids: tuple[int, ...] = ()

    @property
    def slowed_by(self) -> dict[str, float]:
        """The slowing reasons seen, with their share of busy samples."""
        return {k: v for k, v in self.throttle_share.items() if k in SLOWING_REASONS}


def _number(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"telemetry {name} must be a number or null, got {value!r}")
    return float(value)


def _count(value: Any, name: str, *, limit: int = 2**31) -> int | None:
    """A non-negative integer below `limit` (the column's: int32, or int64 for ECC counts), or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < limit:
        raise ValueError(f"telemetry {name} must be a non-negative integer below {limit:,} or null, got {value!r}")
    return value


def telemetry_of(footer: dict[str, Any]) -> tuple[GpuTelemetry, ...]:
    """A footer's `telemetry`, checked: () when absent; ValueError naming the key whose value is not what the
    format says. A rank's own footer (receipts.capture) gives its rank; the launcher's rankless footer gives each
    GPU its local rank (local rank i runs on the i-th GPU the job sees)."""
    record = footer.get("telemetry")
    if record is None:
        return ()
    if not isinstance(record, dict) or not isinstance(record.get("gpus"), list):
        raise ValueError("'telemetry' must be an object with a 'gpus' array")
    footer_rank = footer.get("rank")
    out = []
    for gpu in record["gpus"]:
        if not isinstance(gpu, dict) or not isinstance(gpu.get("summary"), dict):
            raise ValueError("each telemetry.gpus entry must be an object with a 'summary' object")
        s = gpu["summary"]
        rank = footer_rank if isinstance(footer_rank, int) else _count(gpu.get("local_rank"), "local_rank")
        shares = s.get("throttle_share") or {}
        if not isinstance(shares, dict) or not all(isinstance(v, (int, float)) for v in shares.values()):
            raise ValueError("telemetry throttle_share must be an object of shares")
        xids = s.get("xids") or []
        if not isinstance(xids, list) or not all(isinstance(x, int) for x in xids):
            raise ValueError("telemetry xids must be an array of integers")
        out.append(GpuTelemetry(
            rank=rank, gpu_index=_count(gpu.get("gpu_index"), "gpu_index"),
            gpu_name=gpu.get("name") if isinstance(gpu.get("name"), str) else None,
            pci_bus_id=gpu.get("pci_bus_id") if isinstance(gpu.get("pci_bus_id"), str) else None,
            samples=_count(s.get("samples"), "samples") or 0, busy_samples=_count(s.get("busy_samples"), "busy_samples") or 0,
            interval_s=_number(s.get("interval_s"), "interval_s"),
            sm_clock_min_mhz=_number(s.get("sm_clock_min_mhz"), "sm_clock_min_mhz"),
            sm_clock_max_mhz=_number(s.get("sm_clock_max_mhz"), "sm_clock_max_mhz"),
            **{name: _number(s.get(name), name) for name in MEDIANS},
            throttle_share={str(k): float(v) for k, v in shares.items()},
            ecc_corrected_added=_count(s.get("ecc_corrected_added"), "ecc_corrected_added", limit=2**63),
            ecc_uncorrected_added=_count(s.get("ecc_uncorrected_added"), "ecc_uncorrected_added", limit=2**63),
            xids=tuple(xids)))
    return tuple(out)
