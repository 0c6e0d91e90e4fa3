"""A kernel's change split by launch shape: which calls were added, and at what price.

One kernel name can cover several problem sizes (a GEMM of another size), and where the launch shape (grid and
block, anatomy_kernel_shapes) differs with the size it tells the calls apart. The kernel's calls and ms per step
split into (name, shape) groups, and the calls no shape was recorded for are one more group (None). Per group,
with the means over each side's runs:

  calls changed    its change is `more calls`: the calls added (or removed) priced at the group's change per added
                   call, Δms / Δcalls. For a shape new in the candidate that is exactly its own mean per call; for a
                   shape the baseline had too it takes the group's other calls as unchanged. Not the group's mean in
                   the candidate: a persistent kernel's grid is the GPU's SM count whatever the problem's size (the
                   planted 4096³ GEMMs on an H200 launch as grid (2,66,1) block (384,1,1), as do the model's own
                   calls of that kernel), and that mean would price the added calls at the old calls' duration.
  same calls       its change is `slower calls` (faster where negative).

Shapes are evidence inside a kernel's explanation, not components: the verdict and its Benjamini-Hochberg family
stay the kernel's. Where any run compared has no shapes recorded (a profile without them, or one stored before
schema 16), the kernel is one group: its added calls priced at the change per added call, as without shapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

# A group whose mean calls per step differ by less than this fraction of its calls keeps its calls.
SAME_CALLS = 1e-9
_LEFT = 1e-9  # calls per step: what is left for the unshaped group after the shaped ones (float dust below)

ShapeRows = Mapping[str, Mapping[str, tuple[float, float]]]  # kernel name -> shape -> (calls, ms) per rank-step
# Per run compared (baseline runs first): a few floats, summed in order as NumPy sums fewer than 8 (no NumPy here).
PerRun = list[float]


@dataclass(frozen=True)
class ShapeChange:
    """One (kernel, launch shape) group of the calls compared."""
    shape: str | None                  # 'grid (2,66,1) block (384,1,1)'; None: the calls without a recorded shape
    baseline_calls_per_step: float
    candidate_calls_per_step: float
    baseline_ms_per_step: float
    candidate_ms_per_step: float
    ms_per_call: float | None          # calls changed: Δms / Δcalls, the price of each added (removed) call

    @property
    def calls_delta_per_step(self) -> float:
        return self.candidate_calls_per_step - self.baseline_calls_per_step

    @property
    def delta_ms_per_step(self) -> float:
        return self.candidate_ms_per_step - self.baseline_ms_per_step

    @property
    def new(self) -> bool:
        """The shape ran in no baseline run: its added calls are priced at their own mean."""
        return self.baseline_calls_per_step == 0.0


@dataclass(frozen=True)
class Split:
    """A kernel's change as more calls and slower calls, and the groups it came from."""
    more_calls_ms: float
    slower_calls_ms: float | None      # None when no group kept its calls: nothing was measured as the same calls
    groups: tuple[ShapeChange, ...]    # every group, the changed ones first, largest |Δms| first

    @property
    def changed(self) -> tuple[ShapeChange, ...]:
        return tuple(g for g in self.groups if g.ms_per_call is not None)


def shape_table(shapes: Sequence[ShapeRows], keys: Mapping[str, tuple[str, str]]
                ) -> dict[str, dict[str, tuple[PerRun, PerRun]]] | None:
    """Per kernel key (explain.kernel_keys) and shape: calls and ms per rank-step of each run (0 where absent).
    None when any run has no shapes recorded: then no kernel is split (a group a run cannot see would look new)."""
    if not shapes or not all(shapes):
        return None
    n = len(shapes)
    out: dict[str, dict[str, tuple[PerRun, PerRun]]] = {}
    for i, run in enumerate(shapes):
        for name, by_shape in run.items():
            if name not in keys:
                continue
            groups = out.setdefault(keys[name][0], {})
            for shape, (calls, ms) in by_shape.items():
                c, m = groups.setdefault(shape, ([0.0] * n, [0.0] * n))
                c[i] += calls
                m[i] += ms
    return out


def split(a: Sequence[float], b: Sequence[float], calls: Sequence[float], n_a: int,
          groups: Mapping[str, tuple[PerRun, PerRun]] | None) -> Split:
    """The kernel's change (its ms per step `a` baseline, `b` candidate; `calls` of every run) over its shape groups
    (shape_table's; None: one group, the whole kernel)."""
    ms = [*a, *b]
    parts: list[tuple[str | None, Sequence[float], Sequence[float]]] = []
    if groups:
        shaped_calls = [sum(run) for run in zip(*(c for c, _ in groups.values()))]
        shaped_ms = [sum(run) for run in zip(*(m for _, m in groups.values()))]
        parts = [(shape, c, m) for shape, (c, m) in groups.items()]
        left_calls = [x - y for x, y in zip(calls, shaped_calls)]
        left_ms = [x - y for x, y in zip(ms, shaped_ms)]
        if any(abs(x) > _LEFT for x in left_calls):
            parts.append((None, left_calls, left_ms))
    else:
        parts = [(None, calls, ms)]
    made = [_group(shape, c, m, n_a) for shape, c, m in parts]
    more = float(sum(g.delta_ms_per_step for g in made if g.ms_per_call is not None))
    kept = [g.delta_ms_per_step for g in made if g.ms_per_call is None]
    made.sort(key=lambda g: (g.ms_per_call is None, -abs(g.delta_ms_per_step), g.shape or ""))
    return Split(more, float(sum(kept)) if kept else None, tuple(made))


def _group(shape: str | None, calls: Sequence[float], ms: Sequence[float], n_a: int) -> ShapeChange:
    ca, cb = _mean(calls[:n_a]), _mean(calls[n_a:])
    ma, mb = _mean(ms[:n_a]), _mean(ms[n_a:])
    same = abs(cb - ca) <= SAME_CALLS * max(1.0, ca)
    return ShapeChange(shape, ca, cb, ma, mb, None if same else (mb - ma) / (cb - ca))


def _mean(x: Sequence[float]) -> float:
    return float(sum(x) / len(x))
