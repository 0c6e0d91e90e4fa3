"""`nvidia-smi topo -m` text -> the GPU/NIC connection matrix, affinities and legends.

The table is tab-separated, but its header carries ANSI underline codes on some driver versions
(seen: 535.x when stdout is a terminal), empty cells show as two adjacent tabs ("0\t\tN/A"), and
pasted copies turn tabs into runs of spaces. So cells are split on a tab or two-plus spaces, and the
matrix columns are matched by count: the first len(columns) cells of a row are connections, the
cells after them are the affinity columns in header order.

Seed 003: on a healthy H100/H200 node every GPU-GPU cell reads NV# (NV18); SYS or PHB between
GPUs means traffic falls back onto PCIe / the CPU interconnect.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from receipts.errors import InputError
from receipts.ingest.plaintext import read_text

FORMAT = "topology"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SPLIT = re.compile(r"\t|\s{2,}")
_DEVICE = re.compile(r"^(GPU\d+|NIC\d+|mlx\S*|CPU\d+)$")
# Path quality between two endpoints, best first (nvidia-smi's legend order). NV# beats all.
PATH_RANK = {"X": 0, "NV": 1, "PIX": 2, "PXB": 3, "PHB": 4, "NODE": 5, "SYS": 6}


@dataclass(frozen=True)
class Topology:
    devices: tuple[str, ...]                         # column order: GPU0.., NIC0..
    cells: dict[tuple[str, str], str]                # (row, column) -> 'NV18' | 'SYS' | 'X' | ...
    affinity: dict[str, dict[str, str]] = field(default_factory=dict)  # GPU0 -> {'CPU Affinity': '0-55', ...}
    nic_names: dict[str, str] = field(default_factory=dict)            # NIC0 -> mlx5_0
    legend: dict[str, str] = field(default_factory=dict)               # 'SYS' -> meaning

    @property
    def gpus(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices if d.startswith("GPU"))

    @property
    def nics(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices if not d.startswith("GPU"))

    def gpu_pairs(self) -> list[tuple[str, str, str]]:
        """(gpu_a, gpu_b, cell) for each unordered GPU pair."""
        gpus = self.gpus
        return [(a, b, self.cells.get((a, b), "")) for i, a in enumerate(gpus) for b in gpus[i + 1:]]

    def nearest_nic(self, gpu: str) -> str | None:
        """The NIC with the best path from `gpu` (PIX < PXB < PHB < NODE < SYS); None without NICs."""
        scored = [(path_rank(self.cells.get((gpu, nic), "")), nic) for nic in self.nics]
        scored = [s for s in scored if s[0] is not None]
        return min(scored)[1] if scored else None

    def to_dict(self) -> dict:
        """JSON-ready form for the RECEIPT header (`topology.matrix`)."""
        return {
            "devices": list(self.devices),
            "matrix": {row: {col: self.cells.get((row, col), "") for col in self.devices} for row in self.devices
                       if (row, self.devices[0]) in self.cells},
            "affinity": self.affinity,
            "nic_names": self.nic_names,
            "gpu_links": sorted({cell for _, _, cell in self.gpu_pairs()}),
        }


def path_rank(cell: str) -> int | None:
    cell = cell.strip()
    if re.fullmatch(r"NV\d+", cell):
        return PATH_RANK["NV"]
    return PATH_RANK.get(cell)


def parse_text(text: str, *, path: str | Path = "<nvidia-smi topo -m>") -> Topology:
    lines = [_ANSI.sub("", line).rstrip("\r\n") for line in text.splitlines()]
    header_at = next((i for i, line in enumerate(lines) if re.match(r"^\s+GPU0\b", line)), None)
    if header_at is None:
        raise InputError(path, "no `nvidia-smi topo -m` header (a line starting with whitespace then GPU0)")
    header = [c.strip() for c in _SPLIT.split(lines[header_at].strip()) if c.strip()]
    devices = tuple(c for c in header if _DEVICE.match(c))
    extra_cols = [c for c in header if not _DEVICE.match(c)]
    cells: dict[tuple[str, str], str] = {}
    affinity: dict[str, dict[str, str]] = {}
    i = header_at + 1
    while i < len(lines) and lines[i].strip():
        parts = [c.strip() for c in _SPLIT.split(lines[i].strip())]
        name, values = parts[0], [v for v in parts[1:] if v != ""]
        if not _DEVICE.match(name):
            break
        if len(values) < len(devices):
            raise InputError(path, f"row {name} has {len(values)} cells; expected {len(devices)} "
                                   f"(one per column {', '.join(devices)})", line=i + 1)
        for col, value in zip(devices, values):
            cells[(name, col)] = value
        rest = values[len(devices):]
        if rest and name.startswith("GPU"):
            affinity[name] = dict(zip(extra_cols, rest))
        i += 1
    legend: dict[str, str] = {}
    nic_names: dict[str, str] = {}
    for line in lines[i:]:
        m = re.match(r"^\s+(X|SYS|NODE|PHB|PXB|PIX|NV#|NV\d+)\s+=\s+(.*)$", line)
        if m:
            legend[m.group(1)] = m.group(2).strip()
            continue
        m = re.match(r"^\s+(NIC\d+):\s+(\S+)", line)
        if m:
            nic_names[m.group(1)] = m.group(2)
    if not cells:
        raise InputError(path, "header found but no GPU rows under it", line=header_at + 2)
    return Topology(devices=devices, cells=cells, affinity=affinity, nic_names=nic_names, legend=legend)


def parse(path: Path) -> Topology:
    return parse_text(read_text(path), path=path)


def rank_map(topology: Topology, *, local_ranks: int, visible_devices: str | None) -> list[dict]:
    """Local rank -> GPU -> nearest NIC / CPU / NUMA affinity, as torchrun assigns devices:
    local rank i uses visible device i, and CUDA_VISIBLE_DEVICES (when set to indices) renumbers
    which physical GPU that is. UUID-style masks cannot be mapped without nvidia-smi; they are
    reported as such rather than guessed."""
    physical: list[str | None]
    if visible_devices is None or visible_devices.strip() == "":
        physical = [f"GPU{i}" for i in range(len(topology.gpus))]
    elif all(p.strip().isdigit() for p in visible_devices.split(",")):
        physical = [f"GPU{int(p)}" for p in visible_devices.split(",")]
    else:
        physical = [None] * len(visible_devices.split(","))
    out = []
    for lr in range(local_ranks):
        gpu = physical[lr] if lr < len(physical) else None
        row: dict = {"local_rank": lr, "gpu": gpu, "assumed": "torchrun: local rank i -> visible device i"}
        if gpu in topology.gpus:
            nic = topology.nearest_nic(gpu)
            row["nic"] = nic
            row["nic_name"] = topology.nic_names.get(nic) if nic else None
            row["nic_path"] = topology.cells.get((gpu, nic)) if nic else None
            row.update({k.lower().replace(" ", "_"): v for k, v in topology.affinity.get(gpu, {}).items()})
        out.append(row)
    return out
