"""Kernel names as a terminal shows them (TSV and JSON keep them whole)."""

from __future__ import annotations


def short_kernel_name(name: str) -> str:
    """A kernel's name on a terminal: template arguments and the parameter list folded to `<…>` and `(…)`
    (`ncclDevKernel_AllGather_RING_LL(…)`), so one name takes a line or two, not twenty. TSV and JSON keep it whole."""
    out: list[str] = []
    closing: list[str] = []  # what closes each open bracket: a '>' inside (...) is an arrow, not a bracket
    for ch in name.removeprefix("void "):
        if ch in "<(":
            if not closing:
                out.append(ch + "…" + (">" if ch == "<" else ")"))
            closing.append(">" if ch == "<" else ")")
        elif closing and ch == closing[-1]:
            closing.pop()
        elif not closing:
            out.append(ch)
    return "".join(out)
