"""What an attached file says about the machine a run ran on (a profiler export, `nvidia-smi topo -m`,
collect_env), where that contradicts what a receipt already knows, and what it adds where the receipt knows
nothing: the machine of a receipt is merged from every file behind it, each fact with the file it came from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from receipts.schema.model import Anatomy, short_gpu_name

# The receipt's machine columns an attachment may fill, in the order they are named.
MACHINE_COLUMNS = ("gpu_model", "gpu_count", "gpus_on_host", "world_size", "ranks_traced", "hostname")


@dataclass(frozen=True)
class MachineSeen:
    """What an attached file says about the machine. gpu_count: GPUs of the machine (nsys TARGET_INFO_GPU,
    `nvidia-smi topo -m`), compared with the receipt's; ranks: ranks traced, at most its world size."""

    gpu_model: str | None = None
    gpu_count: int | None = None
    ranks: int | None = None
    world_size: int | None = None
    gpus_on_host: int | None = None
    hostname: str | None = None
    # GPUs the file saw that may have been narrowed (a Kineto trace's deviceProperties: CUDA_VISIBLE_DEVICES): the
    # count where the receipt knows none, never a contradiction of the count it knows
    visible_gpus: int | None = None


def machine_of_facts(kind: str, facts: dict) -> MachineSeen:
    if kind == "topology":
        gpus = [d for d in facts.get("devices") or () if str(d).upper().startswith("GPU")]
        return MachineSeen(gpu_count=len(gpus) or None, gpus_on_host=len(gpus) or None)
    if kind == "collect_env":
        # collect_env lists the GPUs CUDA could see, which CUDA_VISIBLE_DEVICES may narrow: the model only.
        models = facts.get("gpu_models") or []
        return MachineSeen(gpu_model=max(set(models), key=models.count) if models else None)
    return MachineSeen()        # nccl-tests: its GPU count is the test's (often several nodes), not the run's


def machine_of_anatomy(anatomy: Anatomy) -> MachineSeen:
    """nsys reports the machine's GPUs (TARGET_INFO_GPU); Kineto one trace per rank, so its ranks count, and the
    devices its processes saw (deviceProperties) give the count only where the receipt has none (a log's receipt
    attached its traces: the machine is the traces')."""
    nsys = anatomy.source_format == "nsys"
    return MachineSeen(anatomy.gpu_model, anatomy.gpu_count if nsys else None,
                       anatomy.ranks_traced if nsys else (anatomy.ranks_traced or anatomy.gpu_count),
                       anatomy.world_size, anatomy.gpus_on_host if nsys else None, anatomy.claim.hostname,
                       visible_gpus=None if nsys else anatomy.gpus_on_host)


def contradictions(seen: MachineSeen, receipt: Mapping[str, Any], origins: Mapping[str, str] | None = None) -> list[str]:
    """Where `seen` contradicts a stored receipt's row, each naming both values; `origins`: the file each of
    the row's machine facts came from, when an attachment gave it (said with the receipt's side)."""
    origins = origins or {}

    def theirs(column: str) -> str:
        return f" (from {origins[column]})" if column in origins else ""

    found = []
    if seen.gpu_model and receipt["gpu_model"] and short_gpu_name(seen.gpu_model) != short_gpu_name(receipt["gpu_model"]):
        found.append(f"GPU model {seen.gpu_model!r} in the file vs {receipt['gpu_model']!r} on the receipt"
                     f"{theirs('gpu_model')}")
    if seen.gpu_count and receipt["gpu_count"] and seen.gpu_count != receipt["gpu_count"]:
        found.append(f"GPU count {seen.gpu_count} in the file vs {receipt['gpu_count']} on the receipt"
                     f"{theirs('gpu_count')}")
    elif seen.gpus_on_host and receipt.get("gpus_on_host") and seen.gpus_on_host != receipt["gpus_on_host"]:
        found.append(f"{seen.gpus_on_host} GPUs on the host in the file vs {receipt['gpus_on_host']} on the receipt"
                     f"{theirs('gpus_on_host')}")
    if seen.ranks and receipt["world_size"] and seen.ranks > receipt["world_size"]:
        found.append(f"{seen.ranks} ranks traced vs world size {receipt['world_size']} on the receipt"
                     f"{theirs('world_size')}")
    elif seen.world_size and receipt["world_size"] and seen.world_size != receipt["world_size"]:
        found.append(f"world size {seen.world_size} in the file vs {receipt['world_size']} on the receipt"
                     f"{theirs('world_size')}")
    if seen.hostname and receipt.get("hostname") and _host(seen.hostname) != _host(receipt["hostname"]):
        found.append(f"host {seen.hostname!r} in the file vs {receipt['hostname']!r} on the receipt"
                     f"{theirs('hostname')}")
    return found


def _host(name: str) -> str:
    """A host's short name: `node7.cluster.local` and `NODE7` are one machine."""
    return name.strip().split(".")[0].lower()


def machine_fill(seen: MachineSeen, receipt: Mapping[str, Any]) -> dict[str, Any]:
    """The machine columns the receipt lacks that the file states: what attaching it adds (machine_class with
    them, once the model and the count are both known)."""
    stated = {"gpu_model": seen.gpu_model, "gpu_count": seen.gpu_count or seen.visible_gpus,
              "gpus_on_host": seen.gpus_on_host or seen.visible_gpus,
              "world_size": seen.world_size, "ranks_traced": seen.ranks, "hostname": seen.hostname}
    fill = {c: v for c, v in stated.items() if v is not None and receipt.get(c) is None}
    model, count = fill.get("gpu_model", receipt.get("gpu_model")), fill.get("gpu_count", receipt.get("gpu_count"))
    if fill and model and count and receipt.get("machine_class") is None:
        fill["machine_class"] = f"{short_gpu_name(str(model))}:{count}"
    return fill
