"""Machine-fact files as ingest sources: `nvidia-smi topo -m`, `python -m torch.utils.collect_env`,
nccl-tests `all_reduce_perf`. Each becomes a section of facts attached to a receipt
(`receipts ingest topo.txt --attach RUN`): topology and the NCCL sanity figure land in the receipt's
topology, the software stack in its software (so they count in infrastructure / runtime drift)."""

from __future__ import annotations

import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

from receipts.ingest import collect_env, nccl_tests, topology
from receipts.schema.model import FACT_SECTIONS

# Horizontal whitespace only ([ \t], never \s): a `\s*` may cross newlines, and two of them side by side
# made a file opening with a few thousand blank lines take minutes (cubic backtracking) before this.
_TOPO = re.compile(r"^[ \t]*(?:\x1b\[[0-9;]*m[ \t]*)*GPU0[ \t]+(?:GPU1|X\b)|^Legend:", re.M)
_COLLECT_ENV = re.compile(r"^(PyTorch version:|Collecting environment information|Is debug build:)", re.M)
_NCCL = re.compile(r"nccl-tests|^#[ \t]+Avg bus bandwidth|^#[ \t]+size[ \t]+count[ \t]+type", re.M)


def detect(head: str) -> str | None:
    """'topology' | 'collect_env' | 'nccl_tests' | None, from the first few KiB of text."""
    if _NCCL.search(head):
        return "nccl_tests"
    if _COLLECT_ENV.search(head):
        return "collect_env"
    if _TOPO.search(head):
        return "topology"
    return None


def facts(path: Path, kind: str) -> tuple[str, dict[str, Any]]:
    """(receipt section, facts to merge into it). Raises InputError naming the file when it does not parse."""
    if kind == "topology":
        topo = topology.parse(path)
        matrix: dict[str, dict[str, str]] = {}
        for (row, col), cell in topo.cells.items():
            matrix.setdefault(row, {})[col] = cell
        return FACT_SECTIONS[kind], {"matrix": matrix, "devices": list(topo.devices), "affinity": topo.affinity,
                            "nic_names": topo.nic_names}
    if kind == "collect_env":
        env = collect_env.parse(path)
        return FACT_SECTIONS[kind], {**env.software, **({"gpu_models": list(env.gpus)} if env.gpus else {})}
    result = nccl_tests.parse(path)
    return FACT_SECTIONS[kind], {"nccl_tests": {
        "avg_busbw_gbps": result.avg_busbw_gbps, "n_gpus_total": result.n_gpus_total,
        "max_busbw_gbps": max((r.oop_busbw_gbps or 0.0 for r in result.rows), default=None),
        "rows": [asdict(r) for r in result.rows],
    }}
