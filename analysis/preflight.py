"""Preflight lint: pure rules over collected machine facts (seed 003, "the operator playbook").

Each rule is a function `PreflightFacts -> list[Finding]`; nothing here probes the machine, so
tests feed facts directly. Collection lives in receipts.launch.provenance.preflight_facts.

Severity: 'error' = the run would be broken or not comparable (the command exits non-zero);
'warning' = a known cost or risk the operator should decide about.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Literal

# PyTorch's default for TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC (ProcessGroupNCCL: 8 minutes).
TORCH_HEARTBEAT_DEFAULT_S = 480
# GPU families sold as SXM/NVLink boards: GPU-GPU cells should read NV# (seed 003: NV18 on H100/H200).
_NVLINK_CLASS = re.compile(r"\b(H100|H200|H800|B100|B200|GB200|GB300|A100|A800)\b")
_PCIE_FALLBACK = ("SYS", "PHB")


@dataclass(frozen=True)
class PathFact:
    name: str                 # HF_HOME, TORCH_HOME, TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR, data_path
    path: str
    on_root_volume: bool      # same filesystem device as '/'


@dataclass(frozen=True)
class PreflightFacts:
    gpu_model: str | None = None
    gpu_count: int | None = None
    gpu_links: tuple[tuple[str, str, str], ...] = ()   # (GPU0, GPU1, 'NV18') per unordered pair
    topology_available: bool = False
    numa_balancing: int | None = None                  # /proc/sys/kernel/numa_balancing
    env: dict[str, str | None] = field(default_factory=dict)
    regime: str | None = None                          # e.g. 'fsdp2/no-compile'
    compile_window_s: float | None = None              # expected longest compile before the first collective
    torch_version: str | None = None                   # '2.11.0+cu130'
    expect_cuda: str | None = None                     # 'cu132'
    paths: tuple[PathFact, ...] = ()
    gpu_probe: str | None = None                       # why the node's GPUs could not be read; None when they were


Severity = Literal["error", "warning"]  # an error fails `receipts preflight` (exit 2); a warning is said


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    reason: str
    fix: str
    evidence: dict = field(default_factory=dict)


@dataclass(frozen=True)
class PreflightReport:
    findings: tuple[Finding, ...]
    checked: tuple[str, ...]  # rule names that had their facts to judge
    unchecked: tuple[str, ...] = ()  # rule names that ran without them (nothing to read: no GPUs, no /proc)

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "error")

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_dict(self) -> dict:
        return {"ok": self.ok, "checked": list(self.checked), "unchecked": list(self.unchecked),
                "findings": [asdict(f) for f in self.findings]}


def topology_fallback(facts: PreflightFacts) -> list[Finding]:
    """GPU-GPU cells that are SYS/PHB where NVLink is expected: traffic crosses PCIe / the CPU."""
    if not facts.topology_available or (facts.gpu_count or 0) < 2:
        return []
    bad = [(a, b, c) for a, b, c in facts.gpu_links if c in _PCIE_FALLBACK]
    other = [(a, b, c) for a, b, c in facts.gpu_links if not re.fullmatch(r"NV\d+", c) and c not in _PCIE_FALLBACK]
    nvlink_expected = bool(_NVLINK_CLASS.search(facts.gpu_model or "")) or any(
        re.fullmatch(r"NV\d+", c) for _, _, c in facts.gpu_links)
    out = []
    if bad:
        out.append(Finding(
            "topology-fallback", "error" if nvlink_expected else "warning",
            f"{len(bad)} GPU pair(s) connect through {'/'.join(sorted({c for *_, c in bad}))} instead of NVLink "
            f"(e.g. {bad[0][0]}-{bad[0][1]} = {bad[0][2]}); NCCL tuning on this node would measure the fallback path",
            "fix the node before tuning: check NVLink/NVSwitch health (nvidia-smi nvlink -s, fabric manager), "
            "or move to a node whose `nvidia-smi topo -m` reads NV# between all GPUs",
            {"pairs": [list(p) for p in bad]}))
    if other and nvlink_expected:
        out.append(Finding(
            "topology-pcie-path", "warning",
            f"{len(other)} GPU pair(s) show PCIe paths ({'/'.join(sorted({c for *_, c in other}))}) on an NVLink-class "
            "GPU", "confirm the GPU model and NVLink state; a renumbered CUDA_VISIBLE_DEVICES can also hide the fabric",
            {"pairs": [list(p) for p in other]}))
    return out


def numa_balancing_on(facts: PreflightFacts) -> list[Finding]:
    if facts.numa_balancing is None or facts.numa_balancing == 0:
        return []
    return [Finding("numa-balancing", "warning",
                    f"automatic NUMA balancing is on (kernel.numa_balancing={facts.numa_balancing}): the kernel "
                    "migrates pinned/host pages under the dataloader and NCCL proxy threads",
                    "sysctl -w kernel.numa_balancing=0 (and persist it in /etc/sysctl.d)",
                    {"numa_balancing": facts.numa_balancing})]


def max_connections_fsdp2(facts: PreflightFacts) -> list[Finding]:
    """Seed 003: CUDA_DEVICE_MAX_CONNECTIONS=1 serialises FSDP2's all_gather/reduce_scatter overlap."""
    value = facts.env.get("CUDA_DEVICE_MAX_CONNECTIONS")
    if value is None or value.strip() != "1":
        return []
    is_fsdp2 = bool(facts.regime and re.search(r"fsdp2", facts.regime, re.I))
    if facts.regime and not is_fsdp2:
        return []
    return [Finding("max-connections-fsdp2", "error" if is_fsdp2 else "warning",
                    "CUDA_DEVICE_MAX_CONNECTIONS=1 " + ("with FSDP2" if is_fsdp2 else "(regime not given; FSDP2 assumed "
                                                        "possible)") +
                    ": one hardware work queue serialises the all_gather/reduce_scatter overlap the step depends on",
                    "unset CUDA_DEVICE_MAX_CONNECTIONS (record that it is unset); if the platform needs it, start "
                    "from 8 and measure overlap before going lower",
                    {"CUDA_DEVICE_MAX_CONNECTIONS": value, "regime": facts.regime})]


def alloc_conf_alias(facts: PreflightFacts) -> list[Finding]:
    new, old = facts.env.get("PYTORCH_ALLOC_CONF"), facts.env.get("PYTORCH_CUDA_ALLOC_CONF")
    if old is None:
        return []
    if new is not None and new != old:
        return [Finding("alloc-conf-conflict", "error",
                        f"PYTORCH_CUDA_ALLOC_CONF={old!r} disagrees with PYTORCH_ALLOC_CONF={new!r}: torch >= 2.9 "
                        "uses PYTORCH_ALLOC_CONF, older torch the alias, so the overlay depends on the torch build",
                        "export only PYTORCH_ALLOC_CONF (e.g. expandable_segments:True) and unset the alias",
                        {"PYTORCH_ALLOC_CONF": new, "PYTORCH_CUDA_ALLOC_CONF": old})]
    if new is None:
        return [Finding("alloc-conf-alias", "warning",
                        "only the backward-compatible alias PYTORCH_CUDA_ALLOC_CONF is set",
                        "rename it to PYTORCH_ALLOC_CONF (the current allocator control)",
                        {"PYTORCH_CUDA_ALLOC_CONF": old})]
    return []


def heartbeat_vs_compile(facts: PreflightFacts) -> list[Finding]:
    """Seed 003: a watchdog budget shorter than the compile window kills a healthy compiled run."""
    if facts.compile_window_s is None:
        return []
    raw = facts.env.get("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC")
    try:
        heartbeat = float(raw) if raw is not None else float(TORCH_HEARTBEAT_DEFAULT_S)
    except ValueError:
        return [Finding("heartbeat-unparsable", "error", f"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC={raw!r} is not a number",
                        "set it to whole seconds, e.g. 7200", {"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": raw})]
    if heartbeat >= facts.compile_window_s:
        return []
    where = "unset (PyTorch default 480 s)" if raw is None else f"{raw} s"
    return [Finding("heartbeat-shorter-than-compile", "error",
                    f"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC is {where}, shorter than the {facts.compile_window_s:g} s "
                    "compile window: the watchdog will kill ranks that are still compiling",
                    "export TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC=7200 (or above the longest compile window)",
                    {"heartbeat_s": heartbeat, "compile_window_s": facts.compile_window_s})]


def mnnvl_forced(facts: PreflightFacts) -> list[Finding]:
    value = facts.env.get("NCCL_MNNVL_ENABLE")
    if value is None or value.strip() != "1":
        return []
    return [Finding("mnnvl-forced", "error",
                    "NCCL_MNNVL_ENABLE=1 forces multi-node NVLink: NCCL init is allowed to fail where MNNVL is not "
                    "supported; it is a failure-seeking probe, not a baseline",
                    "unset it (automatic detection), or set 2 (auto) / 0 (disable) when a diagnostic needs it explicit",
                    {"NCCL_MNNVL_ENABLE": value})]


def torch_cuda_suffix(facts: PreflightFacts) -> list[Finding]:
    if not facts.expect_cuda:
        return []
    actual = facts.torch_version.split("+", 1)[1] if facts.torch_version and "+" in facts.torch_version else None
    if actual == facts.expect_cuda:
        return []
    return [Finding("torch-cuda-suffix", "error",
                    f"torch is {facts.torch_version or 'not installed'}; expected a +{facts.expect_cuda} build",
                    f"install the {facts.expect_cuda} wheel (pip install torch --index-url "
                    f"https://download.pytorch.org/whl/{facts.expect_cuda})",
                    {"torch": facts.torch_version, "expected": facts.expect_cuda, "actual_suffix": actual})]


def paths_on_root(facts: PreflightFacts) -> list[Finding]:
    """Seed 003: data wants sustained reads, caches small-file churn; neither belongs on '/'."""
    bad = [p for p in facts.paths if p.on_root_volume]
    if not bad:
        return []
    return [Finding("paths-on-root-volume", "warning",
                    "on the root volume: " + ", ".join(f"{p.name}={p.path}" for p in bad) +
                    " — dataloader reads, compile-cache churn and the OS share one disk",
                    "point data at the data volume and caches (TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR) at per-run "
                    "scratch", {p.name: p.path for p in bad})]


def visible_devices_masked(facts: PreflightFacts) -> list[Finding]:
    value = facts.env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return []
    return [Finding("visible-devices-masked", "warning",
                    f"CUDA_VISIBLE_DEVICES={value!r}: ranks see a renumbered slice, so the topology this preflight "
                    "read and the communicator's view can differ",
                    "let torchrun own the node's full GPU set; the receipt records the rank->GPU map",
                    {"CUDA_VISIBLE_DEVICES": value})]


def gpus_unprobed(facts: PreflightFacts) -> list[Finding]:
    """No GPU could be read: the GPU rules judged nothing, which is not the same as finding nothing wrong."""
    if facts.gpu_probe is None:
        return []
    return [Finding("gpus-unprobed", "warning",
                    f"{facts.gpu_probe}: this node's GPU model, count and topology are unknown, so the topology "
                    "rule checked nothing",
                    "run preflight where the job runs (the GPU node, inside its container), where nvidia-smi works",
                    {"gpu_probe": facts.gpu_probe})]


# What each rule needs to have read; without it the rule runs but judges nothing (PreflightReport.unchecked).
_READS = {"topology_fallback": lambda f: f.topology_available, "numa_balancing_on": lambda f: f.numa_balancing is not None,
          "gpus_unprobed": lambda f: True}

RULES = (gpus_unprobed, topology_fallback, numa_balancing_on, max_connections_fsdp2, alloc_conf_alias, heartbeat_vs_compile,
         mnnvl_forced, torch_cuda_suffix, paths_on_root, visible_devices_masked)


def run_preflight(facts: PreflightFacts, *, rules=RULES) -> PreflightReport:
    findings = [f for rule in rules for f in rule(facts)]
    findings.sort(key=lambda f: (f.severity != "error", f.rule))
    judged = {r.__name__: _READS.get(r.__name__, lambda f: True)(facts) for r in rules}
    return PreflightReport(tuple(findings), tuple(n for n, ok in judged.items() if ok),
                           tuple(n for n, ok in judged.items() if not ok))
