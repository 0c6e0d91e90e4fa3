"""GPU telemetry beside a run: NVML (the `nvidia-ml-py` package, imported only when sampling starts) read
by a daemon thread at a low rate, never on a training step's path.

What each sample holds, per GPU: SM and memory clocks (MHz), power draw and the enforced limit (W),
temperature (C), GPU and memory-controller utilisation (%), the clocks-event (throttle) reasons bit mask,
the volatile ECC error counts, and the Xid critical errors NVML reported since the last sample. A run's
`summary` (the footer's `telemetry`, docs/receipt-format.md) is what a reader compares: medians over the
samples where the GPU was busy (an idle GPU parks its clocks, which says nothing about the run), the
share of busy samples under each throttle reason, the ECC errors the run added and the Xids it saw.

Standard library only apart from NVML: `receipts run` and the in-training Recorder both use it, on a
machine that may lack everything else; where NVML cannot be loaded or read, `start()` says why and
nothing is sampled.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# NVML's clocksEventReasons bits (nvml.h, nvmlClocksEventReason*). GpuIdle and the settings bits say what a
# GPU was told; the others are the infrastructure slowing a busy GPU down.
THROTTLE_REASONS = (
    (0x1, "gpu_idle"), (0x2, "applications_clocks"), (0x4, "sw_power_cap"), (0x8, "hw_slowdown"),
    (0x10, "sync_boost"), (0x20, "sw_thermal"), (0x40, "hw_thermal"), (0x80, "hw_power_brake"),
    (0x100, "display_clocks"),
)
# The columns of one sample (and of a series file): time since the sampler started, then the readings.
SAMPLE_FIELDS = ("t_s", "gpu_index", "sm_clock_mhz", "mem_clock_mhz", "power_w", "power_limit_w",
                 "temperature_c", "gpu_util_pct", "mem_util_pct", "throttle_mask", "ecc_corrected",
                 "ecc_uncorrected", "xid")
MEDIAN_FIELDS = ("sm_clock_mhz", "mem_clock_mhz", "power_w", "power_limit_w", "temperature_c",
                 "gpu_util_pct", "mem_util_pct")
BUSY_UTIL_PCT = 50  # a sample with the GPU busy at least this share of the interval counts as the run's
DEFAULT_INTERVAL_S = 1.0


def reasons_of(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_REASONS if mask & bit]


def summarise(samples: Sequence[dict[str, Any]], *, interval_s: float) -> dict[str, Any]:
    """One GPU's samples (dicts with SAMPLE_FIELDS) as its summary: the medians of MEDIAN_FIELDS over busy
    samples (all samples when none was busy, said by `busy_samples` 0), their min and max SM clock, the
    share of busy samples under each throttle reason seen, the ECC errors added over the run and the Xids."""
    busy = [s for s in samples if (s.get("gpu_util_pct") or 0) >= BUSY_UTIL_PCT]
    basis = busy or list(samples)
    out: dict[str, Any] = {"samples": len(samples), "busy_samples": len(busy), "interval_s": interval_s}
    for name in MEDIAN_FIELDS:
        values = [s[name] for s in basis if s.get(name) is not None]
        out[name] = round(statistics.median(values), 1) if values else None
    clocks = [s["sm_clock_mhz"] for s in basis if s.get("sm_clock_mhz") is not None]
    out["sm_clock_min_mhz"], out["sm_clock_max_mhz"] = (min(clocks), max(clocks)) if clocks else (None, None)
    shares: dict[str, float] = {}
    for _, name in THROTTLE_REASONS:
        hits = sum(1 for s in basis if s.get("throttle_mask") is not None and name in reasons_of(s["throttle_mask"]))
        if hits:
            shares[name] = round(hits / len(basis), 3)
    out["throttle_share"] = shares
    for name in ("ecc_corrected", "ecc_uncorrected"):
        values = [s[name] for s in samples if s.get(name) is not None]
        out[f"{name}_added"] = (values[-1] - values[0]) if values else None
    out["xids"] = sorted({x for s in samples for x in (s.get("xid") or ())})
    return out


@dataclass
class _Gpu:
    index: int
    handle: Any
    facts: dict[str, Any]
    samples: list[dict[str, Any]] = field(default_factory=list)


class TelemetrySampler:
    """`s = TelemetrySampler(devices=[0, 1]); s.start(); ...; record = s.stop()`.

    devices: NVML indices or PCI bus ids to sample, local rank i on the i-th (None: every GPU NVML sees, in
    its order). interval_s: seconds between samples.
    series_path: where to write every sample as CSV when the run asks for the series (None: summaries only).
    `start()` returns False and sets `unavailable` when NVML cannot be used; `stop()` then returns None."""

    def __init__(self, *, devices: Sequence[int | str] | None = None, interval_s: float = DEFAULT_INTERVAL_S,
                 series_path: Path | None = None) -> None:
        self.devices = None if devices is None else list(devices)
        self.interval_s = max(0.05, float(interval_s))
        self.series_path = series_path
        self.unavailable: str | None = None
        self._nvml: Any = None
        self._gpus: list[_Gpu] = []
        self._events: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0

    def start(self) -> bool:
        try:
            import pynvml  # optional: pip install 'gpu-receipts[capture]' (the nvidia-ml-py package)
        except ImportError:
            self.unavailable = "nvidia-ml-py is not installed"
            return False
        try:
            pynvml.nvmlInit()
            wanted = self.devices if self.devices is not None else range(pynvml.nvmlDeviceGetCount())
            for local_rank, device in enumerate(wanted):
                if isinstance(device, str):
                    handle = pynvml.nvmlDeviceGetHandleByPciBusId(device.encode("ascii"))
                    index = pynvml.nvmlDeviceGetIndex(handle)
                else:
                    handle, index = pynvml.nvmlDeviceGetHandleByIndex(device), device
                self._gpus.append(_Gpu(index, handle, {"local_rank": local_rank, **_facts(pynvml, handle)}))
        except Exception as exc:  # noqa: BLE001 - telemetry is never the reason a run fails
            self.unavailable = f"NVML: {exc}"
            return False
        if not self._gpus:
            self.unavailable = "NVML sees no GPU"
            return False
        self._nvml = pynvml
        self._events = _xid_events(pynvml, [g.handle for g in self._gpus])
        self._t0 = time.monotonic()
        self._sample()  # one reading before the work starts: the ECC counts the run's are measured from
        self._thread = threading.Thread(target=self._loop, name="receipts-telemetry", daemon=True)
        self._thread.start()
        return True

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._sample()
            except Exception:  # noqa: BLE001 - a reading that fails ends the series, never the run
                return

    def _sample(self) -> None:
        nvml = self._nvml
        xids = _drain_xids(nvml, self._events)
        t_s = round(time.monotonic() - self._t0, 3)
        for gpu in self._gpus:
            row: dict[str, Any] = {"t_s": t_s, "gpu_index": gpu.index}
            row.update(_read(nvml, gpu.handle))
            row["xid"] = xids.get(gpu.facts.get("uuid"), [])
            gpu.samples.append(row)

    def stop(self) -> dict[str, Any] | None:
        """Stop sampling; the record for a footer's `telemetry` (None when nothing was sampled)."""
        if self._nvml is None:
            return None
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 5)
        try:
            self._sample()  # the last reading: ECC and Xids up to the end of the run
        except Exception:  # noqa: BLE001 - the samples so far still make the summary
            pass
        if self.series_path is not None:
            write_series(self.series_path, [s for g in self._gpus for s in g.samples])
        gpus = [{**g.facts, "gpu_index": g.index, "summary": summarise(g.samples, interval_s=self.interval_s)}
                for g in self._gpus]
        try:
            if self._events is not None:
                self._nvml.nvmlEventSetFree(self._events)
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass  # nothing left to read: a shutdown that fails changes no reading
        self._nvml = None
        return {"source": "nvml", "interval_s": self.interval_s, "gpus": gpus}


def write_series(path: Path, samples: Sequence[dict[str, Any]]) -> None:
    """Every sample as CSV (SAMPLE_FIELDS; `xid` as codes joined by ';')."""
    lines = [",".join(SAMPLE_FIELDS)]
    for s in samples:
        cells = [";".join(map(str, s.get("xid") or ())) if k == "xid" else ("" if s.get(k) is None else str(s[k]))
                 for k in SAMPLE_FIELDS]
        lines.append(",".join(cells))
    Path(path).write_text("\n".join(lines) + "\n", encoding="ascii")


def read_series(path: Path) -> dict[int, list[dict[str, Any]]]:
    """A series file back as samples per GPU index (the inverse of write_series)."""
    rows = Path(path).read_text(encoding="ascii").splitlines()
    names = rows[0].split(",")
    out: dict[int, list[dict[str, Any]]] = {}
    for line in rows[1:]:
        cells = dict(zip(names, line.split(",")))
        sample: dict[str, Any] = {}
        for k, v in cells.items():
            if k == "xid":
                sample[k] = [int(x) for x in v.split(";") if x]
            elif v == "":
                sample[k] = None
            else:
                sample[k] = float(v) if k in ("t_s", "power_w", "power_limit_w") else int(v)
        out.setdefault(sample["gpu_index"], []).append(sample)
    return out


def _facts(nvml: Any, handle: Any) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    for key, read in (("name", nvml.nvmlDeviceGetName), ("uuid", nvml.nvmlDeviceGetUUID),
                      ("pci_bus_id", lambda h: nvml.nvmlDeviceGetPciInfo(h).busId)):
        try:
            value = read(handle)
        except nvml.NVMLError:
            continue
        facts[key] = value.decode() if isinstance(value, bytes) else value
    return facts


def _read(nvml: Any, handle: Any) -> dict[str, Any]:
    """One reading of every field; a field this GPU or driver does not support stays None."""
    def get(read, scale: float = 1.0):
        try:
            value = read()
        except nvml.NVMLError:
            return None
        return round(value / scale, 1) if scale != 1.0 else value

    util = get(lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
    reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    ecc = lambda kind: get(lambda: nvml.nvmlDeviceGetTotalEccErrors(handle, kind, nvml.NVML_VOLATILE_ECC))  # noqa: E731
    return {
        "sm_clock_mhz": get(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
        "mem_clock_mhz": get(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)),
        "power_w": get(lambda: nvml.nvmlDeviceGetPowerUsage(handle), 1000.0),
        "power_limit_w": get(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle), 1000.0),
        "temperature_c": get(lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
        "gpu_util_pct": None if util is None else util.gpu,
        "mem_util_pct": None if util is None else util.memory,
        "throttle_mask": get(lambda: int(reasons(handle))),
        "ecc_corrected": ecc(nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
        "ecc_uncorrected": ecc(nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
    }


def _xid_events(nvml: Any, handles: list) -> Any:
    """An NVML event set for Xid critical errors on these GPUs, or None where the driver refuses (many
    containers and vGPUs do): the run is sampled without Xids then."""
    try:
        events = nvml.nvmlEventSetCreate()
        for handle in handles:
            nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, events)
    except nvml.NVMLError:
        return None
    return events


def _drain_xids(nvml: Any, events: Any) -> dict[str | None, list[int]]:
    """The Xids waiting in the event set, by GPU UUID; never blocks (a 0 ms wait)."""
    found: dict[str | None, list[int]] = {}
    if events is None:
        return found
    while True:
        try:
            data = nvml.nvmlEventSetWait_v2(events, 0)
        except nvml.NVMLError:  # NVML_ERROR_TIMEOUT: nothing waiting
            return found
        try:
            uuid = nvml.nvmlDeviceGetUUID(data.device)
        except nvml.NVMLError:
            uuid = None
        found.setdefault(uuid.decode() if isinstance(uuid, bytes) else uuid, []).append(int(data.eventData))
