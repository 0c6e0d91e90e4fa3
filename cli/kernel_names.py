"""Kernel names as a terminal shows them (TSV and JSON keep them whole)."""

from __future__ import annotations


def short_kernel_name(name: str) -> str:
    """A kernel's name on a terminal: template arguments and the parameter list folded to `<…>` and `(…)`
    (`ncclDevKernel_AllGather_RING_LL(…)`), so one name takes a line or two, not twenty. TSV and JSON keep it whole."""
    out, depth = [], 0
    for ch in name.removeprefix("void "):
        if ch in "<(":
            if depth == 0:
                out.append(ch + "…" + (">" if ch == "<" else ")"))
            depth += 1
        elif ch in ">)" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)
