"""The claims file a CI gate checks: load, validate, and keep the line each value came from.

Format version 1 (docs/claims-format.md is the full specification):

    version: 1
    defaults: {min_steps: 20, max_cv: 0.05, tolerance: 0.03}
    claims:
      - {name: fused conv path, baseline: run_a, candidate: run_b, metric: step_time, speedup: 1.18}
      - {name: allocator overlay, baseline: run_c, candidate: run_d, metric: peak_reserved, change: -6GiB}
      - {name: sgd state, baseline: run_e, candidate: run_f, metric: memory_bucket, bucket: optimizer_state,
         change: -128MiB, at_most: 1GiB}

Every problem is one InputError naming the file and the line (from yaml.compose's node marks), so a
reviewer can fix the file without reading this module. Unknown keys are refused rather than ignored:
a misspelt `tolerence:` silently falling back to the default would loosen the gate unnoticed. So are
numbers that are not finite: `tolerance: .nan` compares false against every bound and would turn any
claim into ACCEPTED. The file itself must be a regular UTF-8 file (a named pipe would block the gate
forever), nested at most MAX_DEPTH levels (yaml.compose recurses) and use no tags beyond YAML's own
scalars and collections.
"""

from __future__ import annotations

import math
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from receipts.analysis.lanes import DEFAULT_BASELINE_LAST, TAG_PREFIX
from receipts.errors import InputError, UnsupportedVersion
from receipts.schema.memory import BUCKETS, SNAPSHOT_CATEGORIES

SUPPORTED_VERSIONS = (1,)
SPEED_METRICS = ("step_time", "tokens_per_s")        # claimed as a speedup (x), measured with a bootstrap CI
MEMORY_METRICS = ("peak_allocated", "peak_reserved",   # claimed as a signed byte change, measured per-rank max
                  "memory_bucket")                    # one bucket of the memory geometry (`bucket:`)
# What `bucket:` may name: a bucket of the memory geometry, a snapshot's category, or one of its totals.
BUCKET_NAMES = (*BUCKETS, *SNAPSHOT_CATEGORIES, "peak_allocated", "peak_reserved", "resident",
                "fragmentation_at_peak")
METRICS = SPEED_METRICS + MEMORY_METRICS
# Recipe drift (feature bundle, model shape) makes it a different experiment: it can never be declared.
DECLARABLE_DRIFT = ("runtime", "infrastructure")

# Defaults when neither the file's `defaults:` nor the claim says otherwise.
DEFAULT_MIN_STEPS = 20      # steady-state steps per run; fewer and the bootstrap CI is not worth much
DEFAULT_MAX_CV = 0.05       # std/mean of steady-state step time, per run
DEFAULT_TOLERANCE = 0.03    # fraction of the claimed speedup (or of |claimed change| for memory)
DEFAULT_MIN_EFFECT = 0.01   # a claimed speedup needs |ratio - 1| >= this besides a CI excluding 1 (asv's factor)

_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_SIZE = re.compile(r"^\s*([+-]?)\s*(\d+(?:\.\d+)?|\.\d+)\s*([A-Za-z]+)\s*$")

_TOP_KEYS = ("version", "defaults", "claims")
_DEFAULT_KEYS = ("min_steps", "max_cv", "tolerance", "tolerance_bytes", "min_effect", "allow_ended_early")
_CLAIM_KEYS = ("name", "baseline", "candidate", "metric", "speedup", "change", "tolerance", "tolerance_bytes",
               "declared_drift", "min_steps", "max_cv", "min_effect", "allow_ended_early", "last", "bucket",
               "at_most")

# The range of each numeric setting (low inclusive, high exclusive); every value must also be finite.
_BOUNDS: dict[str, dict[str, Any]] = {
    "tolerance": {"low": 0.0, "high": 1.0},
    "min_steps": {"low": 2, "integer": True},   # at least 2: the bootstrap needs two values per run
    "max_cv": {"low": 0.0},
    "min_effect": {"low": 0.0, "high": 1.0},
}

# A claims file is three levels deep (top, claims list, claim); 32 leaves room and keeps yaml.compose,
# which recurses once per level, far from Python's recursion limit.
MAX_DEPTH = 32
# Tags a claims file may carry: YAML's own scalars and collections (`!!str 123` keeps an id as text).
_ALLOWED_TAGS = {f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "seq", "map")}
# libyaml's loader where PyYAML was built with it (the wheels are): the pure-Python scanner reads a 10 MB line
# one character at a time (27 s for one claims file, against 0.4 s here); same events, nodes and marks.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Claim:
    name: str
    baseline: str                    # receipt id, id prefix or run name, as written
    candidate: str
    metric: str                      # one of METRICS
    speedup: float | None            # speed metrics: baseline time / candidate time (x)
    change_bytes: int | None         # memory metrics: candidate peak - baseline peak (bytes, signed)
    tolerance: float                 # fraction
    tolerance_bytes: int | None      # memory metrics: absolute tolerance; replaces the fraction when given
    declared_drift: tuple[str, ...]
    min_steps: int
    max_cv: float
    min_effect: float
    path: str
    line: int                        # 1-based line where the claim starts
    allow_ended_early: bool = False  # accept runs whose logs look cut short (rejection code ended_early)
    last: int | None = None          # tag baselines only: how many of the lane's tagged runs
    bucket: str | None = None        # memory_bucket: which bucket (BUCKET_NAMES)
    at_most_bytes: int | None = None  # memory metrics: the candidate's value may not exceed this (bytes)

    @property
    def baseline_tag(self) -> str | None:
        """'main' for `baseline: tag:main`; None when the baseline names a receipt."""
        return self.baseline[len(TAG_PREFIX):] if self.baseline.startswith(TAG_PREFIX) else None

    @property
    def is_speed(self) -> bool:
        return self.metric in SPEED_METRICS


@dataclass(frozen=True)
class ClaimsFile:
    path: str
    version: int
    claims: tuple[Claim, ...]


def parse_size(text: str) -> int:
    """'-6GiB' -> -6442450944. Raises ValueError naming the accepted units."""
    m = _SIZE.match(text)
    if not m or m.group(3) not in _UNITS:
        raise ValueError(f"{text!r} is not a size with a unit ({', '.join(_UNITS)}), e.g. -6GiB or 512MiB")
    value = float(m.group(2)) * _UNITS[m.group(3)]
    if not math.isfinite(value) or abs(value) >= 2**63:
        raise ValueError(f"{text!r} is larger than any memory (at most 8 EiB)")
    return int(round(-value if m.group(1) == "-" else value))


def load_claims(path: str | Path) -> ClaimsFile:
    path = Path(path)
    try:
        # stat, not open: opening a named pipe blocks until a writer appears
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise InputError(path, "not a regular file (a folder, named pipe or device); a claims file is a YAML file")
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(path, f"cannot read claims file: {exc.strerror or exc}") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, f"not UTF-8 text: byte 0x{data[exc.start]:02x} cannot be decoded; save the claims "
                               "file as UTF-8", line=data.count(b"\n", 0, exc.start) + 1) from None
    return parse_claims(text, str(path))


def parse_claims(text: str, path: str = "<claims>") -> ClaimsFile:
    try:
        _check_events(text, path)
        root = yaml.compose(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        if "maximum nesting depth" in problem:  # libyaml's own limit, met while it scans ahead of our check
            raise InputError(path, f"nested more than {MAX_DEPTH} levels deep; a claims file needs 3 (top level, "
                                   "the claims list, a claim)", line=_error_line(exc, text)) from None
        raise InputError(path, f"not valid YAML: {problem}", line=_error_line(exc, text)) from None
    reader = _Reader(path)
    if root is None:
        raise InputError(path, "empty claims file; expected `version: 1` and a `claims:` list", line=1)
    top = reader.mapping(root, "the claims file", _TOP_KEYS)
    if "version" not in top:
        raise InputError(path, "missing key 'version' (this build reads version 1)", line=_line(root))
    version = reader.scalar(top["version"])
    if version not in SUPPORTED_VERSIONS or isinstance(version, bool):
        raise UnsupportedVersion(f"claims file {path}:{_line(top['version'])}", str(version),
                                 ", ".join(map(str, SUPPORTED_VERSIONS)))
    defaults = reader.mapping(top["defaults"], "defaults", _DEFAULT_KEYS) if "defaults" in top else {}
    reader.check_defaults(defaults)
    if "claims" not in top:
        raise InputError(path, "missing key 'claims' (a list of claims)", line=_line(root))
    items = top["claims"]
    if not isinstance(items, yaml.SequenceNode) or not items.value:
        raise InputError(path, "'claims' must be a non-empty list", line=_line(items))
    claims = tuple(reader.claim(node, defaults) for node in items.value)
    seen: dict[str, int] = {}
    for c in claims:
        if c.name in seen:
            raise InputError(path, f"claim name {c.name!r} is used twice (first at line {seen[c.name]}); "
                                   "names identify claims in CI reports", line=c.line)
        seen[c.name] = c.line
    return ClaimsFile(path, int(version), claims)


def _line(node: yaml.Node | yaml.Event) -> int:
    assert node.start_mark is not None  # PyYAML marks everything it parses from text
    return node.start_mark.line + 1


def _check_events(text: str, path: str) -> None:
    """Depth and tags, checked over the parser's event stream (iterative) before yaml.compose (recursive)."""
    depth = 0
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise InputError(path, f"nested more than {MAX_DEPTH} levels deep; a claims file needs 3 "
                                       "(top level, the claims list, a claim)", line=_line(event))
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        tag = getattr(event, "tag", None)
        if tag is not None and tag != "!" and tag not in _ALLOWED_TAGS:
            raise InputError(path, f"unsupported YAML tag {tag!r}; a claims file holds plain values "
                                   "(text, numbers, true/false, lists, mappings)", line=_line(event))


def _error_line(exc: yaml.YAMLError, text: str) -> int | None:
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        return mark.line + 1
    position = getattr(exc, "position", None)  # ReaderError: a character YAML does not allow (e.g. NUL)
    return text.count("\n", 0, position) + 1 if isinstance(position, int) else None


class _Reader:
    """Turns composed YAML nodes into typed values, raising InputError at the offending node's line."""

    def __init__(self, path: str):
        self.path = path
        self._constructor = yaml.SafeLoader("")  # only its scalar constructors are used

    def fail(self, node: yaml.Node, message: str) -> InputError:
        return InputError(self.path, message, line=_line(node))

    def mapping(self, node: yaml.Node, what: str, allowed: tuple[str, ...]) -> dict[str, yaml.Node]:
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, f"{what} must be a mapping of keys to values")
        out: dict[str, yaml.Node] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key not in allowed:
                raise self.fail(key_node, f"unknown key {key!r} in {what}; expected one of {', '.join(allowed)}")
            if key in out:
                raise self.fail(key_node, f"key {key!r} appears twice in {what}")
            out[key] = value_node
        return out

    def scalar(self, node: yaml.Node) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            raise self.fail(node, "expected a single value here, not a list or mapping")
        try:
            return self._constructor.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
            # a tag whose text does not convert: `!!int "abc"`, `!!float "x"`, `!!timestamp "later"`
            raise self.fail(node, f"{node.value!r} cannot be read as the {node.tag.rsplit(':', 1)[-1]} its tag "
                                  f"asks for ({' '.join(str(exc).split())[:120]})") from None

    def text(self, node: yaml.Node, key: str) -> str:
        # The raw scalar text, not YAML's typed value: a receipt id such as 1234e567 must stay text.
        if not isinstance(node, yaml.ScalarNode) or not node.value.strip():
            raise self.fail(node, f"'{key}' must be non-empty text")
        return node.value.strip()

    def number(self, node: yaml.Node, key: str, *, low: float, high: float | None = None,
               integer: bool = False, low_open: bool = False, where: str = "") -> float:
        value = self.scalar(node)
        ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
        # NaN compares false against every bound, so finiteness is checked first, explicitly.
        if (isinstance(value, bool) or not ok_type or not math.isfinite(value) or value < low
                or (low_open and value == low) or (high is not None and value >= high)):
            bound = f"{'>' if low_open else '>='} {low:g}" + (f" and < {high:g}" if high is not None else "")
            kind = "an integer" if integer else "a finite number"
            raise self.fail(node, f"{where}'{key}' must be {kind} {bound}, got {_shown(node, value)}")
        return value

    def flag(self, node: yaml.Node, key: str, *, where: str = "") -> bool:
        value = self.scalar(node)
        if not isinstance(value, bool):
            raise self.fail(node, f"{where}'{key}' must be true or false, got {_shown(node, value)}")
        return value

    def size(self, node: yaml.Node, key: str, *, signed: bool) -> int:
        value = self.scalar(node)
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise self.fail(node, f"'{key}' must be a size with a unit, e.g. -6GiB")
        if isinstance(value, int) and value != 0:
            raise self.fail(node, f"'{key}' needs a unit ({', '.join(_UNITS)}): write {value}B or {value}MiB")
        try:
            size = 0 if isinstance(value, int) else parse_size(value)
        except ValueError as exc:
            raise self.fail(node, f"bad unit in '{key}': {exc}") from None
        if not signed and size < 0:
            raise self.fail(node, f"'{key}' must not be negative")
        return size

    def setting(self, own: dict[str, yaml.Node], defaults: dict[str, yaml.Node], key: str, fallback, *,
                claim: str, **kw):
        node = own.get(key, defaults.get(key))
        if node is None:
            return fallback
        where = f"claim {claim!r}: " if key in own else f"defaults (for claim {claim!r}): "
        if key == "tolerance_bytes":
            return self.size(node, key, signed=False)
        if key == "allow_ended_early":
            return self.flag(node, key, where=where)
        return self.number(node, key, where=where, **kw)

    def check_defaults(self, defaults: dict[str, yaml.Node]) -> None:
        """Every default is checked where it is written, even one that every claim overrides."""
        for key, node in defaults.items():
            if key == "tolerance_bytes":
                self.size(node, key, signed=False)
            elif key == "allow_ended_early":
                self.flag(node, key, where="defaults: ")
            else:
                self.number(node, key, where="defaults: ", **_BOUNDS[key])

    def claim(self, node: yaml.Node, defaults: dict[str, yaml.Node]) -> Claim:
        m = self.mapping(node, "a claim", _CLAIM_KEYS)
        for key in ("name", "baseline", "candidate", "metric"):
            if key not in m:
                raise self.fail(node, f"claim is missing key '{key}'")
        name = self.text(m["name"], "name")
        metric = self.text(m["metric"], "metric")
        if metric not in METRICS:
            raise self.fail(m["metric"], f"claim {name!r}: unknown metric {metric!r}; expected one of {', '.join(METRICS)}")
        speedup = change = None
        if "speedup" in m and "change" in m:
            raise self.fail(node, f"claim {name!r} has both 'speedup' and 'change'; a claim states one effect")
        if metric in SPEED_METRICS:
            if "change" in m:
                raise self.fail(m["change"], f"claim {name!r}: metric {metric} takes 'speedup' (x), not 'change'")
            if "speedup" not in m:
                raise self.fail(node, f"claim {name!r}: metric {metric} needs 'speedup' (baseline time / candidate time)")
            if "tolerance_bytes" in m:
                raise self.fail(m["tolerance_bytes"], f"claim {name!r}: 'tolerance_bytes' is for memory metrics")
            speedup = float(self.number(m["speedup"], "speedup", low=0.0, low_open=True, where=f"claim {name!r}: "))
        else:
            if "speedup" in m:
                raise self.fail(m["speedup"], f"claim {name!r}: metric {metric} takes 'change' (e.g. -6GiB), not 'speedup'")
            if "change" not in m and "at_most" not in m:
                raise self.fail(node, f"claim {name!r}: metric {metric} needs 'change' with a unit, e.g. -6GiB, "
                                      "or a bound 'at_most', e.g. 20GiB")
            change = self.size(m["change"], "change", signed=True) if "change" in m else None
        if metric == "memory_bucket":
            if "bucket" not in m:
                raise self.fail(node, f"claim {name!r}: metric memory_bucket needs 'bucket', one of "
                                      f"{', '.join(BUCKET_NAMES)}")
            if self.text(m["bucket"], "bucket") not in BUCKET_NAMES:
                raise self.fail(m["bucket"], f"claim {name!r}: unknown bucket {m['bucket'].value!r}; expected one "
                                             f"of {', '.join(BUCKET_NAMES)}")
        elif "bucket" in m:
            raise self.fail(m["bucket"], f"claim {name!r}: 'bucket' is for metric memory_bucket")
        if "at_most" in m and metric in SPEED_METRICS:
            raise self.fail(m["at_most"], f"claim {name!r}: 'at_most' bounds a memory metric's bytes")
        drift: tuple[str, ...] = ()
        if "declared_drift" in m:
            dnode = m["declared_drift"]
            kinds = [dnode] if isinstance(dnode, yaml.ScalarNode) else dnode.value if isinstance(dnode, yaml.SequenceNode) else None
            if kinds is None:
                raise self.fail(dnode, "'declared_drift' must be a list such as [runtime]")
            for k in kinds:
                kind = self.text(k, "declared_drift")
                if kind == "recipe":
                    raise self.fail(k, f"claim {name!r}: recipe drift cannot be declared: a different feature bundle "
                                       "or model shape is a different experiment, not a speedup")
                if kind not in DECLARABLE_DRIFT:
                    raise self.fail(k, f"claim {name!r}: unknown drift kind {kind!r}; expected {', '.join(DECLARABLE_DRIFT)}")
                drift += (kind,)
        tolerance_bytes = (None if metric in SPEED_METRICS
                           else self.setting(m, defaults, "tolerance_bytes", None, claim=name))
        baseline = self.text(m["baseline"], "baseline")
        last = None
        if baseline.startswith(TAG_PREFIX):
            if not baseline[len(TAG_PREFIX):].strip():
                raise self.fail(m["baseline"], f"claim {name!r}: 'baseline: tag:' needs a tag, e.g. tag:main")
            if metric not in SPEED_METRICS:
                raise self.fail(m["baseline"], f"claim {name!r}: a tag baseline ({baseline}) is for speed metrics "
                                               f"({', '.join(SPEED_METRICS)}); a memory claim compares two named "
                                               "receipts' peaks")
            last = int(self.number(m["last"], "last", low=1, integer=True, where=f"claim {name!r}: ")
                       if "last" in m else DEFAULT_BASELINE_LAST)
        elif "last" in m:
            raise self.fail(m["last"], f"claim {name!r}: 'last' counts the runs of a tag baseline "
                                       f"(baseline: tag:main); this claim's baseline is the receipt {baseline!r}")
        return Claim(
            name=name, baseline=baseline, candidate=self.text(m["candidate"], "candidate"),
            metric=metric, speedup=speedup, change_bytes=change,
            tolerance=float(self.setting(m, defaults, "tolerance", DEFAULT_TOLERANCE, claim=name, **_BOUNDS["tolerance"])),
            tolerance_bytes=tolerance_bytes, declared_drift=tuple(sorted(set(drift))),
            min_steps=int(self.setting(m, defaults, "min_steps", DEFAULT_MIN_STEPS, claim=name, **_BOUNDS["min_steps"])),
            max_cv=float(self.setting(m, defaults, "max_cv", DEFAULT_MAX_CV, claim=name, **_BOUNDS["max_cv"])),
            min_effect=float(self.setting(m, defaults, "min_effect", DEFAULT_MIN_EFFECT, claim=name,
                                          **_BOUNDS["min_effect"])),
            path=self.path, line=_line(node),
            allow_ended_early=self.setting(m, defaults, "allow_ended_early", False, claim=name), last=last,
            bucket=self.text(m["bucket"], "bucket") if "bucket" in m else None,
            at_most_bytes=self.size(m["at_most"], "at_most", signed=False) if "at_most" in m else None,
        )


def _shown(node: yaml.Node, value: Any) -> str:
    """The value as written in the file (`.nan`, `1e999`), not Python's repr of what YAML made of it."""
    return repr(node.value) if isinstance(node, yaml.ScalarNode) else repr(value)
