"""The Kineto reader ingest/kineto_trace.py is held to: the whole trace decoded by the
standard json module, then every event judged on its own, in Python, one at a time.

It keeps what the anatomy needs by the same rules, written out plainly per event: GPU activities (kernel,
gpu_memcpy, gpu_memset and Kineto ~2021's capitalised names) with device, stream, correlation id and launch shape;
launch-like runtime/driver calls with a correlation id; ProfilerStep#N markers; user annotations. Nothing of
the streaming reader's machinery is shared (blocks, typed msgspec decoding, columns built per block): only
the table schemas, the Trace it returns and the wording of a damaged time, so tests can compare messages.
Memory is the whole document (fine for tests); the product streams."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import polars as pl

from receipts.ingest.kineto_trace import GPU_SCHEMA, LAUNCH_SCHEMA, NOTE_SCHEMA, STEP_SCHEMA, Trace, _bad_time

_GPU_KIND = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset",
             "Kernel": "kernel", "Memcpy": "memcpy", "Memset": "memset"}
_LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "Runtime"}
_LAUNCH_NAME = re.compile(r"Launch|Memcpy|Memset|memcpy|memset")
_STEP_CATS = {"cpu_op", "user_annotation", "Operator"}
_STEP_NAME = re.compile(r"^ProfilerStep\s*#\s*(\d{1,18})$")
_KINETO_CATS = {"cpu_op", "user_annotation", "gpu_user_annotation", "cuda_runtime", "cuda_driver", "kernel",
                "gpu_memcpy", "gpu_memset", "python_function", "ac2g", "Operator", "Runtime", "Kernel", "Trace"}
_MAX_US = 9.0e15  # |ts|, |dur| in microseconds that still fit int64 nanoseconds past an epoch base


def _id(value) -> int | None:
    return value if type(value) is int and -(2**63) <= value < 2**63 else None


def _shape(args: dict) -> str | None:
    """'grid (x,y,z) block (x,y,z)' when both args are lists of 3 positive integers (below 2^31), else None."""
    dims = []
    for key in ("grid", "block"):
        value = args.get(key)
        if not isinstance(value, list) or len(value) != 3:
            return None
        for v in value:
            if type(v) is not int or v <= 0 or v >= 2**31:
                return None
        dims.append(",".join(str(v) for v in value))
    return f"grid ({dims[0]}) block ({dims[1]})"


def _us(path: Path, ev: dict, key: str) -> float:
    value = ev[key]
    if type(value) not in (int, float) or not -_MAX_US < value < _MAX_US:
        raise _bad_time(path, ev.get("name", ""), key, value)
    return float(value)


def stream_trace(path: Path) -> Trace:
    """The kept events of one trace, each table in file order, and its top-level keys as meta."""
    path = Path(path)
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    events = doc.get("traceEvents")
    trace = Trace(path, meta={**doc, "traceEvents": None})
    rows: dict[str, list[tuple]] = {"gpu": [], "launch": [], "step": [], "note": []}
    for ev in events:
        if not isinstance(ev, dict):
            continue
        cat = ev.get("cat")
        trace.kineto_events += cat in _KINETO_CATS
        if not isinstance(cat, str) or ev.get("ts") is None or ev.get("dur") is None:
            continue
        name = str(ev.get("name", ""))
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        step = _STEP_NAME.match(name)
        if cat in _GPU_KIND:
            rows["gpu"].append((name, _GPU_KIND[cat], _us(path, ev, "ts"), _us(path, ev, "dur"), _id(args.get("device")),
                                _id(args.get("stream")), _id(args.get("correlation")), _shape(args)))
        elif step is not None and cat in _STEP_CATS:
            rows["step"].append((int(step.group(1)), str(ev.get("pid")), _us(path, ev, "ts"), _us(path, ev, "dur")))
        elif cat == "user_annotation":
            rows["note"].append((name, str(ev.get("pid")), _us(path, ev, "ts"), _us(path, ev, "dur")))
        elif cat in _LAUNCH_CATS and _LAUNCH_NAME.search(name):
            ts, _ = _us(path, ev, "ts"), _us(path, ev, "dur")
            if _id(args.get("correlation")) is not None:
                rows["launch"].append((_id(args["correlation"]), str(ev.get("pid")), ts))
    for table, schema in (("gpu", GPU_SCHEMA), ("launch", LAUNCH_SCHEMA), ("step", STEP_SCHEMA), ("note", NOTE_SCHEMA)):
        setattr(trace, table, pl.DataFrame(rows[table], schema=schema, orient="row"))
    return trace
