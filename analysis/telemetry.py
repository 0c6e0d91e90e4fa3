"""GPU telemetry as an infrastructure cause: what NVML said while two runs ran, and whether it explains them.

A uniformly slower run whose GPUs held lower SM clocks (a power cap, thermal throttling, another tenant's
application clocks) is "nothing changed but it's slower": the code, the kernels and their counts are the same,
every kernel is slower by about the clock ratio. This module reads the stored per-rank summaries
(schema/telemetry.py), says how two runs' telemetry differs (infrastructure drift in `compare`), and judges
whether a set of kernel slowdowns is the clock ratio (`explain`).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from receipts.schema.telemetry import MEDIANS, SLOWING_REASONS, GpuTelemetry

if TYPE_CHECKING:
    from receipts.store.base import Store

# A median SM clock that moved by more than this fraction between two runs is a drift worth naming: GPU Boost
# moves a busy H200's clock by a few percent with temperature and power alone (tests/data/telemetry: 1455-1815 MHz
# within one run under its power cap, median 1680).
CLOCK_DRIFT = 0.03
# A slowing reason under which at least this share of a run's busy samples ran, on any rank, is named.
REASON_SHARE = 0.10
# Kernels slower by the clock ratio: each kernel's time ratio within this fraction of the inverse clock ratio.
CLOCK_MATCH = 0.05


@dataclass(frozen=True)
class RunTelemetry:
    """One run's telemetry across its ranks: the medians over ranks, the slowest rank's clock, what slowed it."""

    ranks: tuple[GpuTelemetry, ...]
    sm_clock_mhz: float | None          # median over ranks of each rank's median busy SM clock
    slowest_rank: int | None
    slowest_sm_clock_mhz: float | None
    mem_clock_mhz: float | None
    power_w: float | None
    power_limit_w: float | None
    temperature_c: float | None
    slowed_by: dict[str, float]         # slowing reason -> the largest share of busy samples on any rank
    ecc_uncorrected_added: int | None
    xids: tuple[int, ...]


def load(store: "Store", receipt_ids: Sequence[str]) -> dict[str, tuple[GpuTelemetry, ...]]:
    """The stored telemetry of each receipt (() for a receipt without any)."""
    out: dict[str, list[GpuTelemetry]] = {i: [] for i in receipt_ids}
    if not receipt_ids:
        return {}
    for row in store.query_rows("receipt_telemetry_many", {"ids": list(receipt_ids)}):
        rid = row.pop("receipt_id")
        row["throttle_share"] = json.loads(row.pop("throttle_json") or "{}")
        row["xids"] = tuple(json.loads(row.pop("xids_json") or "[]"))
        out.setdefault(rid, []).append(GpuTelemetry(**row))
    return {k: tuple(v) for k, v in out.items()}


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def summarise(ranks: Sequence[GpuTelemetry]) -> RunTelemetry | None:
    if not ranks:
        return None
    by_clock = [t for t in ranks if t.sm_clock_mhz is not None]
    slowest = min(by_clock, key=lambda t: t.sm_clock_mhz or 0.0) if by_clock else None
    slowed: dict[str, float] = {}
    for t in ranks:
        for reason, share in t.slowed_by.items():
            slowed[reason] = max(share, slowed.get(reason, 0.0))
    ecc = [t.ecc_uncorrected_added for t in ranks if t.ecc_uncorrected_added is not None]
    return RunTelemetry(
        tuple(ranks), _median([t.sm_clock_mhz for t in ranks]),
        slowest.rank if slowest else None, slowest.sm_clock_mhz if slowest else None,
        _median([t.mem_clock_mhz for t in ranks]), _median([t.power_w for t in ranks]),
        _median([t.power_limit_w for t in ranks]), _median([t.temperature_c for t in ranks]),
        {k: slowed[k] for k in SLOWING_REASONS if k in slowed}, sum(ecc) if ecc else None,
        tuple(sorted({x for t in ranks for x in t.xids})))


def clock_ratio(a: RunTelemetry | None, b: RunTelemetry | None) -> float | None:
    """B's median SM clock over A's (below 1: B's GPUs ran slower); None when either run has no clock."""
    if a is None or b is None or not a.sm_clock_mhz or not b.sm_clock_mhz:
        return None
    return b.sm_clock_mhz / a.sm_clock_mhz


def _reasons(shares: dict[str, float]) -> str:
    named = [f"{k} {v:.0%}" for k, v in shares.items() if v >= REASON_SHARE]
    return ", ".join(named) or "none"


def drift(a: RunTelemetry | None, b: RunTelemetry | None) -> list[tuple[str, Any, Any, str]]:
    """How B's telemetry differs from A's, as (field, a, b, note) rows of infrastructure drift: the median SM clock
    beyond CLOCK_DRIFT, the power limit, slowing reasons that reach REASON_SHARE on one side only, uncorrected ECC
    errors and Xids the candidate saw. A run with telemetry against one without is not drift: nothing was measured
    on one side, which says nothing about its GPUs."""
    if a is None or b is None:
        return []
    out: list[tuple[str, Any, Any, str]] = []
    ratio = clock_ratio(a, b)
    if ratio is not None and abs(ratio - 1.0) > CLOCK_DRIFT:
        slow = f"; slowest rank {b.slowest_rank} at {b.slowest_sm_clock_mhz:,.0f} MHz" if b.slowest_rank is not None and \
            len(b.ranks) > 1 else ""
        out.append(("gpu_sm_clock_mhz", round(a.sm_clock_mhz or 0), round(b.sm_clock_mhz or 0),
                    f"median busy SM clock {ratio - 1:+.1%}{slow}"))
    if a.power_limit_w != b.power_limit_w and a.power_limit_w is not None and b.power_limit_w is not None:
        out.append(("gpu_power_limit_w", a.power_limit_w, b.power_limit_w, "the enforced power limit"))
    named_a = {k for k, v in a.slowed_by.items() if v >= REASON_SHARE}
    named_b = {k for k, v in b.slowed_by.items() if v >= REASON_SHARE}
    if named_a != named_b:
        out.append(("gpu_throttle_reasons", _reasons(a.slowed_by), _reasons(b.slowed_by),
                    "share of busy samples each slowing reason held the clocks down"))
    if (b.ecc_uncorrected_added or 0) > 0 or b.xids:
        out.append(("gpu_errors", _errors(a), _errors(b), "uncorrected ECC errors and Xids during the run"))
    return out


def _errors(t: RunTelemetry) -> str:
    return f"ECC +{t.ecc_uncorrected_added or 0}, Xid {', '.join(map(str, t.xids)) or 'none'}"


@dataclass(frozen=True)
class ClockVerdict:
    """Whether a candidate's kernel slowdowns are its GPUs' clock ratio."""

    clock_ratio: float            # B's median SM clock / A's
    expected_time_ratio: float    # 1 / clock_ratio: what compute-bound kernels take at the lower clock
    kernels: int                  # kernels compared
    within: int                   # of them, slower by the clock ratio within CLOCK_MATCH
    median_time_ratio: float | None
    every_kernel: bool            # all compared kernels within CLOCK_MATCH of the expected ratio
    note: str


def kernels_at_clock_ratio(ratio: float, kernel_time_ratios: dict[str, float], *,
                           reasons: dict[str, float] | None = None) -> ClockVerdict | None:
    """`kernel_time_ratios`: each kernel's time per step B/A (the kernels both runs ran). None when the clocks did
    not move beyond CLOCK_DRIFT or no kernel was compared."""
    if abs(ratio - 1.0) <= CLOCK_DRIFT or not kernel_time_ratios:
        return None
    expected = 1.0 / ratio
    within = sum(1 for r in kernel_time_ratios.values() if abs(r / expected - 1.0) <= CLOCK_MATCH)
    n = len(kernel_time_ratios)
    med = statistics.median(kernel_time_ratios.values())
    why = f" (B's GPUs: {_reasons(reasons)})" if reasons else ""
    if within == n:
        note = (f"every kernel is {expected - 1:+.1%} slower, the SM clock ratio ({ratio:.3f}){why}: "
                "an infrastructure cause, not the code")
    else:
        note = (f"{within} of {n} kernels are slower by the SM clock ratio ({ratio:.3f}, expected {expected - 1:+.1%}; "
                f"median kernel {med - 1:+.1%}){why}")
    return ClockVerdict(ratio, expected, n, within, med, within == n, note)


def kernel_time_ratios(baseline: Sequence[Mapping[tuple[str, str], Any]],
                       candidate: Sequence[Mapping[tuple[str, str], Any]], *, min_share: float = 0.01
                       ) -> dict[str, float]:
    """Each kernel's time per step, candidate over baseline (means over each side's runs), for the kernels both sides
    ran that take at least `min_share` of the baseline's kernel time: the ones a clock change shows in, not the
    microsecond launches whose times are noise. Values: explain's per-run components (level, name) -> Value."""
    def means(runs: Sequence[Mapping[tuple[str, str], Any]]) -> dict[str, float]:
        sums: dict[str, float] = {}
        for run in runs:
            for (level, name), value in run.items():
                if level == "kernel":
                    sums[name] = sums.get(name, 0.0) + value.ms_per_step / len(runs)
        return sums

    a, b = means(baseline), means(candidate)
    total = sum(a.values())
    return {name: b[name] / ms for name, ms in a.items()
            if name in b and ms > 0 and b[name] > 0 and ms >= min_share * total}


def clock_verdict(baseline: Sequence[RunTelemetry], candidate: RunTelemetry | None,
                  baseline_kernels: Sequence[Mapping[tuple[str, str], Any]],
                  candidate_kernels: Sequence[Mapping[tuple[str, str], Any]]) -> ClockVerdict | None:
    """explain's telemetry line: the candidate's SM clock against the baseline runs' median, and whether its kernels
    are slower by that ratio. None without telemetry on both sides, or with clocks that did not move."""
    clocks = [t.sm_clock_mhz for t in baseline if t.sm_clock_mhz]
    if candidate is None or not candidate.sm_clock_mhz or not clocks:
        return None
    ratio = candidate.sm_clock_mhz / statistics.median(clocks)
    return kernels_at_clock_ratio(ratio, kernel_time_ratios(baseline_kernels, candidate_kernels),
                                  reasons=candidate.slowed_by)


def to_json(t: RunTelemetry | None) -> dict[str, Any] | None:
    if t is None:
        return None
    from dataclasses import asdict

    return {k: v for k, v in asdict(t).items() if k != "ranks"} | {
        "ranks": [{"rank": r.rank, "gpu_index": r.gpu_index, "gpu_name": r.gpu_name, "pci_bus_id": r.pci_bus_id,
                   "samples": r.samples, "busy_samples": r.busy_samples, "interval_s": r.interval_s,
                   **{m: getattr(r, m) for m in MEDIANS}, "sm_clock_min_mhz": r.sm_clock_min_mhz,
                   "sm_clock_max_mhz": r.sm_clock_max_mhz, "throttle_share": r.throttle_share,
                   "ecc_corrected_added": r.ecc_corrected_added, "ecc_uncorrected_added": r.ecc_uncorrected_added,
                   "xids": list(r.xids)} for r in t.ranks]}
