"""The one place that decides which parser reads a file."""

from __future__ import annotations

import gzip
import importlib
from pathlib import Path
from types import ModuleType

from receipts.errors import InputError
from receipts.ingest.textlog import LogText

# Text-log formats, most specific first. Each module has FORMAT, detect(head_lines) and parse(LogText).
LOG_FORMATS = ("native", "megatron", "nanochat", "torchtitan", "modded_nanogpt", "mllog")
# Names users pass to --format, mapped to modules.
FORMAT_ALIASES = {
    "receipt": "native", "native": "native", "megatron": "megatron", "nemo": "megatron",
    "megatron-deepspeed": "megatron", "nanochat": "nanochat", "torchtitan": "torchtitan",
    "modded-nanogpt": "modded_nanogpt", "modded_nanogpt": "modded_nanogpt", "mllog": "mllog", "mlperf": "mllog",
}
PROFILE_FORMATS = ("nsys", "kineto")
SYSINFO_FORMATS = ("topology", "collect_env", "nccl_tests")

SQLITE_MAGIC = b"SQLite format 3\x00"
GZIP_MAGIC = b"\x1f\x8b"


def log_parser(name: str) -> ModuleType:
    return importlib.import_module(f"receipts.ingest.{name}")


def sniff_kind(path: Path) -> str:
    """'log' | 'nsys' | 'nsys-gz' | 'nsys-rep' | 'kineto' | 'kineto-dir' | 'topology' | 'collect_env' |
    'nccl_tests', decided from content, not names."""
    path = Path(path)
    if path.is_dir():
        if any(p.name.endswith((".json", ".json.gz")) for p in path.iterdir() if p.is_file()):
            return "kineto-dir"
        raise InputError(path, "is a directory with neither a run.log (a `receipts run` directory) nor "
                               "PyTorch profiler traces (*.pt.trace.json[.gz])")
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from exc
    if head.startswith(SQLITE_MAGIC):
        return "nsys"
    if path.suffix == ".nsys-rep" or path.suffix == ".qdrep":
        return "nsys-rep"
    if head.startswith(GZIP_MAGIC):
        try:
            with gzip.open(path, "rb") as f:
                inner = f.read(4096)
        except (OSError, EOFError) as exc:
            raise InputError(path, f"gzip stream is corrupt or cut short ({exc}); expected a gzipped "
                                   "PyTorch profiler trace (.pt.trace.json.gz)") from exc
        if inner.startswith(SQLITE_MAGIC):
            return "nsys-gz"  # exports are gzipped to travel; SQLite needs a real file
        return "kineto" if inner.lstrip().startswith(b"{") else "log"
    from receipts.ingest import sysinfo

    kind = sysinfo.detect(head.decode("utf-8", errors="replace"))
    if kind is not None:
        return kind
    if head.lstrip().startswith(b"{") and (b'"traceEvents"' in head or b'"schemaVersion"' in head
                                           or b'"deviceProperties"' in head or b'"distributedInfo"' in head):
        return "kineto"
    return "log"


def detect_log_format(log: LogText) -> str:
    head = log.head(2000)
    for name in LOG_FORMATS:
        try:
            module = log_parser(name)
        except ModuleNotFoundError:
            continue
        if module.detect(head):
            return name
    raise InputError(
        log.path,
        "unknown log format: no line in the first 2000 looks like a RECEIPT record, a Megatron "
        "'iteration N/M' line, a nanochat 'step N/M | ... | dt:' line, a torchtitan 'step: N loss:' line, "
        "a modded-nanogpt 'step:N/M ... train_time:' line or a ':::MLLOG' record (use --format to force one)",
    )
