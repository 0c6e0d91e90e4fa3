"""The RECEIPT line format, owned here: what receipts.capture and `receipts run` write and ingest/native.py reads.

A record is one line `RECEIPT {json}` with "v" (the record version) and "kind" (header | step | phase |
footer); docs/receipt-format.md describes the fields. Standard library only: the in-training recorder
imports this without polars, duckdb or the store.
"""

from __future__ import annotations

import json
from typing import Any

PREFIX = "RECEIPT "
RECORD_VERSION = 1            # what this build writes
SUPPORTED_VERSIONS = (1,)     # what this build reads
KINDS = ("header", "step", "phase", "footer")
LINE_PATTERN = r"RECEIPT (\{.*)$"  # a record anywhere on a line (a launcher may prefix its own rank tag)


def encode(record: dict[str, Any]) -> bytes:
    """One record as the bytes of one log line."""
    return (PREFIX + json.dumps(record, separators=(",", ":")) + "\n").encode("utf-8")

# Phase names that mark the warm-up window (their steps are never steady state); analysis/window.py reads the same.
WARMUP_PHASES = ("compile", "warmup", "warm-up", "warm_up")

# A footer's optional `memory` object (receipts.capture's Recorder.watch_memory), one per rank: integer byte
# counts (and counts) by name; `peak_window` says whether its peaks are the steady steps' or the whole run's.
# Readers of format 1 that predate it ignore it, as they ignore every key they do not know.
MEMORY_INTEGERS = ("parameters_bytes", "gradients_bytes", "optimizer_state_bytes", "activations_bytes",
                   "peak_allocated_bytes", "peak_reserved_bytes", "resident_bytes", "device_total_bytes",
                   "alloc_retries", "ooms", "measured_after_step")
PEAK_WINDOWS = ("steady", "run")


def memory_of(footer: dict[str, Any]) -> dict[str, Any] | None:
    """A footer's `memory`, checked: None when absent; ValueError naming the key whose value is not what the
    format says (a non-negative integer or null; `peak_window` one of PEAK_WINDOWS)."""
    memory = footer.get("memory")
    if memory is None:
        return None
    if not isinstance(memory, dict):
        raise ValueError("'memory' must be an object of byte counts")
    out: dict[str, Any] = {}
    for key in MEMORY_INTEGERS:
        value = memory.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise ValueError(f"memory.{key} must be a non-negative integer or null, got {value!r}")
        out[key] = value
    window = memory.get("peak_window")
    if window is not None and window not in PEAK_WINDOWS:
        raise ValueError(f"memory.peak_window must be one of {', '.join(PEAK_WINDOWS)}, got {window!r}")
    out["peak_window"] = window
    return out


# A footer's optional `recipe` object (receipts.capture's Recorder.record_recipe): the training recipe the recorder
# saw, flat names (`optimizer.class`, `dtype.compute`, `parallel.mesh_shape`, ...) to a string, number, bool or
# null. Ingest stores them among the receipt's features, where a comparison reads each as recipe drift.
RECIPE_VALUE_TYPES = (str, int, float, bool, type(None))


def recipe_of(footer: dict[str, Any]) -> dict[str, Any]:
    """A footer's `recipe`, checked: {} when absent; ValueError naming the key whose value is not a scalar."""
    recipe = footer.get("recipe")
    if recipe is None:
        return {}
    if not isinstance(recipe, dict):
        raise ValueError("'recipe' must be an object of name -> string, number, bool or null")
    for key, value in recipe.items():
        if not isinstance(value, RECIPE_VALUE_TYPES):
            raise ValueError(f"recipe.{key} must be a string, number, bool or null, got {type(value).__name__}")
    return dict(recipe)
