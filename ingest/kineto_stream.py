"""Streaming reader for PyTorch profiler (Kineto) Chrome traces: keeps only the events the anatomy needs.

FORMATS.md: traces of hundreds of MB are common (HTA #250 needed 950 GB for 200 GB in memory), so the
file is streamed in blocks of whole events (cut at the separator the writer used between top-level
events) and nothing but the kept columns outlives a block. Each block is decoded in one msgspec call
into a typed struct holding only the fields the anatomy reads (category, name, pid, ts, dur and three
args): every other key is skipped in C, no Python object is built for it, and picking the kept events
(GPU kernels, memcpy, memset; runtime/driver launches, for correlation; user annotations;
ProfilerStep#N) is a few list comprehensions per block, not a Python call per event.

A block that does not decode that way (a split inside a string or nested object, or a field of an
unexpected type) sends the file to the reference path: each needed event decoded on its own, a
fragment that does not decode joined to the next piece and retried, and a damaged value named. Odd
layouts cost speed, never correctness; both paths keep the same columns (tests/test_kineto_stream.py).
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter, methodcaller
from pathlib import Path
from typing import Any, Callable, cast

import msgspec
import numpy as np
import polars as pl

from receipts.errors import InputError

try:  # optional: about 2x faster decoding of the kept events
    import orjson

    _loads: Callable[..., Any] = orjson.loads
    _DecodeError: tuple[type[Exception], ...] = (orjson.JSONDecodeError, UnicodeDecodeError)
except ImportError:  # pragma: no cover
    _loads = json.loads  # orjson is a dependency; this is the fallback when its wheel is missing
    _DecodeError = (json.JSONDecodeError, UnicodeDecodeError)

_GzipError: tuple[type[Exception], ...] = (EOFError, OSError, zlib.error)
_gzip_open: Callable[..., Any] = gzip.open
try:  # ISA-L's inflate: 3x zlib's on these traces; gzip stays the fallback where its wheel is missing
    from isal import igzip
    from isal.isal_zlib import error as _IsalError

    _gzip_open, _GzipError = igzip.open, (*_GzipError, cast(type[Exception], _IsalError))  # typed as an instance
except ImportError:  # pragma: no cover
    pass

_BLOCK_BYTES = 2 << 20  # a block and its decoded events stay in cache: 15% less CPU than 8 MiB blocks
_MAX_JOINS = 256  # fragments re-joined before an undecodable event is called corrupt
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[\s*')
_CAT = re.compile(rb'"cat"\s*:\s*"([^"]*)"')
# Launch-like runtime/driver calls whose correlation id reaches a GPU activity: cudaLaunchKernel,
# cudaLaunchKernelExC (newer GPUs, HTA #61), cuLaunchKernel(Ex), hip(Ext)(Module)LaunchKernel,
# cudaGraphLaunch, cudaLaunchCooperativeKernel, cudaMemcpy*/cudaMemset* (their gpu_memcpy/memset).
_LAUNCH = re.compile(rb'"name"\s*:\s*"[^"]*(Launch|Memcpy|Memset|memcpy|memset)')
_LAUNCH_NAME = re.compile(r"Launch|Memcpy|Memset|memcpy|memset")
_GPU_KIND = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset",
             "Kernel": "kernel", "Memcpy": "memcpy", "Memset": "memset"}  # capitalised: Kineto ~2021
_GPU_CATS = {k.encode(): v for k, v in _GPU_KIND.items()}
_LAUNCH_CATS = {b"cuda_runtime", b"cuda_driver", b"Runtime"}
_STEP_CATS = {b"cpu_op", b"user_annotation", b"Operator"}
_LAUNCH_STR = {c.decode() for c in _LAUNCH_CATS}
_STEP_STR = {c.decode() for c in _STEP_CATS}
_WANTED = {*_GPU_KIND, *_LAUNCH_STR, "user_annotation"}  # the categories a block keeps (ProfilerStep#N apart)
# Categories only Kineto writes; a Chrome trace without any of them (and without Kineto's top-level
# keys) is another tool's trace and is refused rather than read as an empty profile.
_KINETO_CATS = {b"cpu_op", b"user_annotation", b"gpu_user_annotation", b"cuda_runtime", b"cuda_driver",
                b"kernel", b"gpu_memcpy", b"gpu_memset", b"python_function", b"ac2g", b"Operator",
                b"Runtime", b"Kernel", b"Trace"}
_KINETO_CAT = re.compile(rb'"cat"\s*:\s*"(' + b"|".join(sorted(_KINETO_CATS)) + rb')"')
KINETO_KEYS = ("schemaVersion", "deviceProperties", "distributedInfo", "baseTimeNanoseconds")
_STEP_NAME = re.compile(r"^ProfilerStep\s*#\s*(\d{1,18})$")

# The kept columns, one table each; ts/dur stay float microseconds as the trace wrote them. Kernel names
# are categorical: a few thousand distinct names over 10^5..10^6 activities, each 100-300 bytes long,
# were most of the memory a large trace kept and every join and sort of the anatomy copied.
GPU_SCHEMA = {"name": pl.Categorical, "kind": pl.Utf8, "ts": pl.Float64, "dur": pl.Float64,
              "device": pl.Int64, "stream": pl.Int64, "corr": pl.Int64}
LAUNCH_SCHEMA = {"corr": pl.Int64, "pid": pl.Utf8, "ts": pl.Float64}
STEP_SCHEMA = {"step": pl.Int64, "pid": pl.Utf8, "ts": pl.Float64, "dur": pl.Float64}
NOTE_SCHEMA = {"name": pl.Utf8, "pid": pl.Utf8, "ts": pl.Float64, "dur": pl.Float64}
_SCHEMAS: dict[str, dict[str, Any]] = {"gpu": GPU_SCHEMA, "launch": LAUNCH_SCHEMA, "step": STEP_SCHEMA, "note": NOTE_SCHEMA}


class _Args(msgspec.Struct, gc=False):
    """The args the anatomy reads; any type is accepted here and judged per kept event (_ids)."""

    device: Any = None
    stream: Any = None
    correlation: Any = None


class _Event(msgspec.Struct, gc=False):
    """One trace event as a block decodes it: every other key is skipped without building an object.

    gc=False: decoded JSON cannot form a reference cycle, and tracking 10^5 structs a block made the
    collector run over them again and again (half the decode time)."""

    cat: str = ""
    name: str = ""
    pid: Any = None
    ts: float | None = None
    dur: float | None = None
    args: _Args | None = None


_BLOCK = msgspec.json.Decoder(list[_Event])
_NO_ARGS = _Args()


@dataclass
class Trace:
    """What one file leaves after streaming: metadata and the kept events, one frame per table."""

    path: Path
    meta: dict = field(default_factory=dict)
    gpu: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=GPU_SCHEMA))
    launch: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=LAUNCH_SCHEMA))
    step: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=STEP_SCHEMA))
    note: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=NOTE_SCHEMA))
    kineto_events: int = 0
    healed: bool = False  # True when a block needed the reference (per-event) path


class _Kept:
    """The kept columns while a file streams: whole blocks as frames, single events as rows until flushed."""

    def __init__(self) -> None:
        self.frames: dict[str, list[pl.DataFrame]] = {t: [] for t in _SCHEMAS}
        self.rows: dict[str, dict[str, list]] = {t: {c: [] for c in s} for t, s in _SCHEMAS.items()}

    def add(self, table: str, columns: dict[str, Any]) -> None:
        if len(next(iter(columns.values()))):
            self.frames[table].append(pl.DataFrame(columns, schema=_SCHEMAS[table], strict=False))

    def flush(self) -> None:
        for table, columns in self.rows.items():
            self.add(table, columns)
            self.rows[table] = {c: [] for c in columns}

    def into(self, trace: Trace) -> None:
        self.flush()
        for table, frames in self.frames.items():
            if frames:
                setattr(trace, table, pl.concat(frames, how="vertical", rechunk=False))  # no second copy


def _open(path: Path):
    with open(path, "rb") as f:
        magic = f.read(2)
    return _gzip_open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def _read(stream, path: Path) -> bytes:
    try:
        return stream.read(_BLOCK_BYTES)
    except _GzipError as exc:
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


def _bad_time(path: Path, name: object, key: str, value: object) -> InputError:
    return InputError(path, f"event {str(name)[:60]!r} has {key!r} = {str(value)[:40]}; "
                            "expected a finite number of microseconds (a damaged trace?)")


def _microseconds(trace: Trace, ev: dict, key: str) -> float:
    value = ev[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not -_MAX_US < value < _MAX_US:
        raise _bad_time(trace.path, ev.get("name", ""), key, value)
    return float(value)


def _id(value) -> int | None:
    """A device, stream or correlation id: an integer that fits int64, else unknown."""
    return value if isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63 else None


def _ids(values: list) -> pl.Series:
    """_id over a column: one C-level type check when every value is an int64 or null (real traces)."""
    if set(map(type, values)) <= {int, type(None)}:
        try:
            return pl.Series(values, dtype=pl.Int64)
        except (OverflowError, TypeError, pl.exceptions.PolarsError):
            pass  # an integer past int64: judged one by one below
    return pl.Series([_id(v) for v in values], dtype=pl.Int64)


def _take(kept: _Kept, trace: Trace, ev: dict) -> None:
    """Reference path: keep the fields the anatomy needs from one decoded event."""
    args = ev.get("args")
    args = args if isinstance(args, dict) else {}
    cat = str(ev.get("cat", "")).encode()
    if ev.get("ts") is None or ev.get("dur") is None:
        return
    ts, dur = _microseconds(trace, ev, "ts"), _microseconds(trace, ev, "dur")
    name = str(ev.get("name", ""))
    kind = _GPU_CATS.get(cat)
    if kind is not None:
        g = kept.rows["gpu"]
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
        s = kept.rows["step"]
        s["step"].append(int(step.group(1)))
        s["pid"].append(str(ev.get("pid")))
        s["ts"].append(float(ts))
        s["dur"].append(float(dur))
    elif cat == b"user_annotation":
        n = kept.rows["note"]
        n["name"].append(name)
        n["pid"].append(str(ev.get("pid")))
        n["ts"].append(float(ts))
        n["dur"].append(float(dur))
    elif cat in _LAUNCH_CATS and _id(args.get("correlation")) is not None:
        la = kept.rows["launch"]
        la["corr"].append(_id(args["correlation"]))
        la["pid"].append(str(ev.get("pid")))
        la["ts"].append(float(ts))


class _Layout(Exception):
    """The fast scan met a block it cannot take whole: redo the file with the reference path."""


_cat, _name, _pid, _ts, _dur, _args = (attrgetter(k) for k in ("cat", "name", "pid", "ts", "dur", "args"))
_step_prefix = methodcaller("startswith", "ProfilerStep")


def _having(events: list[_Event], test: Callable[[str], bool]) -> list[_Event]:
    """The events whose category passes `test`, in order; map/compress keep the loop in C."""
    return list(compress(events, map(test, map(_cat, events))))


def _timed(events: list[_Event], path: Path) -> tuple[list[_Event], list[float], list[float]]:
    """The events with both ts and dur (others carry no interval), each checked like _microseconds;
    returned with their ts and dur columns."""
    ts, dur = list(map(_ts, events)), list(map(_dur, events))
    if None in ts or None in dur:
        events = [e for e in events if e.ts is not None and e.dur is not None]
        ts, dur = list(map(_ts, events)), list(map(_dur, events))
    if events:
        t, d = np.array(ts, dtype=np.float64), np.array(dur, dtype=np.float64)
        bad = ~((np.abs(t) < _MAX_US) & (np.abs(d) < _MAX_US))  # NaN compares False: bad too
        if bad.any():
            e = events[int(np.argmax(bad))]
            key = "ts" if not abs(e.ts) < _MAX_US else "dur"  # type: ignore[arg-type]
            raise _bad_time(path, e.name, key, getattr(e, key))
    return events, ts, dur


def _args_of(events: list[_Event]) -> list[_Args]:
    """Each event's args, an empty _Args where it has none."""
    args = list(map(_args, events))
    return [a if a is not None else _NO_ARGS for a in args] if None in args else args


def _pids(events: list[_Event]) -> list[str] | pl.Series:
    """Each event's pid as text, as str() writes it; integers (real traces) through one polars cast."""
    pids = list(map(_pid, events))
    if set(map(type, pids)) == {int}:
        try:
            return pl.Series(pids, dtype=pl.Int64).cast(pl.Utf8)
        except (OverflowError, TypeError, pl.exceptions.PolarsError):
            pass  # an integer past int64
    return list(map(str, pids))


def _scan_block(kept: _Kept, trace: Trace, buf: bytearray, end: int) -> None:
    """Decode buf[:end], a JSON array of whole events, in one call; keep the needed ones column-wise."""
    if not trace.kineto_events and _KINETO_CAT.search(buf, 0, end):
        trace.kineto_events = 1
    try:
        with memoryview(buf) as view, view[:end] as block:
            events = _BLOCK.decode(block)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # ValidationError included: a field of an unexpected
        raise _Layout from exc  # type; a byte that is not UTF-8 inside a string: the reference path names it
    wanted = _having(events, _WANTED.__contains__)
    path = trace.path
    gpu, g_ts, g_dur = _timed(_having(wanted, _GPU_KIND.__contains__), path)
    if gpu:
        args = _args_of(gpu)
        kept.add("gpu", {"name": list(map(_name, gpu)), "kind": list(map(_GPU_KIND.__getitem__, map(_cat, gpu))),
                         "ts": g_ts, "dur": g_dur, "device": _ids(list(map(attrgetter("device"), args))),
                         "stream": _ids(list(map(attrgetter("stream"), args))),
                         "corr": _ids(list(map(attrgetter("correlation"), args)))})
    if buf.find(b'"ProfilerStep', 0, end) >= 0:  # ProfilerStep#N: a cpu_op (or user_annotation) on the CPU side
        named = compress(events, map(_step_prefix, map(_name, events)))  # a handful: test them one by one
        steps = [e for e in named if e.cat in _STEP_STR and _STEP_NAME.match(e.name)]
        steps, s_ts, s_dur = _timed(steps, path)
        if steps:
            kept.add("step", {"step": [int(_STEP_NAME.match(n).group(1)) for n in map(_name, steps)],  # type: ignore[union-attr]
                              "pid": _pids(steps), "ts": s_ts, "dur": s_dur})
    notes = _having(wanted, "user_annotation".__eq__)
    marker = {n for n in set(map(_name, notes)) if _STEP_NAME.match(n)}  # a regex per name, not per event
    notes, n_ts, n_dur = _timed([e for e in notes if e.name not in marker] if marker else notes, path)
    if notes:
        kept.add("note", {"name": list(map(_name, notes)), "pid": _pids(notes),
                          "ts": n_ts, "dur": n_dur})
    launch = _having(wanted, _LAUNCH_STR.__contains__)
    launcher = {n for n in set(map(_name, launch)) if _LAUNCH_NAME.search(n)}
    launch, l_ts, _ = _timed(list(compress(launch, map(launcher.__contains__, map(_name, launch)))), path)
    if launch:
        corr = _ids(list(map(attrgetter("correlation"), _args_of(launch))))
        if corr.null_count():  # a launch without a usable correlation id reaches no GPU activity
            has = corr.is_not_null().to_list()
            launch, l_ts, corr = list(compress(launch, has)), list(compress(l_ts, has)), corr.drop_nulls()
        kept.add("launch", {"corr": corr, "pid": _pids(launch), "ts": l_ts})


def _keep(kept: _Kept, trace: Trace, piece: bytes) -> bool:
    """Reference path: decode one piece if needed; False when it is not a whole event (join it to the next)."""
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
            _take(kept, trace, _loads(b"{" + piece + b"}"))
        except _DecodeError:
            return False
    return True


def stream_trace(path: Path, *, fast: bool = True) -> Trace:
    """Stream one trace file; header/footer keys into meta, kept events into frames.

    fast=False forces the reference path (every needed event decoded on its own) for the equality tests."""
    if fast:
        try:
            return _stream_once(path, fast=True)
        except _Layout:
            pass
    trace = _stream_once(path, fast=False)
    trace.healed = True
    return trace


def _stream_once(path: Path, *, fast: bool) -> Trace:
    trace, kept = Trace(path), _Kept()
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
            tail = (_fast_events if fast else _reference_events)(kept, trace, stream, body, sep)
    footer = tail.strip()
    if footer.startswith(b","):
        trace.meta.update(_json_object(b"{" + footer[1:], path, "the trailer after traceEvents"))
    elif footer != b"}":
        raise InputError(path, "unexpected text after the traceEvents array; expected the end of the trace object")
    kept.into(trace)
    return trace


def _fast_events(kept: _Kept, trace: Trace, stream, body: bytes, sep: bytes) -> bytes:
    """Blocks of whole events, each decoded in place as '[' + events + ']' (the separator's comma after
    the last whole event is overwritten with ']'); one copy of each byte, not one per slice. The next
    block is inflated on a second thread meanwhile (ISA-L and file reads release the GIL)."""
    buf = bytearray(b"[") + body
    with ThreadPoolExecutor(1, thread_name_prefix="kineto-read") as reader:
        ahead = reader.submit(_read, stream, trace.path)
        while True:
            cut = buf.rfind(sep)
            if cut > 0:
                buf[cut + 1] = 0x5D  # ']'
                _scan_block(kept, trace, buf, cut + 2)
                del buf[1:cut + len(sep) - 1]  # keep '[' and the next event's '{'
            block = ahead.result()
            if not block:
                break
            ahead = reader.submit(_read, stream, trace.path)
            buf += block
    return _last_event(kept, trace, bytes(buf[2:]), trace.path)


def _reference_events(kept: _Kept, trace: Trace, stream, body: bytes, sep: bytes) -> bytes:
    """Split at the separator and decode each needed event on its own; a fragment that does not decode is
    joined to the next piece (a split inside a string or nested object) until it does."""
    path, eof = trace.path, False
    pending, carry, joins = body[1:], b"", 0
    while True:
        pieces = pending.split(sep)
        pending = pieces.pop()
        for piece in pieces:
            piece = carry + piece
            carry, joins = (b"", 0) if _keep(kept, trace, piece) else (piece + sep, joins + 1)
            if joins > _MAX_JOINS:  # not a split inside a string or nested object: corrupt
                raise InputError(path, "a trace event is not valid JSON: " + repr(carry[:120])[2:-1])
        kept.flush()
        if eof:
            break
        block = _read(stream, path)
        eof = not block
        pending += block
    return _last_event(kept, trace, carry + pending, path)


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


def _last_event(kept: _Kept, trace: Trace, rest: bytes, path: Path) -> bytes:
    """Decode the final event and return what follows the array's closing bracket."""
    text = rest.decode("utf-8", "replace")
    try:
        ev, end = json.JSONDecoder().raw_decode("{" + text)
    except ValueError as exc:
        raise InputError(path, f"trace ends inside traceEvents ({str(exc)[:200]}); the file looks cut short") from exc
    if isinstance(ev, dict):
        _take(kept, trace, ev)
        trace.kineto_events += str(ev.get("cat", "")).encode() in _KINETO_CATS
    m = re.match(r"\s*\]", text[end - 1:])
    if m is None:
        raise InputError(path, "traceEvents array is not closed; the file looks cut short")
    return text[end - 1 + m.end():].encode()
