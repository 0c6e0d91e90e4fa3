"""What an attached file says about the machine a run ran on (a profiler export, `nvidia-smi topo -m`,
collect_env), and where that contradicts what a receipt already knows."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from receipts.schema.model import Anatomy, short_gpu_name


@dataclass(frozen=True)
class MachineSeen:
    """What an attached file says about the machine. gpu_count: GPUs of the machine (nsys TARGET_INFO_GPU,
    `nvidia-smi topo -m`), compared with the receipt's; ranks: ranks traced (Kineto), at most its world size."""

    gpu_model: str | None = None
    gpu_count: int | None = None
    ranks: int | None = None


def machine_of_facts(kind: str, facts: dict) -> MachineSeen:
    if kind == "topology":
        gpus = [d for d in facts.get("devices") or () if str(d).upper().startswith("GPU")]
        return MachineSeen(gpu_count=len(gpus) or None)
    if kind == "collect_env":
        # collect_env lists the GPUs CUDA could see, which CUDA_VISIBLE_DEVICES may narrow: the model only.
        models = facts.get("gpu_models") or []
        return MachineSeen(gpu_model=max(set(models), key=models.count) if models else None)
    return MachineSeen()        # nccl-tests: its GPU count is the test's (often several nodes), not the run's


def machine_of_anatomy(anatomy: Anatomy) -> MachineSeen:
    """nsys reports the machine's GPUs (TARGET_INFO_GPU); Kineto one trace per rank, so only its ranks count."""
    nsys = anatomy.source_format == "nsys"
    return MachineSeen(anatomy.gpu_model, anatomy.gpu_count if nsys else None, None if nsys else anatomy.gpu_count)


def contradictions(seen: MachineSeen, receipt: Mapping[str, Any]) -> list[str]:
    """Where `seen` contradicts a stored receipt's row (gpu_model, gpu_count, world_size), each naming both values."""
    found = []
    if seen.gpu_model and receipt["gpu_model"] and short_gpu_name(seen.gpu_model) != short_gpu_name(receipt["gpu_model"]):
        found.append(f"GPU model {seen.gpu_model!r} in the file vs {receipt['gpu_model']!r} on the receipt")
    if seen.gpu_count and receipt["gpu_count"] and seen.gpu_count != receipt["gpu_count"]:
        found.append(f"GPU count {seen.gpu_count} in the file vs {receipt['gpu_count']} on the receipt")
    if seen.ranks and receipt["world_size"] and seen.ranks > receipt["world_size"]:
        found.append(f"{seen.ranks} ranks traced vs world size {receipt['world_size']} on the receipt")
    return found
