"""nccl-tests `*_perf` output (all_reduce_perf, ...) -> bus-bandwidth rows and the summary.

Row layout since nccl-tests 2.10: size count type redop root | time algbw busbw #wrong (out-of-place)
| time algbw busbw #wrong (in-place). Older builds have no `root` column and print `error`
(a float like 0e+00) instead of `#wrong`; both are read by column count. Times are microseconds,
bandwidths GB/s as nccl-tests prints them (10^9 bytes). The "Avg bus bandwidth" line averages
over ALL sizes, tiny ones included, so it understates the large-message plateau: both are kept.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from receipts.errors import InputError
from receipts.ingest.plaintext import read_text

FORMAT = "nccl_tests"
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(.*)$")


@dataclass(frozen=True)
class NcclRow:
    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int | None
    oop_time_us: float | None
    oop_algbw_gbps: float | None
    oop_busbw_gbps: float | None
    oop_wrong: float | None
    ip_time_us: float | None
    ip_algbw_gbps: float | None
    ip_busbw_gbps: float | None
    ip_wrong: float | None
    line: int


@dataclass(frozen=True)
class NcclTestResult:
    rows: tuple[NcclRow, ...]
    avg_busbw_gbps: float | None       # the tool's own "Avg bus bandwidth" line
    n_gpus_total: int | None           # ranks listed under "Using devices"
    devices: tuple[str, ...]           # device names per rank, in rank order
    params: dict[str, str]             # nThread, nGpus, minBytes, maxBytes, warmup iters, ...
    out_of_bounds: int | None

    @property
    def peak_busbw_gbps(self) -> float | None:
        vals = [v for r in self.rows for v in (r.oop_busbw_gbps, r.ip_busbw_gbps) if v is not None]
        return max(vals) if vals else None


def _num(text: str) -> float | None:
    """A time, bandwidth or error count; None for 'N/A' (in-place columns of some collectives) and for
    what nccl-tests never prints (negative, NaN, inf: a damaged file)."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def parse_text(text: str, *, path: str | Path = "<nccl-tests>") -> NcclTestResult:
    rows: list[NcclRow] = []
    params: dict[str, str] = {}
    devices: list[str] = []
    avg = None
    oob = None
    for no, line in enumerate(text.splitlines(), start=1):
        if line.startswith("# nThread"):
            for param in re.finditer(r"([A-Za-z][A-Za-z ]*?):?\s+(\S*[^\s:])(?=\s|$)", line[2:]):
                params[param.group(1).strip()] = param.group(2)
            continue
        m = re.match(r"^#\s+Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s+(.*)$",
                     line)
        if m:
            devices.append(m.group(5).strip())
            continue
        m = re.match(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.eE+\-]+)", line)
        if m:
            avg = _num(m.group(1))
            continue
        m = re.match(r"^#\s*Out of bounds values\s*:\s*(\d+)", line)
        if m:
            oob = int(m.group(1))
            continue
        m = _ROW.match(line)
        if not m or line.lstrip().startswith("#"):
            continue
        rest = m.group(5).split()
        root = None
        if len(rest) == 9:
            if not re.fullmatch(r"-?[0-9]{1,9}", rest[0]):
                raise InputError(path, f"nccl-tests row: root column {rest[0][:40]!r} is not an integer", line=no)
            root, rest = int(rest[0]), rest[1:]
        if len(rest) != 8:
            raise InputError(path, f"nccl-tests row has {len(rest) + 4} columns; expected 12 or 13 "
                                   "(size count type redop [root] then time algbw busbw #wrong twice)", line=no)
        v = [_num(x) for x in rest]
        rows.append(NcclRow(int(m.group(1)), int(m.group(2)), m.group(3), m.group(4), root,
                            v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], no))
    if not rows:
        raise InputError(path, "no nccl-tests result rows (expected lines 'size count type redop ... busbw')")
    return NcclTestResult(tuple(rows), avg, len(devices) or None, tuple(devices), params, oob)


def parse(path: Path) -> NcclTestResult:
    return parse_text(read_text(path), path=path)
