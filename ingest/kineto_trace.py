"""Streaming reader for PyTorch profiler (Kineto) Chrome traces: keeps only the events the anatomy needs.

FORMATS.md: traces of hundreds of MB are common (HTA #250 needed 950 GB for 200 GB in memory), so the
file is streamed in blocks of whole events (cut at the separator the writer used between top-level
events) and nothing but the kept columns outlives a block. Each block is decoded in one msgspec call
into a typed struct holding only the fields the anatomy reads (category, name, pid, ts, dur and five
args): every other key is skipped in C, no Python object is built for it, and picking the kept events
(GPU kernels, memcpy, memset; runtime/driver launches, for correlation; user annotations;
ProfilerStep#N) is a few list comprehensions per block, not a Python call per event.

Odd layouts cost speed, never correctness. A block with a field of an unexpected type (a number for a
name, a list for args) is decoded again without types and each of its events read as the typed decoder
would have read it. A compact writer's separator can also occur inside an event (in a string or nested
args): a block cut there ends inside that event, so the separator before it is tried. Anything else that
does not decode is a damaged trace, named with its byte offset. tests/kineto_reference.py reads every
trace event by event with the json module; tests/test_kineto_trace.py holds this reader to it.
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
from receipts.ingest.launch_shape import label

_GzipError: tuple[type[Exception], ...] = (EOFError, OSError, zlib.error)
_gzip_open: Callable[..., Any] = gzip.open
try:  # ISA-L's inflate: 3x zlib's on these traces; gzip stays the fallback where its wheel is missing
    from isal import igzip
    from isal.isal_zlib import error as _IsalError

    _gzip_open, _GzipError = igzip.open, (*_GzipError, cast(type[Exception], _IsalError))  # typed as an instance
except ImportError:  # pragma: no cover
    pass

_BLOCK_BYTES = 2 << 20  # a block and its decoded events stay in cache: 15% less CPU than 8 MiB blocks
_MAX_RECUTS = 256  # separators inside events passed over before a block that ends truncated is called damaged
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[\s*')
# Launch-like runtime/driver calls whose correlation id reaches a GPU activity: cudaLaunchKernel,
# cudaLaunchKernelExC (newer GPUs, HTA #61), cuLaunchKernel(Ex), hip(Ext)(Module)LaunchKernel,
# cudaGraphLaunch, cudaLaunchCooperativeKernel, cudaMemcpy*/cudaMemset* (their gpu_memcpy/memset).
_LAUNCH_NAME = re.compile(r"Launch|Memcpy|Memset|memcpy|memset")
_GPU_KIND = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset",
             "Kernel": "kernel", "Memcpy": "memcpy", "Memset": "memset"}  # capitalised: Kineto ~2021
_LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "Runtime"}
_STEP_CATS = {"cpu_op", "user_annotation", "Operator"}
_WANTED = {*_GPU_KIND, *_LAUNCH_CATS, "user_annotation"}  # the categories a block keeps (ProfilerStep#N apart)
# Categories only Kineto writes; a Chrome trace without any of them (and without Kineto's top-level
# keys) is another tool's trace and is refused rather than read as an empty profile.
_KINETO_CATS = {"cpu_op", "user_annotation", "gpu_user_annotation", "cuda_runtime", "cuda_driver", "kernel",
                "gpu_memcpy", "gpu_memset", "python_function", "ac2g", "Operator", "Runtime", "Kernel", "Trace"}
_KINETO_CAT = re.compile(rb'"cat"\s*:\s*"(' + "|".join(sorted(_KINETO_CATS)).encode() + rb')"')
KINETO_KEYS = ("schemaVersion", "deviceProperties", "distributedInfo", "baseTimeNanoseconds")
_STEP_NAME = re.compile(r"^ProfilerStep\s*#\s*(\d{1,18})$")

# The kept columns, one table each; ts/dur stay float microseconds as the trace wrote them. Kernel names
# are categorical: a few thousand distinct names over 10^5..10^6 activities, each 100-300 bytes long,
# were most of the memory a large trace kept and every join and sort of the anatomy copied.
GPU_SCHEMA = {"name": pl.Categorical, "kind": pl.Utf8, "ts": pl.Float64, "dur": pl.Float64,
              "device": pl.Int64, "stream": pl.Int64, "corr": pl.Int64, "shape": pl.Categorical}
LAUNCH_SCHEMA = {"corr": pl.Int64, "pid": pl.Utf8, "ts": pl.Float64}
STEP_SCHEMA = {"step": pl.Int64, "pid": pl.Utf8, "ts": pl.Float64, "dur": pl.Float64}
NOTE_SCHEMA = {"name": pl.Utf8, "pid": pl.Utf8, "ts": pl.Float64, "dur": pl.Float64}
_SCHEMAS: dict[str, dict[str, Any]] = {"gpu": GPU_SCHEMA, "launch": LAUNCH_SCHEMA, "step": STEP_SCHEMA, "note": NOTE_SCHEMA}


class _Args(msgspec.Struct, gc=False):
    """The args the anatomy reads; any type is accepted here and judged per kept event (_ids), but for a kernel's
    launch shape: a grid or block that is not 3 integers sends its block to the untyped decoder, where
    launch_shape.label reads it as no shape."""

    device: Any = None
    stream: Any = None
    correlation: Any = None
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None


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


class _Kept:
    """The kept columns while a file streams, a frame per table and block."""

    def __init__(self) -> None:
        self.frames: dict[str, list[pl.DataFrame]] = {t: [] for t in _SCHEMAS}

    def add(self, table: str, columns: dict[str, Any]) -> None:
        if len(next(iter(columns.values()))):
            self.frames[table].append(pl.DataFrame(columns, schema=_SCHEMAS[table], strict=False))

    def into(self, trace: Trace) -> None:
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


def _too_deep(path: Path, where: str) -> InputError:
    """Python's json and msgspec stop at the interpreter's recursion limit (about 1,000 levels)."""
    return InputError(path, f"{where} nests objects or arrays about 1,000 levels deep or more; expected a Kineto "
                            "Chrome trace, whose events nest a few levels (a damaged or generated trace?)")


def _json_object(text: bytes, path: Path, what: str) -> dict:
    try:
        obj = json.loads(text)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer of more than 4,300 digits
        # a position within `what` (the header or the trailer), never a line and column of the piece the reader held
        why = f"{exc.msg} at its character {exc.pos + 1:,}" if isinstance(exc, json.JSONDecodeError) else str(exc)[:200]
        raise InputError(path, f"{what} is not valid JSON ({why}); expected a Kineto Chrome trace") from exc
    except RecursionError as exc:
        raise _too_deep(path, what) from exc
    if not isinstance(obj, dict):
        raise InputError(path, f"{what} is not a JSON object; expected a Kineto Chrome trace")
    return obj


# |ts| and |dur| in microseconds: beyond this, ts * 1000 + a nanosecond epoch base overflows int64.
_MAX_US = 9.0e15


def _bad_time(path: Path, name: object, key: str, value: object) -> InputError:
    return InputError(path, f"event {str(name)[:60]!r} has {key!r} = {str(value)[:40]}; "
                            "expected a finite number of microseconds (a damaged trace?)")


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


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def _untyped(values: list) -> list[_Event]:
    """A block's events decoded without types, read as the typed decoder reads them where it can: text where
    it expects text (str() of anything else: never a kept category), args only when they are an object, ts
    and dur as found (_timed judges them). A value of traceEvents that is not an object is no event."""
    events = []
    for v in values:
        if isinstance(v, dict):
            args = v.get("args")
            events.append(_Event(cat=_text(v.get("cat", "")), name=_text(v.get("name", "")), pid=v.get("pid"),
                                 ts=v.get("ts"), dur=v.get("dur"),
                                 args=_Args(args.get("device"), args.get("stream"), args.get("correlation"),
                                            args.get("grid"), args.get("block"))
                                 if isinstance(args, dict) else None))
    return events


_cat, _name, _pid, _ts, _dur, _args = (attrgetter(k) for k in ("cat", "name", "pid", "ts", "dur", "args"))
_grid, _block = attrgetter("grid"), attrgetter("block")
_step_prefix = methodcaller("startswith", "ProfilerStep")


def _having(events: list[_Event], test: Callable[[str], bool]) -> list[_Event]:
    """The events whose category passes `test`, in order; map/compress keep the loop in C."""
    return list(compress(events, map(test, map(_cat, events))))


def _timed(events: list[_Event], path: Path, typed: bool) -> tuple[list[_Event], list[float], list[float]]:
    """The events with both ts and dur (others carry no interval), each a finite number of microseconds below
    _MAX_US (else the trace is refused, naming the event); returned with their ts and dur columns. `typed`:
    msgspec decoded them as float, so only their range is left to check."""
    ts, dur = list(map(_ts, events)), list(map(_dur, events))
    if None in ts or None in dur:
        events = [e for e in events if e.ts is not None and e.dur is not None]
        ts, dur = list(map(_ts, events)), list(map(_dur, events))
    if not typed:  # a string, a bool, an integer past float's range: judged one by one
        for e in events:
            for key in ("ts", "dur"):
                value = getattr(e, key)
                if type(value) not in (int, float) or not -_MAX_US < value < _MAX_US:
                    raise _bad_time(path, e.name, key, value)
    elif events:
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


class _Truncated(Exception):
    """A block ended inside an event: its cut fell on a separator inside that event."""


_TRUNCATED = "Input data was truncated"  # msgspec's DecodeError when the input ends inside a value
_AT_BYTE = re.compile(r"\(byte (\d+)\)")


def _damaged(path: Path, buf: bytearray, at: int, start: int, why: str) -> InputError:
    """A block that does not decode: its reason and the bytes around buf[at], at its offset in the trace."""
    near = bytes(buf[max(at - 40, 1):at + 40]).decode("utf-8", "replace")
    return InputError(path, f"trace event near byte {start + at - 1:,} is not valid JSON ({why[:120]}): {near!r}; "
                            "expected a complete Kineto Chrome trace (a damaged file?)")


_NOT_UTF8 = "Invalid UTF-8"  # msgspec's DecodeError for a byte that is not UTF-8 inside a string (0.23 on)


def _not_utf8(path: Path, buf: bytearray, end: int, start: int) -> InputError:
    """The block buf[:end] holds a byte that is not UTF-8: the error naming the first such byte's offset."""
    try:
        bytes(buf[:end]).decode("utf-8")
        at = 1
    except UnicodeDecodeError as where:
        at = where.start
    return _damaged(path, buf, at, start, "a byte that is not UTF-8")


def _decode(trace: Trace, buf: bytearray, end: int, start: int) -> tuple[list[_Event], bool]:
    """buf[:end], a JSON array of whole events, decoded in one call: (events, typed). A block holding a field of
    an unexpected type is decoded again without types (_untyped). `start`: buf[1]'s offset in the trace."""
    try:
        with memoryview(buf) as view, view[:end] as block:
            try:
                return _BLOCK.decode(block), True
            except msgspec.ValidationError:
                return _untyped(msgspec.json.decode(block)), False
    except msgspec.DecodeError as exc:
        if str(exc) == _TRUNCATED:
            raise _Truncated from exc
        if str(exc).startswith(_NOT_UTF8):  # msgspec >= 0.23 says so without the byte: find where
            raise _not_utf8(trace.path, buf, end, start) from exc
        byte = _AT_BYTE.search(str(exc))  # the offset in this block; the message names it in the trace
        raise _damaged(trace.path, buf, int(byte.group(1)) if byte else 1, start,
                       _AT_BYTE.sub("", str(exc)).strip()) from exc
    except UnicodeDecodeError as exc:  # a byte that is not UTF-8 inside a string (msgspec < 0.23): find where
        raise _not_utf8(trace.path, buf, end, start) from exc
    except RecursionError as exc:
        raise _too_deep(trace.path, f"a trace event after byte {start:,}") from exc


def _keep_events(kept: _Kept, trace: Trace, events: list[_Event], *, typed: bool, markers: bool) -> None:
    """Keep the needed events column-wise; `markers`: the block may hold a ProfilerStep#N."""
    wanted = _having(events, _WANTED.__contains__)
    path = trace.path
    gpu, g_ts, g_dur = _timed(_having(wanted, _GPU_KIND.__contains__), path, typed)
    if gpu:
        args = _args_of(gpu)
        kept.add("gpu", {"name": list(map(_name, gpu)), "kind": list(map(_GPU_KIND.__getitem__, map(_cat, gpu))),
                         "ts": g_ts, "dur": g_dur, "device": _ids(list(map(attrgetter("device"), args))),
                         "stream": _ids(list(map(attrgetter("stream"), args))),
                         "corr": _ids(list(map(attrgetter("correlation"), args))),
                         "shape": list(map(label, map(_grid, args), map(_block, args)))})
    if markers:  # ProfilerStep#N: a cpu_op (or user_annotation) on the CPU side
        named = compress(events, map(_step_prefix, map(_name, events)))  # a handful: test them one by one
        steps = [e for e in named if e.cat in _STEP_CATS and _STEP_NAME.match(e.name)]
        steps, s_ts, s_dur = _timed(steps, path, typed)
        if steps:
            kept.add("step", {"step": [int(_STEP_NAME.match(n).group(1)) for n in map(_name, steps)],  # type: ignore[union-attr]
                              "pid": _pids(steps), "ts": s_ts, "dur": s_dur})
    notes = _having(wanted, "user_annotation".__eq__)
    marker = {n for n in set(map(_name, notes)) if _STEP_NAME.match(n)}  # a regex per name, not per event
    notes, n_ts, n_dur = _timed([e for e in notes if e.name not in marker] if marker else notes, path, typed)
    if notes:
        kept.add("note", {"name": list(map(_name, notes)), "pid": _pids(notes),
                          "ts": n_ts, "dur": n_dur})
    launch = _having(wanted, _LAUNCH_CATS.__contains__)
    launcher = {n for n in set(map(_name, launch)) if _LAUNCH_NAME.search(n)}
    launch, l_ts, _ = _timed(list(compress(launch, map(launcher.__contains__, map(_name, launch)))), path, typed)
    if launch:
        corr = _ids(list(map(attrgetter("correlation"), _args_of(launch))))
        if corr.null_count():  # a launch without a usable correlation id reaches no GPU activity
            has = corr.is_not_null().to_list()
            launch, l_ts, corr = list(compress(launch, has)), list(compress(l_ts, has)), corr.drop_nulls()
        kept.add("launch", {"corr": corr, "pid": _pids(launch), "ts": l_ts})


def stream_trace(path: Path) -> Trace:
    """Stream one trace file; header/footer keys into meta, kept events into frames."""
    trace, kept = Trace(path), _Kept()
    try:
        stream = _open(path)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from exc
    with stream:
        buf, eof = b"", False
        while (m := _EVENTS_KEY.search(buf)) is None:
            block = _read(stream, path)
            if not block and not buf:
                raise InputError(path, "is empty; expected a PyTorch profiler trace (*.pt.trace.json[.gz])")
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
            tail = _events(kept, trace, stream, body, _separator(body, path, m.end()), m.end())
    footer = tail.strip()
    if footer.startswith(b","):
        trace.meta.update(_json_object(b"{" + footer[1:], path, "the trailer after traceEvents"))
    elif footer != b"}":
        raise InputError(path, "unexpected text after the traceEvents array; expected the end of the trace object")
    kept.into(trace)
    return trace


def _events(kept: _Kept, trace: Trace, stream, body: bytes, sep: bytes, start: int) -> bytes:
    """Blocks of whole events, each decoded in place as '[' + events + ']' (the byte after the last whole
    event's '}' is overwritten with ']'); one copy of each byte, not one per slice. The next block is
    inflated on a second thread meanwhile (ISA-L and file reads release the GIL). `start`: body's offset
    in the trace. Returns what follows the last event."""
    buf = bytearray(b"[") + body
    recuts = 0  # separators inside events passed over since the last block that decoded
    with ThreadPoolExecutor(1, thread_name_prefix="kineto-read") as reader:
        ahead = reader.submit(_read, stream, trace.path)
        while True:
            cut = buf.rfind(sep)
            while cut > 0:
                kept_byte, buf[cut + 1] = buf[cut + 1], 0x5D  # ']'
                try:
                    events, typed = _decode(trace, buf, cut + 2, start)
                except _Truncated:  # the cut fell inside an event: try the separator before it
                    buf[cut + 1] = kept_byte
                    recuts += 1
                    if recuts > _MAX_RECUTS:
                        raise _damaged(trace.path, buf, cut, start, "an event that does not end") from None
                    cut = buf.rfind(sep, 0, cut)
                    continue
                if not trace.kineto_events and _KINETO_CAT.search(buf, 0, cut + 2):
                    trace.kineto_events = 1
                _keep_events(kept, trace, events, typed=typed, markers=buf.find(b'"ProfilerStep', 0, cut + 2) >= 0)
                del buf[1:cut + len(sep) - 1]  # keep '[' and the next event's '{'
                start += cut + len(sep) - 2
                recuts = 0
                break
            block = ahead.result()
            if not block:
                break
            ahead = reader.submit(_read, stream, trace.path)
            buf += block
    return _last_event(kept, trace, bytes(buf[2:]), trace.path, offset=start + 1)


def _separator(body: bytes, path: Path, offset: int) -> bytes:
    """The bytes between two top-level events as this writer lays them out ('},\\n  {' for Kineto)."""
    text = body[: 1 << 20].decode("utf-8", "replace")
    try:
        _, end = json.JSONDecoder().raw_decode(text)
    except ValueError as exc:
        where = f" (near byte {offset + exc.pos:,} of the trace)" if isinstance(exc, json.JSONDecodeError) else ""
        why = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)[:200]
        raise InputError(path, f"first trace event is not valid JSON{where}: {why}; file cut short?") from exc
    except RecursionError as exc:
        raise _too_deep(path, "the first trace event") from exc
    after = text[end:]
    m = re.match(r"\s*,\s*\{", after)
    return ("}" + m.group(0)).encode() if m else b"\x00no-separator\x00"


def _last_event(kept: _Kept, trace: Trace, rest: bytes, path: Path, *, offset: int) -> bytes:
    """Decode the final event and return what follows the array's closing bracket. `offset`: rest's position in the
    (decompressed) trace, so an error names a place in the file, not in the block the reader held."""
    text = rest.decode("utf-8", "replace")
    try:
        ev, end = json.JSONDecoder().raw_decode("{" + text)
    except ValueError as exc:
        where = f" near byte {offset + exc.pos - 1:,}" if isinstance(exc, json.JSONDecodeError) else ""
        why = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)[:200]
        raise InputError(path, f"trace ends inside traceEvents{where} of the trace ({why}): the file looks cut "
                               "short") from exc
    except RecursionError as exc:
        raise _too_deep(path, "the last trace event") from exc
    _keep_events(kept, trace, _untyped([ev]), typed=False, markers=True)
    trace.kineto_events += isinstance(ev.get("cat"), str) and ev["cat"] in _KINETO_CATS
    m = re.match(r"\s*\]", text[end - 1:])
    if m is None:
        raise InputError(path, "traceEvents array is not closed; the file looks cut short")
    return text[end - 1 + m.end():].encode()
