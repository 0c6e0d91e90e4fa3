"""PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot`, `.pickle` or `.pickle.gz`) -> MemoryGeometry.

A snapshot is a pickle of plain dicts and lists: `segments` (the allocator's segments and their blocks at
the dump), `device_traces` (per device, the allocation events recorded since `_record_memory_history`)
and `allocator_settings`. It is read without torch and without running anything: the unpickler refuses
every class and function a pickle can name (find_class) and every persistent reference, so a pickle
that would call `os.system` or build an object is refused, naming the file, before anything runs.

Per device, what it gives (ingest/memory_replay.py replays the trace):
- peak_allocated_bytes: the peak of allocated bytes over the trace, block sizes as the allocator counts
  them (what `torch.cuda.max_memory_allocated` reports over the same window);
- peak_reserved_bytes: the peak of reserved bytes (cudaMalloc'ed segments) over the trace; the dump's own
  reserved bytes (`segments`) are in detail as reserved_at_dump_bytes;
- fragmentation_at_peak_bytes: reserved minus allocated at the moment of the allocated peak;
- resident_bytes: the lowest allocated level the trace passes through: what stays between steps;
- categories: the bytes live at the peak by the phase that allocated them (schema.memory.SNAPSHOT_CATEGORIES):
  `resident` for blocks allocated before recording began; else from the allocation's frames, as torch's own
  tools name them: an optimizer's step (torch/optim/) is `optimizer`, the autograd engine or a hook it runs
  (torch/autograd/, Tensor.backward) is `backward`, a module's forward (recomputation under activation
  checkpointing included) is `forward`, other frames are `other`. The autograd engine's own threads have no
  Python frames: an allocation without frames during a backward pass (after a backward allocation, before
  the next forward or optimizer one) is `backward`, elsewhere `unattributed`. An entry's own `category`
  (snapshots made from a profile by torch.cuda._memory_viz) is taken as it is.
A snapshot without trace events gives the dump's state: allocated and reserved at the dump, categories from
the blocks' frames.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from receipts.errors import InputError
from receipts.ingest import snapshot_stream
from receipts.ingest.memory_replay import AllocatorSettings, SettingsError, layout_at_dump, layout_at_start, replay
from receipts.schema.memory import MemoryGeometry

FORMAT = "memory-snapshot"
PICKLE_PROTOCOLS = range(2, 6)    # b'\x80' + protocol: what pickle.dump writes since Python 3
_ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map",
            "segment_unmap", "snapshot", "oom", "user_defined")
MAX_BYTES = 1 << 50               # a size beyond any device (1 PiB): a corrupt field, not memory
MAX_DEVICE = (1 << 31) - 1        # the store's device column is a 32-bit integer
_BLOCK_STATES = ("active_allocated", "active_awaiting_free", "active_pending_free", "inactive")


def detect(head: bytes) -> bool:
    """A pickle in protocol 2-5 (a snapshot is one); what it holds is checked when read."""
    return len(head) >= 2 and head[0] == 0x80 and head[1] in PICKLE_PROTOCOLS


def load(path: Path) -> Any:
    """The pickle's plain content, its traces as snapshot_stream.Trace columns; InputError for anything else (or a
    file that is not a whole pickle). Read as a stream: memory follows the distinct call stacks, not the file."""
    path = Path(path)
    try:
        with open(path, "rb") as raw:
            gz = raw.read(2) == b"\x1f\x8b"
        with (gzip.open(path, "rb") if gz else open(path, "rb")) as f:
            return snapshot_stream.load(f, phase_of_pairs)
    except snapshot_stream.Refused as exc:
        raise InputError(path, f"refused: not a plain PyTorch memory snapshot ({exc}); a snapshot holds only "
                               "dicts, lists, strings and numbers, and nothing else is unpickled") from None
    except snapshot_stream.Shape as exc:
        raise InputError(path, str(exc)) from None
    except (OSError, EOFError, zlib.error) as exc:
        if isinstance(exc, gzip.BadGzipFile) or isinstance(exc, (EOFError, zlib.error)):
            raise InputError(path, f"not a whole pickle ({type(exc).__name__}: {exc}); expected a PyTorch memory "
                                   "snapshot from torch.cuda.memory._dump_snapshot") from None
        raise InputError(path, f"cannot read: {getattr(exc, 'strerror', None) or exc}") from exc
    except (snapshot_stream.Broken, ValueError, TypeError, IndexError, KeyError, MemoryError,
            RecursionError) as exc:
        raise InputError(path, f"not a whole pickle ({type(exc).__name__}: {exc}); expected a PyTorch memory "
                               "snapshot from torch.cuda.memory._dump_snapshot") from None


def parse(path: Path) -> tuple[MemoryGeometry, ...]:
    """One MemoryGeometry per device that has segments or trace events, in device order."""
    path = Path(path)
    data = load(path)
    if isinstance(data, list):  # `torch.cuda.memory_snapshot()`'s form: the segments alone
        data = {"segments": data}
    if not isinstance(data, dict) or not isinstance(data.get("segments"), list):
        raise InputError(path, "not a PyTorch memory snapshot: expected a dict with a 'segments' list "
                               "(torch.cuda.memory._dump_snapshot)")
    segments = [_segment(path, i, s) for i, s in enumerate(data["segments"])]
    traces = data.get("device_traces") or []
    if not isinstance(traces, list) or not all(isinstance(t, (list, snapshot_stream.Trace)) for t in traces):
        raise InputError(path, "'device_traces' must be a list of lists of trace entries, one per device")
    for device, trace in enumerate(traces):
        if isinstance(trace, list):   # a Trace was checked as it was read; a list here holds no entry dicts
            for i, entry in enumerate(trace):
                _entry(path, device, i, entry)
    settings_raw = data.get("allocator_settings")
    if settings_raw is not None and not isinstance(settings_raw, dict):
        raise InputError(path, f"'allocator_settings' is a {type(settings_raw).__name__}; expected a dict")
    try:
        settings = AllocatorSettings.of(settings_raw)
    except SettingsError as exc:
        raise InputError(path, f"allocator_settings.{exc.key} is {exc.value!r}; expected {exc.expected}") from None
    devices = sorted({int(s.get("device", 0)) for s in segments} | {d for d, t in enumerate(traces) if t})
    return tuple(_device(path, d, [s for s in segments if int(s.get("device", 0)) == d],
                         traces[d] if d < len(traces) else [], settings, settings_raw is not None)
                 for d in devices)


def _device(path: Path, device: int, segments: list[dict], trace: list[dict], settings: AllocatorSettings,
            has_settings: bool) -> MemoryGeometry:
    dump = layout_at_dump(segments)
    at_dump = {"allocated_at_dump_bytes": dump.allocated_bytes(), "reserved_at_dump_bytes": dump.reserved_bytes(),
               "segments": len(segments), "trace_events": len(trace), "device": device}
    warnings: list[str] = []
    if not has_settings:
        warnings.append("the snapshot has no allocator_settings (an older torch): block sizes assume the "
                        "defaults (512 B rounding, no max_split_size)")
    if not trace:
        categories = _block_categories(segments)
        allocated, reserved = at_dump["allocated_at_dump_bytes"], at_dump["reserved_at_dump_bytes"]
        return MemoryGeometry("snapshot", None, device, allocated, reserved, allocated, reserved - allocated,
                              categories=_ordered(categories),
                              detail={**at_dump, "measured": "the dump's state (no trace: record history to "
                                                             "replay a peak)"},
                              warnings=tuple(warnings))
    start, undone = layout_at_start(segments, trace, settings)
    result = replay(start, trace, _categories(trace), settings)
    if settings.expandable_segments:
        warnings.append("expandable segments: their mappings are replayed as segments of their own, so block "
                        "sizes near a mapping's edge may be off")
    if undone.misses or result.unplaced:
        warnings.append(f"{undone.misses + result.unplaced} trace event(s) did not fit the allocator's layout "
                        "(events lost from a full trace buffer?): those blocks are sized by rounding alone")
    if result.end_allocated_bytes != at_dump["allocated_at_dump_bytes"]:
        warnings.append(f"the replay ends at {result.end_allocated_bytes} allocated bytes, the dump's segments "
                        f"hold {at_dump['allocated_at_dump_bytes']}: the trace misses events")
    peak_at = trace[result.peak_index].get("time_us") if result.peak_index is not None else None
    detail = {**at_dump, "measured": "trace replay", "allocated_at_start_bytes": result.start_allocated_bytes,
              "peak_event": result.peak_index, "peak_time_us": peak_at,
              "recorded_from_us": trace[0].get("time_us"), "recorded_to_us": trace[-1].get("time_us"),
              "inferred_block_sizes": undone.guessed_frees, "unplaced_events": undone.misses + result.unplaced}
    return MemoryGeometry(
        "snapshot", None, device, result.peak_allocated_bytes, result.peak_reserved_bytes,
        result.lowest_allocated_bytes, result.reserved_at_peak_bytes - result.peak_allocated_bytes,
        ooms=result.ooms, categories=_ordered({k: v for k, v in result.categories_at_peak.items() if v}),
        detail=detail, warnings=tuple(warnings))


def _ordered(categories: dict[str, int]) -> tuple[tuple[str, int], ...]:
    from receipts.schema.memory import SNAPSHOT_CATEGORIES

    rank = {name: i for i, name in enumerate(SNAPSHOT_CATEGORIES)}
    return tuple(sorted(categories.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])))


# ---- categories from frames ----------------------------------------------------------------------------
def phase_of(frames: Any) -> str | None:
    """'optimizer' | 'backward' | 'forward' | 'recompute' from an allocation's frames (innermost first, dicts, or a
    snapshot_stream.Frames token that holds the answer); None when none of them says (no frames, or only the
    script's own code)."""
    if isinstance(frames, snapshot_stream.Frames):
        return frames.phase
    return phase_of_pairs([(str(f.get("filename", "")), str(f.get("name", ""))) for f in frames])


def phase_of_pairs(frames: list[tuple[str, str]]) -> str | None:
    """phase_of over (filename, name) pairs."""
    files = [f.replace("\\", "/") for f, _ in frames]
    names = [n for _, n in frames]
    if any("/torch/optim/" in f for f in files):
        return "optimizer"
    if any("/torch/utils/checkpoint.py" in f for f in files) and "forward" in names:
        return "recompute"
    if (any("/torch/autograd/" in f or f.endswith("/torch/_tensor.py") for f in files)
            or any("torch::autograd::Engine" in n for n in names)):
        return "backward"
    if "forward" in names or "_call_impl" in names:
        return "forward"
    return None


class Categories(Sequence):
    """Each trace entry's category (None for entries that are not allocations), a byte each: a trace of millions of
    entries keeps its categories in megabytes, not in a list of pointers."""

    def __init__(self) -> None:
        self.codes = bytearray()
        self.names: list[str | None] = [None]

    def append(self, name: str | None) -> None:
        try:
            code = self.names.index(name)
        except ValueError:
            self.names.append(name)
            code = len(self.names) - 1
        self.codes.append(code)

    def __getitem__(self, i):
        return self.names[self.codes[i]]

    def __len__(self) -> int:
        return len(self.codes)

    def __iter__(self):
        return (self.names[c] for c in self.codes)

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, (Categories, list)) else NotImplemented

    __hash__ = None  # type: ignore[assignment]


def _categories(trace: Any) -> Categories:
    """Each allocation's category (None for other entries), following the phase through frameless ones."""
    out = Categories()
    phase = None
    for e in trace:
        if e["action"] != "alloc":
            out.append(None)
            continue
        if isinstance(e.get("category"), str):
            out.append(e["category"])
            continue
        frames = e.get("frames") or []
        found = phase_of(frames)
        if found == "recompute":          # activations rebuilt inside backward: forward memory, backward goes on
            out.append("forward")
            continue
        if found is not None:
            phase = found
            out.append(found)
        elif phase == "backward":         # the autograd engine's threads carry no Python frames
            out.append("backward")
        else:
            out.append("other" if frames else "unattributed")
    return out


def _block_categories(segments: list[dict[str, Any]]) -> dict[str, int]:
    """Without a trace: the live blocks at the dump, by their allocation frames."""
    out: dict[str, int] = {}
    for seg in segments:
        for b in seg["blocks"]:
            if b["state"] != "active_allocated":
                continue
            frames = b.get("frames") or []
            phase = phase_of(frames)
            name = "forward" if phase == "recompute" else phase or ("other" if frames else "unattributed")
            out[name] = out.get(name, 0) + int(b["size"])
    return out


# ---- shape checks: each names where the snapshot departs from torch's format ---------------------------
def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _segment(path: Path, i: int, seg: Any) -> dict[str, Any]:
    where = f"segments[{i}]"
    if not isinstance(seg, dict):
        raise InputError(path, f"{where} is not a dict; expected a segment with address, total_size and blocks")
    for key in ("address", "total_size"):
        if not _int(seg.get(key)):
            raise InputError(path, f"{where} has no integer {key!r}")
    if not 0 <= seg["total_size"] <= MAX_BYTES:
        raise InputError(path, f"{where}.total_size is {seg['total_size']}; expected bytes from 0 to 2**50")
    if "device" in seg and not (_int(seg["device"]) and 0 <= seg["device"] <= MAX_DEVICE):
        raise InputError(path, f"{where}.device is {seg['device']!r}; expected a CUDA device index, an integer "
                               f"from 0 to {MAX_DEVICE}")
    if not isinstance(seg.get("blocks"), list):
        raise InputError(path, f"{where} has no 'blocks' list")
    total = 0
    for j, b in enumerate(seg["blocks"]):
        if not isinstance(b, dict) or not _int(b.get("size")) or b["size"] <= 0:
            raise InputError(path, f"{where}.blocks[{j}] has no positive integer 'size'")
        if b.get("state") not in _BLOCK_STATES:
            raise InputError(path, f"{where}.blocks[{j}] has state {b.get('state')!r}; expected one of "
                                   f"{', '.join(_BLOCK_STATES)}")
        total += b["size"]
    if total != seg["total_size"]:
        raise InputError(path, f"{where}: its blocks add up to {total} bytes, its total_size is {seg['total_size']}")
    return seg


def _entry(path: Path, device: int, i: int, e: Any) -> None:
    where = f"device_traces[{device}][{i}]"
    if not isinstance(e, dict) or e.get("action") not in _ACTIONS:
        action = e.get("action") if isinstance(e, dict) else None
        raise InputError(path, f"{where} has action {action!r}; expected one of {', '.join(_ACTIONS)}")
    if e["action"] in ("snapshot", "user_defined", "oom"):
        return
    if not _int(e.get("addr")) or not _int(e.get("size")) or not 0 <= e["size"] <= MAX_BYTES:
        raise InputError(path, f"{where} ({e['action']}) needs integer 'addr' and 'size' (bytes from 0 to 2**50)")
    frames = e.get("frames")
    if frames is not None and not (isinstance(frames, list) and all(isinstance(f, dict) for f in frames)):
        raise InputError(path, f"{where} has 'frames' that are not a list of frame dicts")
