"""`python -m torch.utils.collect_env` output -> the software stack a receipt compares.

The report is 'Key: value' lines, except 'GPU models and configuration:' which is either one
value ('NVIDIA H100 80GB HBM3' when only one GPU) or a list of 'GPU i: name' lines below it, and
the '[pip3] name==version' / '[conda] name version' library list at the end. Excerpts pasted in
issues are often truncated; every field is optional and absence is recorded as absence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from receipts.errors import InputError
from receipts.ingest.plaintext import read_text

FORMAT = "collect_env"
_KEYS = {
    "PyTorch version": "torch",
    "CUDA used to build PyTorch": "torch_built_cuda",
    "CUDA runtime version": "cuda_runtime",
    "Nvidia driver version": "driver",
    "cuDNN version": "cudnn",
    "OS": "os",
    "Python version": "python",
    "Is CUDA available": "cuda_available",
    "ROCM used to build PyTorch": "rocm",
}
_NOT_KNOWN = ("Could not collect", "N/A", "")


@dataclass(frozen=True)
class CollectEnv:
    software: dict[str, str]                      # torch, torch_cuda_suffix, cuda, driver, nccl, ...
    gpus: tuple[str, ...] = ()                    # one model name per GPU, in index order
    libraries: dict[str, str] = field(default_factory=dict)  # pip/conda name -> version

    @property
    def gpu_model(self) -> str | None:
        return self.gpus[0] if self.gpus else None

    @property
    def gpu_count(self) -> int | None:
        return len(self.gpus) or None


def torch_cuda_suffix(version: str | None) -> str | None:
    """'2.5.1+cu124' -> 'cu124'; a CPU build ('+cpu') -> 'cpu'; no local part -> None."""
    if not version or "+" not in version:
        return None
    return version.split("+", 1)[1].strip() or None


def parse_text(text: str, *, path: str | Path = "<collect_env>") -> CollectEnv:
    lines = text.splitlines()
    if not any(line.startswith(("PyTorch version:", "Collecting environment information")) for line in lines):
        raise InputError(path, "not `python -m torch.utils.collect_env` output (no 'PyTorch version:' line)")
    software: dict[str, str] = {}
    gpus: list[str] = []
    libraries: dict[str, str] = {}
    for i, line in enumerate(lines):
        key, sep, value = line.partition(":")
        value = value.strip()
        if sep and key in _KEYS and value not in _NOT_KNOWN:
            if value.startswith("Probably one of the following"):
                # cuDNN found only as library files: the first one's soname carries the version
                m = re.search(r"\.so\.(\d+(?:\.\d+)*)\s*$", lines[i + 1] if i + 1 < len(lines) else "")
                if not m:
                    continue
                value = m.group(1)
            software[_KEYS[key]] = value
        elif key == "GPU models and configuration":
            if value.startswith("GPU "):
                gpus.append(value.split(":", 1)[1].strip())
            elif value:
                gpus.append(value)
            for follow in lines[i + 1:]:
                m = re.match(r"^GPU (\d+): (.+?)(?: \(UUID: .*\))?$", follow.strip())
                if not m:
                    break
                gpus.append(m.group(2).strip())
        m = re.match(r"^\[(pip3?|conda)\]\s+([A-Za-z0-9_.\-]+)(?:==|\s+)([^\s]+)", line.strip())
        if m:
            libraries[m.group(2).lower()] = m.group(3)
    suffix = torch_cuda_suffix(software.get("torch"))
    if suffix:
        software["torch_cuda_suffix"] = suffix
    if "torch_built_cuda" in software:
        software["cuda"] = software["torch_built_cuda"]
    nccl = next((v for k, v in libraries.items() if k.startswith("nvidia-nccl")), None)
    if nccl:
        software["nccl"] = nccl
    return CollectEnv(software=software, gpus=tuple(gpus), libraries=libraries)


def parse(path: Path) -> CollectEnv:
    return parse_text(read_text(path), path=path)
