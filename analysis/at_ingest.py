"""What ingest computes once from parsed evidence and stores with it: a profile's step markers read as a run's
step series, and an anatomy under its receipt's steady window with what is computed over the steady steps (kernel
totals by name, the straggler report, the per-run component summaries); and whether an attached profile's steps
are its log's."""

from __future__ import annotations

from dataclasses import replace
from typing import cast

import numpy as np
import polars as pl

from receipts.analysis import stragglers
from receipts.analysis.anatomy import steady_kernel_shapes, steady_kernel_totals, step_kernel_rows
from receipts.analysis.components import components
from receipts.analysis.window import cut_short_tail, in_window
from receipts.ingest import profiler
from receipts.schema.model import Anatomy, ParsedRun, StepWindow, steps_frame


def receipt_from_anatomy(anatomy: Anatomy) -> ParsedRun:
    """A profiler export ingested on its own: its step markers become the step series, and its window is
    chosen by the same rule as a log's (choose_window), with a last step cut short by the capture's end
    (cut_short_tail: next to no GPU work) left out."""
    steps = anatomy.steps.filter(pl.col("step").is_not_null())
    frame = steps_frame(steps.select("step", "rank", pl.col("wall_ms").alias("step_ms")))
    busy = {int(s): float(ms) for s, ms in steps.group_by("step").agg(pl.col("gpu_ms").max()).iter_rows()
            if ms is not None}
    return ParsedRun(
        source_format=anatomy.source_format,
        format_version=anatomy.schema_version,
        steps=frame,
        claim=anatomy.claim,
        env=anatomy.env,
        software={**anatomy.software, **profiler.of_profile(anatomy.source_format)},
        gpu_model=anatomy.gpu_model,
        gpu_count=anatomy.gpu_count,
        world_size=anatomy.world_size,
        ranks_traced=anatomy.ranks_traced,
        gpus_on_host=anatomy.gpus_on_host,
        started_at=anatomy.started_at,
        warnings=anatomy.warnings,
        memory=(),
        tail_step=cut_short_tail(frame, busy),
    )


def in_receipt_window(anatomy: Anatomy, window: StepWindow) -> Anatomy:
    """The anatomy under its receipt's steady window (one window per receipt), with what is computed over the
    steady steps: the straggler report, the kernel totals by name (and by launch shape) and the per-run component
    summaries."""
    anatomy = with_stragglers(replace(anatomy, steps=in_window(anatomy.steps, window)))
    if anatomy.kernel_steps is not None:
        anatomy = replace(anatomy, kernels=steady_kernel_totals(anatomy.kernel_steps, anatomy.steps),
                          step_kernels=step_kernel_rows(anatomy.kernel_steps),
                          kernel_shapes=steady_kernel_shapes(anatomy.kernel_steps, anatomy.steps))
    return replace(anatomy, components=components(anatomy.rows, anatomy.steps, anatomy.kernels, anatomy.nvtx,
                                                  anatomy.gap_places))


def with_stragglers(anatomy: Anatomy) -> Anatomy:
    """Rank-skew attribution over the steady steps of a multi-rank profile (analysis/stragglers.py), kept on
    the anatomy so it is stored with it; a single-rank profile, or one without communication, gets none."""
    if anatomy.events is None or anatomy.steps.height == 0:
        return anatomy
    steady = anatomy.steps.filter(~pl.col("warmup") & pl.col("step").is_not_null())
    # lazy: the analysis collects the parts it reads; a joined copy of every steady activity was the peak of
    # an nsys ingest (5M kernels: 809 MiB)
    events = (anatomy.events.lazy().join(steady.select("rank", "step").lazy(), on=["rank", "step"], how="semi")
              if steady.height else anatomy.events)
    step_ms = (cast("float | None", steady.group_by("step").agg(pl.col("wall_ms").max())["wall_ms"].median())
               if steady.height else None)
    if anatomy.category_rules is None:
        raise ValueError("an anatomy without the category rules it was made under (pipeline/parse.parse_profile)")
    report = stragglers.analyse(events, step_ms, kinds=anatomy.category_rules.kinds)
    if report is None:
        return anatomy
    summary = stragglers.report_json(report)
    summary.pop("per_step")
    return replace(anatomy, straggler_steps=report.per_step, straggler_summary=summary)


# An attached profile's steps against its log's: the median over the steps both hold of (profile step time / log
# step time) must lie within [1 / STEP_TIME_FACTOR, STEP_TIME_FACTOR]. A profile times a step by its host-side range
# (NVTX, ProfilerStep#), which the host may leave before the GPU is done (CUDA graph replays), so one run's own
# profile reads 0.40-1.03 of its log over the eleven run/profile pairs in tests/data/gpu; another workload's steps
# differ by multiples (the CUDA-graph loop's export against the FSDP2 toy's log: 0.17).
STEP_TIME_FACTOR = 3.0


def profile_step_times(anatomy: Anatomy) -> dict[int, float]:
    """Each step of a profile and its time (ms, its slowest rank's wall time); empty without step markers."""
    steps = anatomy.steps.filter(pl.col("step").is_not_null() & pl.col("wall_ms").is_not_null())
    return {int(s): float(ms) for s, ms in steps.group_by("step").agg(pl.col("wall_ms").max()).iter_rows()}


def steps_mismatch(profile: dict[int, float], log: dict[int, float], first_step: int | None,
                   last_step: int | None) -> str | None:
    """Why a profile's steps (step -> ms) are not the log's, or None: a step outside the log's first..last step,
    or step times off by more than STEP_TIME_FACTOR (module comment above). `log`: the log's step times over the
    profile's range."""
    if not profile or first_step is None or last_step is None:
        return None
    outside = sorted(s for s in profile if not first_step <= s <= last_step)
    if outside:
        return (f"{len(outside)} of the profile's steps ({outside[0]}..{outside[-1]}) lie outside the log's steps "
                f"{first_step}..{last_step}")
    ratios = [profile[s] / log[s] for s in profile if log.get(s)]
    if not ratios:
        return None
    ratio = float(np.median(ratios))
    if 1 / STEP_TIME_FACTOR <= ratio <= STEP_TIME_FACTOR:
        return None
    return (f"its step times are {ratio:.2f}x the log's (median over the {len(ratios)} steps both hold; one run's "
            f"profile reads within {STEP_TIME_FACTOR:g}x of its log)")
