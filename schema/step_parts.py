"""The parts a step's time is split into, by name: what the anatomy stores, the components explain judges and the
dashboard draws, every layer alike. Names only: the kernel categories, the rules that give them and their kinds
are schema/categories.py's (which reads its TOML when imported; explain needs only these names).
"""

from __future__ import annotations

# Derived from the intervals, not from names. compute_only + comm_hidden + exposed_comm + memcpy_only + idle +
# idle_long partition the step span (they sum to it); the kernel and memory categories overlap one another.
# The GPU's idle inside the span is split by the length of the gap that holds it: `idle` in gaps shorter than
# LONG_GAP_NS (a launch-bound stretch: the host issues work about as fast as the GPU runs it, many short gaps),
# `idle_long` in gaps of LONG_GAP_NS or more (the host issued nothing for that long: a sleep, a synchronize and
# host work, a wait for data: one gap per stall).
DECOMPOSITION = ("compute_only", "comm_hidden", "exposed_comm", "memcpy_only", "idle", "idle_long")
# 0.5 ms: a hundred times a kernel launch's host cost (~5 us) and ten times an eager PyTorch operator's dispatch
# under a profiler (tens of us): no gap between two launches of a loop that keeps launching is that long. Checked
# on real steps (docs/statistics.md): the longest launch-bound gap of a steady step is at most 0.45 ms (median
# over steps) in the one-H200 nsys baselines and 0.01 ms on the 2 x H200 lane; the planted 0.5 ms stall leaves
# one gap of 0.73 ms.
LONG_GAP_NS = 500_000
IDLE_LONG = "idle_long"
# The step marker's range outside the GPU span (a stall before the first launch, launch gaps): with the
# decomposition's parts, what a step's range sums to.
HOST_GAP = "host_gap"
STEP_PARTS = (*DECOMPOSITION, HOST_GAP)
# From the end of one step marker's range to the start of the next (a data loader, a checkpoint, logging outside
# the step): host time the step's range does not hold. With the step parts, what the step-to-step period sums to.
BETWEEN_STEPS = "between_steps"
PERIOD_PARTS = (*STEP_PARTS, BETWEEN_STEPS)
