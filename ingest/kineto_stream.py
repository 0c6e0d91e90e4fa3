"""Streaming reader for PyTorch profiler (Kineto) Chrome traces: keeps only the events the anatomy needs.

FORMATS.md: traces of hundreds of MB are common (HTA #250 needed 950 GB for 200 GB in memory), so the
file is streamed in blocks, split into events at the separator the writer used between top-level
events, and only events whose category the anatomy needs are JSON-decoded (GPU kernels, memcpy,
memset; runtime/driver launches, for correlation; user annotations; ProfilerStep#N). A split that
falls inside a string or nested object leaves a fragment that does not decode: it is joined to the
next piece and retried, so odd layouts cost speed, never correctness.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from receipts.errors import InputError

try:  # optional: about 2x faster decoding of the kept events
    import orjson

    _loads: Callable[..., Any] = orjson.loads
    _DecodeError: tuple[type[Exception], ...] = (orjson.JSONDecodeError, UnicodeDecodeError)
except ImportError:  # pragma: no cover
    _loads = json.loads  # orjson is a dependency; this is the fallback when its wheel is missing
    _DecodeError = (json.JSONDecodeError, UnicodeDecodeError)

_BLOCK_BYTES = 8 << 20
_MAX_JOINS = 256  # fragments re-joined before an undecodable event is called corrupt
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[\s*')
_CAT = re.compile(rb'"cat"\s*:\s*"([^"]*)"')
# Launch-like runtime/driver calls whose correlation id reaches a GPU activity: cudaLaunchKernel,
# cudaLaunchKernelExC (newer GPUs, HTA #61), cuLaunchKernel(Ex), hip(Ext)(Module)LaunchKernel,
# cudaGraphLaunch, cudaLaunchCooperativeKernel, cudaMemcpy*/cudaMemset* (their gpu_memcpy/memset).
_LAUNCH = re.compile(rb'"name"\s*:\s*"[^"]*(Launch|Memcpy|Memset|memcpy|memset)')
_GPU_CATS = {b"kernel": "kernel", b"gpu_memcpy": "memcpy", b"gpu_memset": "memset",
             b"Kernel": "kernel", b"Memcpy": "memcpy", b"Memset": "memset"}  # capitalised: Kineto ~2021
_LAUNCH_CATS = {b"cuda_runtime", b"cuda_driver", b"Runtime"}
_STEP_CATS = {b"cpu_op", b"user_annotation", b"Operator"}
# Categories only Kineto writes; a Chrome trace without any of them (and without Kineto's top-level
# keys) is another tool's trace and is refused rather than read as an empty profile.
_KINETO_CATS = {b"cpu_op", b"user_annotation", b"gpu_user_annotation", b"cuda_runtime", b"cuda_driver",
                b"kernel", b"gpu_memcpy", b"gpu_memset", b"python_function", b"ac2g", b"Operator",
                b"Runtime", b"Kernel", b"Trace"}
_KINETO_CAT = re.compile(rb'"cat"\s*:\s*"(' + b"|".join(sorted(_KINETO_CATS)) + rb')"')
# Where an event the anatomy needs may be: its category (ProfilerStep#N names are found apart).
_NEEDED_CATS = rb'(kernel|gpu_memcpy|gpu_memset|Kernel|Memcpy|Memset|cuda_runtime|cuda_driver|Runtime|user_annotation)"'
_NEEDED = re.compile(rb'"cat"\s*:\s*"' + _NEEDED_CATS)
_NEEDED_KINETO = re.compile(rb'"cat": "' + _NEEDED_CATS)
KINETO_KEYS = ("schemaVersion", "deviceProperties", "distributedInfo", "baseTimeNanoseconds")
_STEP_NAME = re.compile(r"^ProfilerStep\s*#\s*(\d{1,18})$")


@dataclass
class Trace:
    """What one file leaves after streaming: metadata and the kept events, column-wise."""

    path: Path
    meta: dict = field(default_factory=dict)
    gpu: dict[str, list] = field(default_factory=lambda: {k: [] for k in ("name", "kind", "ts", "dur", "device", "stream", "corr")})
    launch: dict[str, list] = field(default_factory=lambda: {k: [] for k in ("corr", "pid", "ts")})
    step: dict[str, list] = field(default_factory=lambda: {k: [] for k in ("step", "pid", "ts", "dur")})
    note: dict[str, list] = field(default_factory=lambda: {k: [] for k in ("name", "pid", "ts", "dur")})
    kineto_events: int = 0


def _open(path: Path):
    with open(path, "rb") as f:
        magic = f.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def _read(stream, path: Path) -> bytes:
    try:
        return stream.read(_BLOCK_BYTES)
    except (EOFError, OSError, zlib.error) as exc:
        raise InputError(path, f"gzip stream is corrupt or cut short ({exc}); expected a complete "
                               "PyTorch profiler trace (.pt.trace.json.gz)") from exc


def _json_object(text: bytes, path: Path, what: str) -> dict:
    try:
        obj = json.loads(text)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer of more than 4,300 digits
        raise InputError(path, f"{what} is not valid JSON ({str(exc)[:200]}); expected a Kineto Chrome trace") from exc
    if not isinstance(obj, dict):
        raise InputError(path, f"{what} is not a JSON object; expected a Kineto Chrome trace")
    return obj


# |ts| and |dur| in microseconds: beyond this, ts * 1000 + a nanosecond epoch base overflows int64.
_MAX_US = 9.0e15


def _microseconds(trace: Trace, ev: dict, key: str) -> float:
    value = ev[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not -_MAX_US < value < _MAX_US:
        raise InputError(trace.path, f"event {str(ev.get('name', ''))[:60]!r} has {key!r} = {str(value)[:40]}; "
                                     "expected a finite number of microseconds (a damaged trace?)")
    return float(value)


def _id(value) -> int | None:
    """A device, stream or correlation id: an integer that fits int64, else unknown."""
    return value if isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63 else None


def _take(trace: Trace, ev: dict) -> None:
    """Keep the fields the anatomy needs from one decoded event."""
    args = ev.get("args")
    args = args if isinstance(args, dict) else {}
    cat = str(ev.get("cat", "")).encode()
    if ev.get("ts") is None or ev.get("dur") is None:
        return
    ts, dur = _microseconds(trace, ev, "ts"), _microseconds(trace, ev, "dur")
    name = str(ev.get("name", ""))
    kind = _GPU_CATS.get(cat)
    if kind is not None:
        g = trace.gpu
        g["name"].append(name)
        g["kind"].append(kind)
        g["ts"].append(float(ts))
        g["dur"].append(float(dur))
        g["device"].append(_id(args.get("device")))
        g["stream"].append(_id(args.get("stream")))
        g["corr"].append(_id(args.get("correlation")))
        return
    step = _STEP_NAME.match(name)
    if step is not None and cat in _STEP_CATS:
        s = trace.step
        s["step"].append(int(step.group(1)))
        s["pid"].append(str(ev.get("pid")))
        s["ts"].append(float(ts))
        s["dur"].append(float(dur))
    elif cat == b"user_annotation":
        n = trace.note
        n["name"].append(name)
        n["pid"].append(str(ev.get("pid")))
        n["ts"].append(float(ts))
        n["dur"].append(float(dur))
    elif cat in _LAUNCH_CATS and _id(args.get("correlation")) is not None:
        la = trace.launch
        la["corr"].append(_id(args["correlation"]))
        la["pid"].append(str(ev.get("pid")))
        la["ts"].append(float(ts))


class _Layout(Exception):
    """The fast scan met a piece that is not one whole event: redo the file with the healing scan."""


def _scan_fast(trace: Trace, region: bytes, sep: bytes) -> None:
    """Find the needed events by regex over a block of whole events; decode only those."""
    if not trace.kineto_events and _KINETO_CAT.search(region):
        trace.kineto_events = 1
    # Kineto writes '"cat": "x"' everywhere; a literal prefix lets the regex engine skip ahead (2x).
    uniform = region.count(b'"cat"') == region.count(b'"cat": "')
    hits = [(m.start(), m.end(), m.group(1)) for m in (_NEEDED_KINETO if uniform else _NEEDED).finditer(region)]
    at = region.find(b'"ProfilerStep')
    while at >= 0:
        hits.append((at, at + 13, None))
        at = region.find(b'"ProfilerStep', at + 13)
    seen = set()
    for first, last, cat in hits:
        start = region.rfind(sep, 0, first)
        start = 0 if start < 0 else start + len(sep)
        if start in seen:
            continue  # a ProfilerStep user_annotation is found twice
        seen.add(start)
        end = region.find(sep, last)
        piece = region[start:] if end < 0 else region[start:end]
        if cat in _LAUNCH_CATS and _LAUNCH.search(piece) is None:
            continue
        try:
            _take(trace, _loads(b"{" + piece + b"}"))
        except _DecodeError as exc:
            raise _Layout from exc


def _keep(trace: Trace, piece: bytes) -> bool:
    """Healing scan: decode one piece if needed; False when it is not a whole event (join it to the next)."""
    m = _CAT.search(piece)
    if m is None:
        return True  # metadata ('M') and instant events without a category: nothing to keep
    cat = m.group(1)
    if cat in _KINETO_CATS:
        trace.kineto_events += 1
    needed = (cat in _GPU_CATS or (cat in _LAUNCH_CATS and _LAUNCH.search(piece) is not None)
              or cat == b"user_annotation" or (cat in _STEP_CATS and b"ProfilerStep" in piece))
    if needed:
        try:
            _take(trace, _loads(b"{" + piece + b"}"))
        except _DecodeError:
            return False
    return True


def stream_trace(path: Path) -> Trace:
    """Stream one trace file; header/footer keys into meta, kept events into columns."""
    try:
        return _stream_once(path, fast=True)
    except _Layout:
        return _stream_once(path, fast=False)


def _stream_once(path: Path, *, fast: bool) -> Trace:
    trace = Trace(path)
    try:
        stream = _open(path)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from exc
    with stream:
        buf, eof = b"", False
        while (m := _EVENTS_KEY.search(buf)) is None:
            block = _read(stream, path)
            if not block:
                raise InputError(path, "no \"traceEvents\" array: not a Chrome trace (expected a PyTorch "
                                       "profiler export, *.pt.trace.json[.gz])")
            buf += block
        trace.meta = _json_object(buf[:m.start()] + b'"traceEvents": null}', path, "the header before traceEvents")
        body = buf[m.end():]
        while len(body) < 2 and not eof:
            block = _read(stream, path)
            eof = not block
            body += block
        if body.startswith(b"]"):
            tail = body[1:] + b"".join(iter(lambda: _read(stream, path), b""))
        else:
            if not body.startswith(b"{"):
                raise InputError(path, "traceEvents is not an array of event objects")
            sep = _separator(body, path)
            pending, carry, joins = body[1:], b"", 0
            while True:
                if fast:
                    cut = pending.rfind(sep)
                    if cut >= 0:
                        _scan_fast(trace, pending[:cut], sep)
                        pending = pending[cut + len(sep):]
                else:
                    pieces = pending.split(sep)
                    pending = pieces.pop()
                    for piece in pieces:
                        piece = carry + piece
                        carry, joins = (b"", 0) if _keep(trace, piece) else (piece + sep, joins + 1)
                        if joins > _MAX_JOINS:  # not a split inside a string or nested object: corrupt
                            raise InputError(path, "a trace event is not valid JSON: " + repr(carry[:120])[2:-1])
                if eof:
                    break
                block = _read(stream, path)
                eof = not block
                pending += block
            tail = _last_event(trace, carry + pending, path)
    footer = tail.strip()
    if footer.startswith(b","):
        trace.meta.update(_json_object(b"{" + footer[1:], path, "the trailer after traceEvents"))
    elif footer != b"}":
        raise InputError(path, "unexpected text after the traceEvents array; expected the end of the trace object")
    return trace


def _separator(body: bytes, path: Path) -> bytes:
    """The bytes between two top-level events as this writer lays them out ('},\\n  {' for Kineto)."""
    text = body[: 1 << 20].decode("utf-8", "replace")
    try:
        _, end = json.JSONDecoder().raw_decode(text)
    except ValueError as exc:
        raise InputError(path, f"first trace event is not valid JSON ({str(exc)[:200]}); file cut short?") from exc
    after = text[end:]
    m = re.match(r"\s*,\s*\{", after)
    return ("}" + m.group(0)).encode() if m else b"\x00no-separator\x00"


def _last_event(trace: Trace, rest: bytes, path: Path) -> bytes:
    """Decode the final event and return what follows the array's closing bracket."""
    text = rest.decode("utf-8", "replace")
    try:
        ev, end = json.JSONDecoder().raw_decode("{" + text)
    except ValueError as exc:
        raise InputError(path, f"trace ends inside traceEvents ({str(exc)[:200]}); the file looks cut short") from exc
    if isinstance(ev, dict):
        _take(trace, ev)
        trace.kineto_events += str(ev.get("cat", "")).encode() in _KINETO_CATS
    m = re.match(r"\s*\]", text[end - 1:])
    if m is None:
        raise InputError(path, "traceEvents array is not closed; the file looks cut short")
    return text[end - 1 + m.end():].encode()
