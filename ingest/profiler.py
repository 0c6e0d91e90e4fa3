"""The profiler a run ran under, and its mode, as software facts: a profiler changes the run it measures (nsys's
CUPTI callbacks, the PyTorch profiler's), so two runs under different ones differ in their runtime (compare's
runtime drift, where software keys land). Read from the launcher's command line (`nsys profile ...`) and from
an attached or ingested profile (nsys export, Kineto traces); a receipt that names none ran under none."""

from __future__ import annotations

import shlex

# nsys options that shape what is traced, and so what the run paid for it; output paths and the like are left out.
_NSYS_MODE = {"-t": "trace", "--trace": "trace", "--cuda-graph-trace": "cuda-graph-trace", "-s": "sample",
              "--sample": "sample", "--cpuctxsw": "cpuctxsw", "-c": "capture-range", "--capture-range": "capture-range",
              "--cuda-memory-usage": "cuda-memory-usage", "--gpu-metrics-devices": "gpu-metrics-devices"}
_NSYS_VERBS = ("profile", "launch")


def of_command(command: str | None) -> dict[str, str]:
    """{"profiler": "nsys", "profiler_mode": "trace=cuda,nvtx sample=none"} for a command run under `nsys profile`
    (or `nsys launch`); {} for any other command, or one that does not parse."""
    try:
        words = shlex.split(command or "")
    except ValueError:
        return {}
    at = next((i for i, w in enumerate(words[:-1]) if w.rsplit("/", 1)[-1] == "nsys" and words[i + 1] in _NSYS_VERBS),
              None)
    if at is None:
        return {}
    mode: dict[str, str] = {}
    rest, i = words[at + 2:], 0
    # Every nsys option takes a value (`-t cuda,nvtx`, `--sample=none`); the first word that is neither an option
    # nor an option's value begins the profiled program, whose own options are not nsys's.
    while i < len(rest) and rest[i].startswith("-"):
        name, inline, value = rest[i].partition("=")
        if not inline and i + 1 < len(rest) and not rest[i + 1].startswith("-"):
            value, i = rest[i + 1], i + 1
        if name in _NSYS_MODE:
            mode[_NSYS_MODE[name]] = value
        i += 1
    return {"profiler": "nsys", **({"profiler_mode": " ".join(f"{k}={v}" for k, v in sorted(mode.items()))}
                                   if mode else {})}


def of_profile(source_format: str) -> dict[str, str]:
    """The profiler an export of `source_format` ('nsys' | 'kineto') was captured under."""
    return {"profiler": source_format}
