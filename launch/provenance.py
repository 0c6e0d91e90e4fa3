"""Machine facts for a RECEIPT header, gathered WITHOUT importing torch in this process.

The launcher runs before the training interpreter starts (seed 003: provenance goes into the log
before the first Python import of the run), and the `receipts` CLI may live in a different
environment than the training code. So the software stack is read from the *child's* interpreter
through importlib.metadata and torch/version.py (a text file), never by importing torch.

Each probe returns None (or an 'error' note) when its tool is missing: a CPU-only box records
gpu_count 0, never invented numbers.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

_PROBE_TIMEOUT_S = 20

# Runs inside the child's interpreter: versions without importing torch (import costs seconds
# and would initialise CUDA in the launcher).
_SOFTWARE_PROBE = r"""
import importlib.metadata as md, importlib.util as iu, json, re, sys
out = {"python": sys.version.split()[0], "python_executable": sys.executable}
def ver(name):
    try: return md.version(name)
    except Exception: return None
out["torch"] = ver("torch")
for d in md.distributions():
    n = (d.metadata["Name"] or "").lower()
    if n.startswith("nvidia-nccl"): out["nccl"] = d.version
    elif n in ("triton", "pytorch-triton"): out["triton"] = d.version
    elif n in ("transformer-engine", "transformer_engine"): out["transformer_engine"] = d.version
    elif n == "megatron-core": out["megatron_core"] = d.version
try:
    spec = iu.find_spec("torch")
    if spec and spec.submodule_search_locations:
        import os
        text = open(os.path.join(list(spec.submodule_search_locations)[0], "version.py")).read()
        # version.py's __version__ carries the local build tag (2.11.0+cu130) that the wheel's
        # metadata may lack (the PyPI cu130 wheel says 2.11.0): the runtime's view wins.
        m = re.search(r"^__version__\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", text, re.M)
        if m:
            out["torch_dist_version"], out["torch"] = out.get("torch"), m.group(1)
        m = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", text, re.M)
        if m: out["torch_cuda"] = m.group(1)
        m = re.search(r"^git_version\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", text, re.M)
        if m: out["torch_git"] = m.group(1)
except Exception as e:
    out["torch_probe_error"] = repr(e)
print(json.dumps({k: v for k, v in out.items() if v is not None}))
"""


def _run(argv: list[str], *, timeout_s: float = _PROBE_TIMEOUT_S, cwd: Path | None = None) -> str | None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, cwd=cwd,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


# Where CI systems and schedulers put the commit they checked out, for trees copied without .git
# (container images, rsync'd job folders): the first one set names the revision.
CI_REV_VARIABLES = ("RECEIPTS_GIT_REV", "GITHUB_SHA", "CI_COMMIT_SHA", "BUILDKITE_COMMIT", "GIT_COMMIT",
                    "CIRCLE_SHA1", "BITBUCKET_COMMIT")


def git_provenance(*, cwd: Path, environ: Mapping[str, str] | None = None) -> dict:
    """`git rev-parse HEAD` and a one-line summary of `git status --porcelain`; outside a checkout, the
    revision a CI variable names (the status then says which variable, and that the tree is unchecked)."""
    rev = _run(["git", "rev-parse", "HEAD"], cwd=cwd)
    if rev is None:
        environ = os.environ if environ is None else environ
        named = next((name for name in CI_REV_VARIABLES if environ.get(name, "").strip()), None)
        if named is None:
            return {"git_rev": None, "git_status": "not a git checkout"}
        return {"git_rev": environ[named].strip(), "git_status": f"not a git checkout; revision from ${named}"}
    status = _run(["git", "status", "--porcelain", "--untracked-files=normal"], cwd=cwd) or ""
    counts: dict[str, int] = {}
    for line in status.splitlines():
        code = line[:2]
        kind = "untracked" if code == "??" else "added" if "A" in code else "deleted" if "D" in code \
            else "renamed" if "R" in code else "modified"
        counts[kind] = counts.get(kind, 0) + 1
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "clean"
    return {"git_rev": rev.strip(), "git_status": summary}


def nvidia_smi_gpus() -> dict:
    """GPU model, count and driver from `nvidia-smi --query-gpu`; gpu_count 0 when there is none."""
    if shutil.which("nvidia-smi") is None:
        return {"gpu_model": None, "gpu_count": 0, "gpus": [], "gpu_probe": "nvidia-smi not found"}
    out = _run(["nvidia-smi", "--query-gpu=index,name,pci.bus_id,driver_version,memory.total",
                "--format=csv,noheader,nounits"])
    if out is None:
        return {"gpu_model": None, "gpu_count": 0, "gpus": [], "gpu_probe": "nvidia-smi failed"}
    gpus = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 5:
            gpus.append({"index": int(parts[0]), "name": parts[1], "pci_bus_id": parts[2],
                         "driver": parts[3], "memory_total_mib": _int(parts[4])})
    facts = {"gpu_model": gpus[0]["name"] if gpus else None, "gpu_count": len(gpus), "gpus": gpus}
    if gpus:
        facts["driver"] = gpus[0]["driver"]
    head = _run(["nvidia-smi"])  # the banner is the only place that names the driver's CUDA version
    m = re.search(r"CUDA Version:\s*([0-9.]+)", head or "")
    if m:
        facts["driver_cuda"] = m.group(1)
    return facts


def _int(text: str) -> int | None:
    try:
        return int(float(text))
    except ValueError:
        return None


def topology_text() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    return _run(["nvidia-smi", "topo", "-m"])


def numa_balancing(*, path: Path = Path("/proc/sys/kernel/numa_balancing")) -> int | None:
    """1 = the kernel migrates pages between NUMA nodes on its own (seed 003: turn it off)."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def child_interpreter(command: list[str]) -> str | None:
    """The Python that will run the training code: the first `python*` word of the command, or
    the shebang of a `torchrun`/script entry point. None when the command is not Python."""
    for word in command:
        base = os.path.basename(word)
        if re.fullmatch(r"python[0-9.]*", base):
            return shutil.which(word) or word
        if base in ("torchrun", "deepspeed", "accelerate", "srun-python"):
            exe = shutil.which(word)
            if exe:
                try:
                    first = Path(exe).read_text(errors="replace").splitlines()[0]
                except (OSError, IndexError):
                    return None
                if first.startswith("#!"):
                    shebang = first[2:].strip().split()
                    return shebang[-1] if shebang and "env" in shebang[0] else shebang[0] if shebang else None
    return None


def software_stack(*, interpreter: str | None) -> dict:
    """torch (with its +cuXYZ suffix), the CUDA it was built for, NCCL wheel, triton, python."""
    python = interpreter or sys.executable
    out = _run([python, "-c", _SOFTWARE_PROBE])
    try:
        facts = json.loads(out) if out else {}
    except json.JSONDecodeError:
        facts = {}
    if not facts:
        facts = {"software_probe": f"could not run {python}"}
    torch_version = facts.get("torch")
    if torch_version and "+" in torch_version:
        facts["torch_cuda_suffix"] = torch_version.split("+", 1)[1]
    return facts


def host_facts() -> dict:
    return {"hostname": socket.gethostname(), "cpu_count": os.cpu_count(), "platform": sys.platform}


def resolve_alloc_conf(environ: dict, *, torch_version: str | None) -> dict:
    """Which allocator overlay reaches the CUDA context (seed 003: the receipt records it).

    torch >= 2.9 reads PYTORCH_ALLOC_CONF first and falls back to the old PYTORCH_CUDA_ALLOC_CONF
    name (c10/core/AllocatorConfig.cpp); older torch reads only PYTORCH_CUDA_ALLOC_CONF."""
    new, old = environ.get("PYTORCH_ALLOC_CONF"), environ.get("PYTORCH_CUDA_ALLOC_CONF")
    m = re.match(r"(\d+)\.(\d+)", torch_version or "")
    knows_new = None if m is None else (int(m.group(1)), int(m.group(2))) >= (2, 9)
    if knows_new is False:
        effective, source = old, "PYTORCH_CUDA_ALLOC_CONF" if old is not None else None
    elif new is not None:
        effective, source = new, "PYTORCH_ALLOC_CONF"
    else:
        effective, source = old, "PYTORCH_CUDA_ALLOC_CONF (alias)" if old is not None else None
    return {
        "effective": effective,
        "source": source,
        "conflict": new is not None and old is not None and new != old,
        "torch_reads_alloc_conf": knows_new,
    }


_CACHE_PATH_VARS = ("HF_HOME", "TORCH_HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")


def _on_root_volume(path: str) -> bool:
    """Same filesystem device as '/'; a path not created yet is judged by its nearest existing parent."""
    p = Path(path).expanduser().absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return os.stat(p).st_dev == os.stat("/").st_dev
    except OSError:
        return False


def preflight_facts(*, environ: dict, regime: str | None, compile_window_s: float | None,
                    expect_cuda: str | None, data_paths: tuple[str, ...] = (), python: str | None = None):
    """Probe this machine for receipts.analysis.preflight's rules (they stay pure)."""
    from receipts.analysis.preflight import PathFact, PreflightFacts
    from receipts.errors import ReceiptsError
    from receipts.ingest.topology import parse_text as parse_topology
    from receipts.schema.secrets import env_overlay, load_env_rules

    gpus = nvidia_smi_gpus()
    links: tuple = ()
    topo_ok = False
    text = topology_text()
    if text:
        try:
            links = tuple(parse_topology(text).gpu_pairs())
            topo_ok = True
        except ReceiptsError:
            topo_ok = False
    software = software_stack(interpreter=python)
    paths = [PathFact(name, environ[name], _on_root_volume(environ[name]))
             for name in _CACHE_PATH_VARS if environ.get(name)]
    paths += [PathFact("data_path", p, _on_root_volume(p)) for p in data_paths]
    return PreflightFacts(
        gpu_model=gpus.get("gpu_model"), gpu_count=gpus.get("gpu_count"), gpu_links=links,
        topology_available=topo_ok, numa_balancing=numa_balancing(),
        env=env_overlay(environ, rules=load_env_rules()), regime=regime, compile_window_s=compile_window_s,
        torch_version=software.get("torch"), expect_cuda=expect_cuda, paths=tuple(paths),
        gpu_probe=gpus.get("gpu_probe"),
    )
