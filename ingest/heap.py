"""The C heap handed back to the system on request, between the phases of a parse that each peak in turn."""

from __future__ import annotations

import ctypes


def trim_c_heap() -> None:
    """Hand the C heap's free pages back to the system (glibc's malloc_trim; elsewhere nothing to do). numpy
    arrays under glibc's mmap threshold (which rises to 32 MB) live on that heap and polars allocates from its
    own, which cannot reuse what numpy freed there: at 10M kernels the anatomy's freed batches, sort and chunk
    arrays stayed resident beside the events (peak 1,308 MiB; 1,043 with a trim after each process)."""
    try:
        trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    except (OSError, TypeError):
        return
    if trim is not None:
        trim(0)
