"""The project's own format: log lines `RECEIPT {json}` written by receipts.capture and `receipts run`.

Version 1 records (field `v` = 1, field `kind`):
  header  identity {PARAMETER: value} (the lane's, schema/lane.py OPTION), hostname, run_name, provenance,
          env {NAME: value|null},
          software, topology, gpu_model, gpu_count, world_size, features, tags, started_at
  step    step, rank, step_ms, tokens_per_s, loss, mfu_pct, allocated_bytes, reserved_bytes
  phase   phase (compile|warmup|checkpoint|eval|...), first_step, last_step, rank, duration_ms
  footer  rank, peak_allocated_bytes, peak_reserved_bytes, exit_code, ended_at, memory, telemetry
Lines may carry a launcher prefix (`[rank3]: `, `[default0]:`); everything else in the log is left alone.
The full specification is docs/receipt-format.md.
"""

from __future__ import annotations

import json
import re
from typing import Any

import polars as pl

from receipts.errors import InputError, UnsupportedVersion
from receipts.ingest import profiler
from receipts.ingest.textlog import LogText, cut_short_note
from receipts.schema.model import EnvVar, IdentityClaim, MemoryPeak, ParsedRun, steps_frame
from receipts.schema.memory import MemoryGeometry
from receipts.schema.receipt_format import KINDS, LINE_PATTERN, SUPPORTED_VERSIONS, memory_of, recipe_of
from receipts.schema.telemetry import GpuTelemetry, telemetry_of

FORMAT = "receipt"
LAUNCHER = "receipts run"   # the `writer` of the launcher's header and footer (capture writes "receipts.capture")
# Anywhere in the line: launchers prefix ranks ("[rank3]: "), and another process writing half a line
# into the same pipe can put text before a record; the JSON object itself is what must be whole.
RECEIPT_LINE = LINE_PATTERN
_KINDS = KINDS

_STEP_DTYPE = pl.Struct({
    "v": pl.Int64, "kind": pl.Utf8, "step": pl.Int64, "rank": pl.Int32, "step_ms": pl.Float64,
    "tokens_per_s": pl.Float64, "loss": pl.Float64, "mfu_pct": pl.Float64,
    "allocated_bytes": pl.Int64, "reserved_bytes": pl.Int64,
})


def detect(head: list[str]) -> bool:
    rx = re.compile(RECEIPT_LINE)
    return any(rx.search(line) for line in head)


def _loads(log: LogText, line_no: int, payload: str) -> dict:
    try:
        obj = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise InputError(log.path, f"malformed RECEIPT line: {exc.msg} at column {exc.colno + 8}; "
                                   "expected `RECEIPT ` followed by one JSON object", line=line_no) from exc
    except ValueError as exc:  # an integer of more than 4,300 digits (Python's int-from-string limit)
        raise InputError(log.path, f"malformed RECEIPT line: {exc}; expected `RECEIPT ` followed by one JSON "
                                   "object", line=line_no) from exc
    if not isinstance(obj, dict) or obj.get("kind") not in _KINDS:
        raise InputError(log.path, f"RECEIPT record needs a 'kind' of {', '.join(_KINDS)}", line=line_no)
    if "v" not in obj:
        raise InputError(log.path, "RECEIPT record has no 'v' (the format version); expected e.g. "
                                   '`RECEIPT {"v": 1, "kind": ...}`', line=line_no)
    if obj.get("v") not in SUPPORTED_VERSIONS:
        raise UnsupportedVersion(f"RECEIPT record at {log.path}:{line_no}", str(obj.get("v")),
                                 ", ".join(map(str, SUPPORTED_VERSIONS)))
    return obj


# The fields of the non-step records that are read, and the JSON type each must have where present (null allowed).
_FIELD_TYPES: dict[str, dict[str, tuple[type, ...]]] = {
    "header": {"identity": (dict,), "software": (dict,), "topology": (dict,), "provenance": (dict,),
               "features": (dict,), "env": (dict,), "tags": (list,), "gpu_count": (int,), "world_size": (int,),
               "rank": (int,), "run_name": (str,), "run_id": (str,), "hostname": (str,), "started_at": (str,),
               "gpu_model": (str,), "command": (str,)},
    "footer": {"rank": (int,), "exit_code": (int,), "peak_allocated_bytes": (int,), "peak_reserved_bytes": (int,)},
    "phase": {"step": (int,), "rank": (int,)},
}
_JSON_TYPE = {dict: "an object", list: "an array", str: "a string", int: "an integer", float: "a number",
              bool: "true or false"}


def _check_fields(log: LogText, line_no: int, obj: dict) -> None:
    """A header, footer or phase record whose read fields have the wrong JSON type is one InputError at its line."""
    for key, types in _FIELD_TYPES.get(obj["kind"], {}).items():
        value = obj.get(key)
        if value is not None and (not isinstance(value, types) or (int in types and isinstance(value, bool))):
            raise InputError(log.path, f"RECEIPT {obj['kind']} field '{key}' must be {_JSON_TYPE[types[0]]}, found "
                                       f"{_JSON_TYPE.get(type(value), type(value).__name__)}", line=line_no)


def parse(log: LogText) -> ParsedRun:
    records = (
        log.frame()
        # a literal test first: in a `receipts run` log around a third-party script almost no line is a
        # record, and the regex over every line cost a third of the whole parse (1M-line nanochat log)
        .filter(pl.col("text").str.contains("RECEIPT {", literal=True))
        .with_columns(pl.col("text").str.extract(RECEIPT_LINE, 1).alias("payload"))
        .filter(pl.col("payload").is_not_null())
        .select("line", "payload")
    )
    # Every writer of this format ends its lines with a newline (the launcher's footer is the last line
    # of a run.log), so a last line without one was cut, unless it is a whole RECEIPT record.
    last_line_parsed = not log.unterminated_last
    if log.unterminated_last and records.height and records["line"][-1] == log.n_lines:
        try:
            json.loads(records["payload"][-1])
            last_line_parsed = True
        except ValueError:  # JSONDecodeError, or an integer past Python's 4,300-digit limit
            records = records.head(records.height - 1)  # a killed writer's half line is evidence of the kill
    if records.height == 0:
        raise InputError(log.path, "no RECEIPT lines found; expected `RECEIPT {json}` records")

    # Steps are the bulk: decode them in one vectorised pass; everything else is a handful of lines.
    is_step = pl.col("payload").str.contains(r'"kind"\s*:\s*"step"')
    step_lines = records.filter(is_step)
    try:
        decoded = step_lines.with_columns(pl.col("payload").str.json_decode(_STEP_DTYPE).alias("r")).unnest("r")
    except pl.exceptions.ComputeError:
        for line_no, payload in step_lines.iter_rows():
            _loads(log, line_no, payload)  # raises with the exact line
        raise
    bad = decoded.filter(pl.col("step").is_null() | ~pl.col("v").is_in(SUPPORTED_VERSIONS) | pl.col("v").is_null())
    if bad.height:
        line_no, payload = bad["line"][0], bad["payload"][0]
        obj = _loads(log, line_no, payload)
        raise InputError(log.path, f"RECEIPT step record without an integer 'step' ({obj})", line=line_no)

    header: dict = {}
    headers: list[dict] = []
    phases: list[tuple[str, int | None, int | None]] = []
    open_phases: dict[tuple[str, object], int | None] = {}
    footers: list[dict] = []
    recipe: dict[str, Any] = {}
    geometry: list[MemoryGeometry] = []
    telemetry: list[GpuTelemetry] = []
    for line_no, payload in records.filter(~is_step).iter_rows():
        obj = _loads(log, line_no, payload)
        kind = obj["kind"]
        _check_fields(log, line_no, obj)
        if kind == "header":
            headers.append(obj)
            header = {**header, **obj}  # per-rank headers repeat the same facts; later fields win
        elif kind == "phase":
            name = str(obj.get("phase", "unknown"))
            if obj.get("event") == "begin":
                open_phases[(name, obj.get("rank"))] = obj.get("step")
            elif obj.get("event") == "end":
                first = open_phases.pop((name, obj.get("rank")), obj.get("step"))
                phases.append((name, first, obj.get("step")))
            else:
                phases.append((name, obj.get("first_step"), obj.get("last_step")))
        elif kind == "footer":
            footers.append(obj)
            try:
                measured = memory_of(obj)
            except ValueError as exc:
                raise InputError(log.path, f"RECEIPT footer: {exc}", line=line_no) from None
            if measured is not None:
                geometry.append(_geometry(obj.get("rank"), measured))
            try:
                recipe = {**recipe_of(obj), **recipe}   # ranks agree; of a clash, the first footer wins
                telemetry += telemetry_of(obj)
            except ValueError as exc:
                raise InputError(log.path, f"RECEIPT footer: {exc}", line=line_no) from None

    ended_early = _ended_early(log, cut_note=cut_short_note(log, last_line_parsed), headers=headers,
                               footers=footers, step_ranks=set(decoded["rank"].drop_nulls().to_list()))
    identity = header.get("identity") or {}
    env = tuple(
        EnvVar(name, None if value is None else str(value), is_set=value is not None,
               redacted=isinstance(value, str) and value.startswith("<redacted"))
        for name, value in sorted((header.get("env") or {}).items())
    )
    memory = tuple(  # the launcher's rankless footer carries the exit code, not peaks: no empty row for it
        MemoryPeak(f.get("rank"), f.get("peak_allocated_bytes"), f.get("peak_reserved_bytes")) for f in footers
        if f.get("rank") is not None or f.get("peak_allocated_bytes") is not None or f.get("peak_reserved_bytes") is not None
    )
    return ParsedRun(
        source_format=FORMAT,
        format_version="1",
        steps=steps_frame(decoded.drop("v", "kind", "payload")),
        claim=IdentityClaim.of_options(identity, hostname=header.get("hostname")),
        phases=tuple(phases),
        memory=memory,
        env=env,
        software={**dict(header.get("software") or {}), **_profiler(header.get("command"))},
        topology=dict(header.get("topology") or {}),
        provenance={k: header[k] for k in ("run_name", "run_id", "command", "git_rev", "git_status", "cwd") if k in header}
        | dict(header.get("provenance") or {}),
        features={**recipe, **dict(header.get("features") or {})},
        tags=tuple(header.get("tags") or ()),
        gpu_model=header.get("gpu_model"),
        gpu_count=header.get("gpu_count"),
        world_size=header.get("world_size"),
        ended_early=ended_early,
        started_at=header.get("started_at"),
        memory_geometry=tuple(geometry),
        telemetry=tuple(telemetry),
    )


def _geometry(rank: object, m: dict) -> MemoryGeometry:
    """A footer's `memory` (schema/receipt_format.memory_of) as the rank's measured geometry."""
    names = {"parameters": "parameters_bytes", "gradients": "gradients_bytes",
             "optimizer_state": "optimizer_state_bytes", "activations": "activations_bytes"}
    return MemoryGeometry(
        "capture", rank if isinstance(rank, int) and not isinstance(rank, bool) else None,
        peak_allocated_bytes=m["peak_allocated_bytes"], peak_reserved_bytes=m["peak_reserved_bytes"],
        resident_bytes=m["resident_bytes"], device_total_bytes=m["device_total_bytes"],
        alloc_retries=m["alloc_retries"], ooms=m["ooms"],
        categories=tuple((bucket, m[key]) for bucket, key in names.items() if m[key] is not None),
        detail={"peak_window": m["peak_window"], "measured_after_step": m["measured_after_step"]})


def _is_launcher(record: dict) -> bool:
    return record.get("writer") == LAUNCHER


def _ended_early(log: LogText, *, cut_note: str | None, headers: list[dict], footers: list[dict],
                 step_ranks: set[int]) -> str | None:
    """Why this log looks like a run that did not finish, every reason found, or None.

    Who writes what decides what is missing. `receipts run` writes its footer last, after the command
    exits, whatever the command does: a launcher header without that footer is a log cut short (a
    killed launcher, a copy taken mid-run, a truncated file), even when ranks' footers are there. The
    launcher's footer also says how the command ended: a non-zero exit code or a signal. Each rank of
    receipts.capture that wrote a header or a step writes its own footer in close() (and at exit)."""
    reasons = [cut_note] if cut_note else []
    launched = any(_is_launcher(h) for h in headers)
    closing = [f for f in footers if _is_launcher(f)]
    if launched and not closing:
        reasons.append(f"no footer from `receipts run` (written last, whatever the command does): the log stops "
                       f"at line {log.n_lines}")
    for footer in closing:
        if footer.get("signal"):
            reasons.append(f"the command was ended by {footer['signal']} (exit code {footer.get('exit_code')})")
        elif footer.get("exit_code") not in (None, 0):
            reasons.append(f"the command exited with code {footer['exit_code']}")
    for footer in footers:  # a rank's footer written by close(exit_code=...) in an error path
        if not _is_launcher(footer) and footer.get("exit_code") not in (None, 0):
            reasons.append(f"rank {footer.get('rank')} reports exit code {footer['exit_code']}")
    if not footers and not launched:
        reasons.append(f"no RECEIPT footer: the run stopped before writing one (last line {log.n_lines})")
    else:
        ranks = step_ranks | {h["rank"] for h in headers if not _is_launcher(h) and isinstance(h.get("rank"), int)}
        silent = sorted(ranks - {f.get("rank") for f in footers if not _is_launcher(f)})
        if silent:
            reasons.append(f"rank{'s' if len(silent) > 1 else ''} {', '.join(map(str, silent))} wrote no RECEIPT "
                           "footer (the process stopped before close())")
    return "; ".join(reasons) or None


def _profiler(command: object) -> dict[str, str]:
    """The profiler the launcher's command ran under (`nsys profile ...`), as software facts (ingest/profiler.py)."""
    return profiler.of_command(command) if isinstance(command, str) else {}
