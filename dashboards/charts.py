"""Altair chart builders: pure functions, a frame in and a chart out. Units on every axis.

Nothing here queries or decides: the frames come from sql/ and analysis/; these only draw them.
Bytes are drawn in GiB (1 GiB = 2**30 bytes, as torch.cuda memory APIs and nvidia-smi's MiB count).
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any, Callable, cast

import altair as alt
import polars as pl

from receipts.schema.categories import DECOMPOSITION

GIB = float(1 << 30)
# One colour per category everywhere, so a reader learns it once; idle light grey, idle in long gaps (a stall) dark.
DECOMPOSITION_SCALE = alt.Scale(domain=list(DECOMPOSITION), range=["#4c78a8", "#72b7b2", "#e45756", "#f58518", "#d3d3d3",
                                                                   "#7f7f7f"])
_DECOMPOSITION_ORDER = "indexof(" + str(list(DECOMPOSITION)).replace("'", '"') + ", datum.category)"
WIDE = 720


def _fit_width(make: Callable[..., Any]) -> Callable[..., Any]:
    """Streamlit sizes a chart without an `autosize` with type "fit": the whole chart, axes, title and legend
    included, squeezed into `height`, so a 220-pixel chart drew its data in 80. "fit-x" stretches the width
    to the page and keeps `height` for the data, as the chart asks. Not for facets and concatenations, which
    Streamlit already lays out by their content."""
    @functools.wraps(make)
    def sized(*args: Any, **kwargs: Any) -> Any:
        chart = make(*args, **kwargs)
        return None if chart is None else chart.properties(autosize=alt.AutoSizeParams(type="fit-x", contains="padding"))
    return sized
# Peak-memory columns as a reader names them in legends.
_PEAK_NAMES = {"peak_allocated_bytes": "peak allocated", "peak_reserved_bytes": "peak reserved"}


@_fit_width
def lane_counts(lanes: pl.DataFrame) -> alt.Chart:
    """Receipts per lane; rumors (incomplete identity) in red."""
    return alt.Chart(lanes).mark_bar().encode(
        y=alt.Y("lane:N", sort="-x", title=None, axis=alt.Axis(labelLimit=420)),
        x=alt.X("n_receipts:Q", title="receipts (count)", axis=alt.Axis(format="d", tickMinStep=1)),
        color=alt.Color("rumor:N", title="rumor", scale=alt.Scale(domain=[False, True], range=["#4c78a8", "#e45756"])),
        tooltip=["lane", "n_receipts", alt.Tooltip("median_step_ms:Q", title="median step (ms)", format=",.1f"),
                 alt.Tooltip("last_run_at:T", title="last run")],
    ).properties(width=WIDE, height=alt.Step(22), title="receipts per lane")


@_fit_width
def step_series(steps: pl.DataFrame, warmup_last_step: int | None) -> alt.LayerChart | alt.FacetChart:
    """Step time per step (slowest rank: a step ends when its last rank does), warm-up window shaded."""
    timed = steps.filter(pl.col("step_ms").is_not_null())
    x = alt.X("step:Q", title="step (iteration)")
    # Scaled to the steady window: an 18 s compile step would flatten thousands of ~0.6 s steps to a line at
    # zero. Warm-up steps above the scale are clipped at its top (their values stay in the tooltip).
    steady = timed.filter(pl.col("step") > warmup_last_step) if warmup_last_step is not None else timed
    per_step = steady.group_by("step").agg(pl.col("step_ms").max())["step_ms"]
    top = cast(float, per_step.quantile(0.99)) * 1.15 if per_step.len() else None
    y = alt.Y("max(step_ms):Q", title="step time (ms; warm-up clipped)" if top else "step time (ms)",
              scale=alt.Scale(domain=[0, top], clamp=True) if top else alt.Undefined)
    line = alt.Chart(timed).mark_line(strokeWidth=1, clip=True).encode(
        x=x, y=y, tooltip=["step", "max(step_ms):Q"])
    layers = []
    if warmup_last_step is not None and timed.height:
        band = pl.DataFrame({"start": [timed["step"].min()], "end": [warmup_last_step], "label": ["warm-up / compile"]})
        layers.append(alt.Chart(band).mark_rect(opacity=0.18, color="#f58518").encode(
            x="start:Q", x2="end:Q", tooltip=["label", "start", "end"]))
    return alt.layer(*layers, line).properties(width=WIDE, height=240, title="step time (warm-up shaded, excluded)")


@_fit_width
def memory_series(mem: pl.DataFrame) -> alt.Chart | alt.LayerChart | alt.FacetChart:
    """Allocated vs reserved per step; the shaded band between them is the allocator's gap. A value the log
    did not give is not drawn (Vega computes null / x as 0: an unknown reserved became a line at 0 GiB), and
    the gap only where both are known."""
    # Legends say what a reader calls the series, not the column they came from.
    long = (mem.select("step", allocated=pl.col("allocated_bytes") / GIB, reserved=pl.col("reserved_bytes") / GIB)
            .unpivot(["allocated", "reserved"], index="step", variable_name="kind", value_name="gib")
            .drop_nulls("gib"))
    x = alt.X("step:Q", title="step (iteration)")
    lines = alt.Chart(long).mark_line().encode(
        x=x, y=alt.Y("gib:Q", title="memory (GiB)"),
        color=alt.Color("kind:N", title=None, scale=alt.Scale(domain=["allocated", "reserved"],
                                                              range=["#4c78a8", "#e45756"])))
    both = mem.select("step", allocated=pl.col("allocated_bytes") / GIB, reserved=pl.col("reserved_bytes") / GIB
                      ).drop_nulls()
    if both.is_empty():
        known = ", ".join(sorted(set(long["kind"].to_list()))) or "no memory"
        return lines.properties(width=WIDE, height=220, title=f"{known} per step (the log gives no other)")
    gap = alt.Chart(both).mark_area(opacity=0.25, color="#e45756").encode(
        x=x, y=alt.Y("allocated:Q", title="memory (GiB)"), y2="reserved:Q")
    return alt.layer(gap, lines).properties(width=WIDE, height=220, title="allocated vs reserved (gap shaded)")


@_fit_width
def memory_peaks(per_rank: pl.DataFrame) -> alt.Chart:
    """Per-rank peaks when the log printed no per-step memory."""
    frame = per_rank.with_columns(pl.col("rank").cast(pl.Utf8).fill_null("logging rank"))
    return alt.Chart(frame.rename(_PEAK_NAMES)).transform_fold(list(_PEAK_NAMES.values()), as_=["kind", "bytes"]) \
        .transform_calculate(gib=f"datum.bytes / {GIB}").mark_bar().encode(
        y=alt.Y("rank:N", title="rank"), x=alt.X("gib:Q", title="peak memory (GiB)"),
        yOffset=alt.YOffset("kind:N"), color=alt.Color("kind:N", title=None),
        tooltip=["rank:N", "kind:N", alt.Tooltip("gib:Q", format=",.2f")],
    ).properties(width=WIDE, title="peak allocated vs reserved per rank")


@_fit_width
def topology(cells: pl.DataFrame) -> alt.LayerChart | alt.FacetChart:
    """The connection matrix; GPU pairs off NVLink in red."""
    frame = cells.with_columns(
        pl.when(pl.col("unhealthy")).then(pl.lit("GPU pair off NVLink"))
        .when(pl.col("cell") == "X").then(pl.lit("self"))
        .when(pl.col("cell").str.starts_with("NV")).then(pl.lit("NVLink"))
        .otherwise(pl.lit("PCIe / CPU path")).alias("link"))
    base = alt.Chart(frame).encode(x=alt.X("col_device:N", title="to device", sort=None),
                                   y=alt.Y("row_device:N", title="from device", sort=None))
    rect = base.mark_rect(stroke="white").encode(color=alt.Color("link:N", title="link", scale=alt.Scale(
        domain=["NVLink", "GPU pair off NVLink", "PCIe / CPU path", "self"],
        range=["#54a24b", "#e45756", "#bab0ac", "#eeeeee"])), tooltip=["row_device", "col_device", "cell", "link"])
    text = base.mark_text(fontSize=11).encode(text="cell:N")
    return alt.layer(rect, text).properties(width=alt.Step(44), height=alt.Step(26), title="topology (nvidia-smi topo -m)")


def anatomy_by_step(rows: pl.DataFrame, *, ranks_label: str | None = None) -> alt.FacetChart:
    """Where each step went, per rank: the non-overlapping decomposition (compute only, communication hidden
    under compute, exposed communication, memory work under neither, idle), stacked: it sums to the step.
    `ranks_label`: the one column's name when the rows are a summary over ranks (analysis.anatomy.mean_over_ranks)."""
    frame = (rows.filter(pl.col("category").is_in(DECOMPOSITION))
             .with_columns(pl.col("step").cast(pl.Utf8).fill_null("window").alias("step_label"),
                           (pl.lit(ranks_label) if ranks_label else pl.col("rank").cast(pl.Utf8).fill_null("?"))
                           .alias("rank_label")))
    x = alt.X("step_label:N", title="step", sort=None)
    # Scaled to the steady steps, as step_series is: a 3 s compile step would flatten 20 ms steps to slivers.
    # A warm-up bar above the scale is clipped at its top (its parts stay in the tooltip).
    per_step = (frame.filter(~pl.col("warmup").fill_null(False)).group_by("rank_label", "step_label")
                .agg(pl.col("time_ms").sum())["time_ms"])
    warm = frame.filter(pl.col("warmup").fill_null(False)).height > 0
    top = cast(float, per_step.max()) * 1.15 if per_step.len() and warm else None
    y = alt.Y("sum(time_ms):Q", title="time per step (ms; warm-up clipped)" if top else "time per step (ms)",
              scale=alt.Scale(domain=[0, top], clamp=True) if top else alt.Undefined)
    bars = alt.Chart(frame).mark_bar(clip=True).encode(
        x=x, y=y,
        color=alt.Color("category:N", scale=DECOMPOSITION_SCALE, title="part of the step"),
        order=alt.Order("order:Q"),
        opacity=alt.condition("datum.warmup", alt.value(0.45), alt.value(1.0)),
        tooltip=["step_label", "category", alt.Tooltip("time_ms:Q", format=",.3f"), "warmup"])
    return bars.transform_calculate(order=_DECOMPOSITION_ORDER).properties(width=360, height=240).facet(
        column=alt.Column("rank_label:N", title=None if ranks_label else "rank")).properties(
        title=f"per step {'(the mean of the ranks)' if ranks_label else 'and rank'}: parts that sum to the step "
              "(faded = warm-up)")


@_fit_width
def anatomy_by_rank(window: pl.DataFrame) -> alt.Chart:
    """Steady state, ms per step per rank, the non-overlapping decomposition stacked (it sums to the step)."""
    frame = window.filter(pl.col("category").is_in(DECOMPOSITION)).with_columns(
        pl.col("rank").cast(pl.Utf8).fill_null("?"))
    return alt.Chart(frame).mark_bar().encode(
        y=alt.Y("rank:N", title="rank"), x=alt.X("per_step_ms:Q", title="time per step (ms)"),
        color=alt.Color("category:N", scale=DECOMPOSITION_SCALE, title="part of the step",
                        legend=alt.Legend(orient="bottom", columns=5)),
        order=alt.Order("order:Q"),
        tooltip=["rank", "category", alt.Tooltip("per_step_ms:Q", format=",.3f")],
    ).transform_calculate(order=_DECOMPOSITION_ORDER).properties(
        width=WIDE, height=alt.Step(28), title="per rank: parts that sum to the step")


@_fit_width
def anatomy_categories(window: pl.DataFrame) -> alt.Chart:
    """Steady state busy time per kernel / memory category and rank, side by side, NOT stacked: the categories
    overlap (communication runs under compute), so their sum is no step time."""
    frame = window.filter(~pl.col("category").is_in(DECOMPOSITION)).with_columns(  # a user's categories too
        pl.col("rank").cast(pl.Utf8).fill_null("?"))
    return alt.Chart(frame).mark_bar().encode(
        y=alt.Y("category:N", title=None), yOffset=alt.YOffset("rank:N"),
        x=alt.X("per_step_ms:Q", title="busy time per step (ms; categories overlap, not additive)"),
        color=alt.Color("rank:N", title="rank"),
        tooltip=["rank", "category", alt.Tooltip("per_step_ms:Q", format=",.3f")],
    ).properties(width=WIDE, title="busy time by category (overlapping)")


@_fit_width
def anatomy_spread(across: pl.DataFrame) -> alt.LayerChart | alt.FacetChart:
    """Steady state, each category's ms per step over the ranks (analysis.anatomy.across_ranks): a bar from the
    least to the most rank, a tick at the median. For a profile of many ranks, where a bar per rank and category
    (anatomy_categories) is a comb nobody can read."""
    frame = across.filter(pl.col("phase").is_in(["steady", "window"])
                          & ~pl.col("category").is_in(DECOMPOSITION))
    y = alt.Y("category:N", title=None, sort=alt.EncodingSortField("median_ms", order="descending"),
              axis=alt.Axis(labelLimit=240))
    tooltip = ["category", "ranks", alt.Tooltip("median_ms:Q", title="median (ms)", format=",.3f"),
               alt.Tooltip("min_ms:Q", title="least (ms)", format=",.3f"), alt.Tooltip("min_rank:Q", title="least: rank"),
               alt.Tooltip("max_ms:Q", title="most (ms)", format=",.3f"), alt.Tooltip("max_rank:Q", title="most: rank"),
               alt.Tooltip("spread_pct:Q", title="spread (% of median)", format=".1f")]
    span = alt.Chart(frame).mark_bar(height=10, opacity=0.45, color="#4c78a8").encode(
        y=y, x=alt.X("min_ms:Q", title="busy time per step over the ranks (ms): least to most, tick at the median"),
        x2="max_ms:Q", tooltip=tooltip)
    median = alt.Chart(frame).mark_tick(thickness=2, size=18, color="#222222").encode(y=y, x="median_ms:Q",
                                                                                     tooltip=tooltip)
    return alt.layer(span, median).properties(width=WIDE, height=alt.Step(24),
                                              title="each category over the ranks (steady state)")


@_fit_width
def anatomy_phases(window: pl.DataFrame) -> alt.Chart:
    """Warm-up beside steady state, ms per step by category (mean over ranks). Horizontal: category
    names stay readable, and Streamlit's fit-to-container cannot squeeze rotated labels into the plot."""
    return alt.Chart(window).mark_bar().encode(
        y=alt.Y("category:N", title=None), yOffset=alt.YOffset("phase:N"),
        x=alt.X("mean(per_step_ms):Q", title="time per step (ms, mean over ranks)"),
        color=alt.Color("phase:N", title="phase", scale=alt.Scale(domain=["warmup", "steady", "window"],
                                                                  range=["#f58518", "#4c78a8", "#72b7b2"])),
        tooltip=["phase:N", "category:N", alt.Tooltip("mean(per_step_ms):Q", format=",.3f")],
    ).properties(width=WIDE, height=alt.Step(22), title="warm-up vs steady")


@_fit_width
def nvtx_families(families: pl.DataFrame) -> alt.Chart:
    """NVTX range families by total time; block families (ablock/eblock/mblock/rblock) highlighted."""
    frame = families.with_columns(pl.col("rank").cast(pl.Utf8).fill_null("?"))
    return alt.Chart(frame).mark_bar().encode(
        y=alt.Y("family:N", sort="-x", title=None, axis=alt.Axis(labelLimit=300)),
        x=alt.X("sum(total_ms):Q", title="range time, summed over ranks (ms)"),
        color=alt.Color("block_family:N", title="block family",
                        scale=alt.Scale(domain=[True, False], range=["#f58518", "#4c78a8"])),
        tooltip=["family", "rank", "count", alt.Tooltip("total_ms:Q", format=",.3f")],
    ).properties(width=WIDE, height=alt.Step(18), title="NVTX ranges")


@_fit_width
def ratio_ci(value: float, low: float, high: float, confidence: float) -> alt.LayerChart | alt.FacetChart:
    """B/A median step time with its CI against the no-change line at 1."""
    frame = pl.DataFrame({"label": ["B / A step time"], "value": [value], "low": [low], "high": [high]})
    title = f"ratio of median step times B/A ({confidence:.0%} CI; < 1 = B faster)"
    x = alt.X("value:Q", title=title, scale=alt.Scale(zero=False, padding=20))
    rule = alt.Chart(pl.DataFrame({"one": [1.0]})).mark_rule(strokeDash=[4, 4], color="grey").encode(x="one:Q")
    bar = alt.Chart(frame).mark_errorbar(thickness=2).encode(x=alt.X("low:Q", title=title), x2="high:Q", y="label:N")
    point = alt.Chart(frame).mark_point(filled=True, size=120, color="black").encode(
        x=x, y=alt.Y("label:N", title=None), tooltip=["value", "low", "high"])
    # a discrete (step) height: a fixed one is squeezed to nothing by Streamlit's fit-to-container
    return alt.layer(rule, bar, point).properties(width=WIDE, height=alt.Step(40), title="step time ratio with its CI")


def _named_sides(series: pl.DataFrame, a_name: str, b_name: str, more: dict[str, str] | None = None) -> pl.DataFrame:
    """Each row's run as a legend names it: "A name", "B name", or an overlaid run's own name."""
    more = more or {}
    return series.with_columns(pl.when(pl.col("side") == "A").then(pl.lit(f"A {a_name}"))
                               .when(pl.col("side") == "B").then(pl.lit(f"B {b_name}"))
                               .otherwise(pl.col("receipt_id").replace_strict(more, default=pl.col("receipt_id")))
                               .alias("run"))


def _bulk_range(values: pl.Series) -> tuple[float, float]:
    """The 1st to 99th percentile, padded: one 20x spike must not flatten thousands of steady steps."""
    lo, hi = cast(float, values.quantile(0.01)), cast(float, values.quantile(0.99))
    pad = max((hi - lo) * 0.1, hi * 0.01)
    return max(lo - pad, 0.0), hi + pad


# The widest label a legend or axis shows whole (pixels): a run or component name, never cut at Vega's 160-180.
LABEL_LIMIT = 420

# A and B keep their colours whatever else is overlaid; more runs take the rest of tableau10.
_A_B_COLORS = ["#4c78a8", "#f58518"]
_MORE_COLORS = ["#54a24b", "#b279a2", "#9d755d", "#e45756", "#72b7b2", "#eeca3b", "#ff9da6", "#bab0ac"]
MAX_OVERLAID = len(_MORE_COLORS)


def _run_color(named: pl.DataFrame) -> alt.Color:
    """Each run's colour, A's and B's first, in a legend on top."""
    runs = named.sort(pl.col("side").replace_strict({"A": 0, "B": 1}, default=2), "receipt_id")["run"].unique(
        maintain_order=True).to_list()
    return alt.Color("run:N", title=None, scale=alt.Scale(domain=runs, range=(_A_B_COLORS + _MORE_COLORS)[:len(runs)]),
                     legend=alt.Legend(orient="top", columns=3, labelLimit=260))


def _dot_size(points: int) -> float:
    """Dots big enough to see at a glance where there are few, small enough not to merge into a band where
    there are thousands (area in square pixels, as Vega-Lite sizes points)."""
    return max(8.0, min(48.0, 6000.0 / max(points, 1)))


@_fit_width
def compare_series(series: pl.DataFrame, a_name: str, b_name: str,
                   more: dict[str, str] | None = None) -> alt.LayerChart | alt.FacetChart:
    """A's and B's steady step times as points (with any more runs of the lane overlaid: `more` maps their ids
    to names), aligned by position in the steady window (points, not lines: a run alternating between two step
    times, e.g. an eval every 10th step, reads as two bands, not a smear), each run's median a dashed line of
    its colour. The y axis spans the bulk of the runs (1st-99th percentile); spikes sit on its edge."""
    named = _named_sides(series, a_name, b_name, more)
    lo, hi = _bulk_range(named["step_ms"])
    color = _run_color(named)
    scale = alt.Scale(domain=[lo, hi], clamp=True)
    y = alt.Y("step_ms:Q", title="step time (ms)", scale=scale)
    points = alt.Chart(named).mark_circle(size=_dot_size(named.height), opacity=0.8, clip=True).encode(
        x=alt.X("steady_index:Q", title="steady step (0 = first step after warm-up)"), y=y, color=color,
        tooltip=["run", "step", alt.Tooltip("step_ms:Q", format=".3f")])
    medians = named.group_by("run").agg(pl.col("step_ms").median().alias("median_ms"))
    rules = alt.Chart(medians).mark_rule(strokeDash=[6, 3], strokeWidth=1.5, clip=True).encode(
        y=alt.Y("median_ms:Q", scale=scale), color=color,
        tooltip=["run", alt.Tooltip("median_ms:Q", title="median (ms)", format=".3f")])
    runs = medians.height
    title = "steady step time, A and B" if runs <= 2 else f"steady step time, A, B and {runs - 2} more of the lane"
    return alt.layer(points, rules).properties(width=WIDE, height=240, title=title)


@_fit_width
def compare_distributions(series: pl.DataFrame, a_name: str, b_name: str, bins: int = 60,
                          more: dict[str, str] | None = None) -> alt.Chart:
    """Each run's steady step times as a histogram of the share of its steps (runs of different lengths
    compare), over the bulk of the runs; steps beyond it are counted in the edge bins."""
    named = _named_sides(series, a_name, b_name, more)
    lo, hi = _bulk_range(named["step_ms"])
    width = (hi - lo) / bins or 1.0
    shares = (named.with_columns(((pl.col("step_ms").clip(lo, hi) - lo) / width).floor().clip(0, bins - 1)
                                 .cast(pl.Int64).alias("bin"))
              .group_by("run", "bin").agg(pl.len().alias("n"))
              .with_columns((pl.col("n") / pl.col("n").sum().over("run")).alias("share"),
                            (lo + pl.col("bin") * width).alias("from_ms"), (lo + (pl.col("bin") + 1) * width).alias("to_ms")))
    return alt.Chart(shares).mark_bar(opacity=0.6).encode(
        x=alt.X("from_ms:Q", title="steady step time (ms)", scale=alt.Scale(domain=[lo, hi])), x2="to_ms:Q",
        y=alt.Y("share:Q", stack=None, title="share of the run's steps", axis=alt.Axis(format="%")), y2=alt.datum(0),
        color=_run_color(named),
        tooltip=["run", alt.Tooltip("from_ms:Q", format=".1f"), alt.Tooltip("to_ms:Q", format=".1f"),
                 alt.Tooltip("share:Q", format=".1%")]).properties(
        width=WIDE, height=180, title="distribution of steady step times (share of each run's steps)")


def anatomy_side_by_side(diff: pl.DataFrame, a_name: str, b_name: str) -> alt.HConcatChart:
    """A and B per category, and B minus A (positive = B spends more there)."""
    both = diff.unpivot(index="category", on=["a_ms_per_step", "b_ms_per_step"], variable_name="run",
                        value_name="ms").with_columns(
        pl.col("run").replace({"a_ms_per_step": f"A {a_name}", "b_ms_per_step": f"B {b_name}"}))
    pair = alt.Chart(both).mark_bar().encode(
        y=alt.Y("category:N", title=None), yOffset="run:N", x=alt.X("ms:Q", title="time per step (ms)"),
        # run names run long (`B straggler_plant_nsys`): the legend's default 160 px cut them at ~20 characters
        color=alt.Color("run:N", title=None, legend=alt.Legend(orient="top", labelLimit=LABEL_LIMIT)),
        tooltip=["run", "category", alt.Tooltip("ms:Q", format=",.3f")],
    ).properties(width=360, height=alt.Step(12), title="steady state, per category")
    delta = alt.Chart(diff).mark_bar().encode(
        y=alt.Y("category:N", title=None), x=alt.X("diff_ms_per_step:Q", title="B − A (ms per step)"),
        color=alt.condition("datum.diff_ms_per_step > 0", alt.value("#e45756"), alt.value("#54a24b")),
        tooltip=["category", alt.Tooltip("diff_ms_per_step:Q", format="+,.3f")],
    ).properties(width=300, height=alt.Step(24), title="difference")
    return alt.hconcat(pair, delta)


def _history_x(by: str, frame: pl.DataFrame | None = None) -> alt.X:
    if by == "git_rev":
        return alt.X("git_rev:N", title="source revision", sort=None)
    if by == "run_order":
        # Runs ingested in one batch lie milliseconds apart on a time axis, one on the other: their order spaces them.
        return alt.X("run_order:Q", title="run (in run order)", axis=alt.Axis(format="d", tickMinStep=1))
    # Vega's automatic time ticks turn runs seconds apart into '.900 .900 :58': name the unit instead.
    fmt = "%Y-%m-%d %H:%M"
    if frame is not None and frame.height and frame["run_at"].drop_nulls().len():
        dates = frame["run_at"].drop_nulls()
        first, last = cast(datetime, dates.min()), cast(datetime, dates.max())
        span_s = (last - first).total_seconds() if dates.len() > 1 else 0
        fmt = ("%H:%M:%S.%L" if span_s < 2 else "%H:%M:%S" if span_s < 3600 else "%m-%d %H:%M" if span_s < 30 * 86400
               else "%Y-%m-%d")
    return alt.X("run_at:T", title="run date (UTC)", axis=alt.Axis(format=fmt, labelAngle=-30))


@_fit_width
def history_step_time(history: pl.DataFrame, by: str = "run_at") -> alt.LayerChart | alt.FacetChart:
    """Steady-state median per receipt with its p10-p90 band; change points (analysis.history) as red triangles."""
    frame = history.filter(pl.col("median_step_ms").is_not_null())
    if by == "git_rev":
        frame = frame.with_columns(pl.col("git_rev").fill_null("(unrecorded)"))
    x = _history_x(by, frame)
    tip = ["run_name", "receipt_id", alt.Tooltip("run_at:T", format="%Y-%m-%d %H:%M:%S.%L"), "git_rev",
           alt.Tooltip("median_step_ms:Q", format=",.2f"),
           alt.Tooltip("z:Q", format="+.1f", title="z (noise floors)"),
           alt.Tooltip("change_pct:Q", format="+.2f", title="change point (%)")]
    band = alt.Chart(frame).mark_rule(opacity=0.5).encode(x=x, y="p10_step_ms:Q", y2="p90_step_ms:Q")
    line = alt.Chart(frame).mark_line(point=True).encode(
        x=x, y=alt.Y("median_step_ms:Q", title="steady-state median step time (ms)", scale=alt.Scale(zero=False)),
        tooltip=tip)
    marks = alt.Chart(frame).transform_filter("datum.change_point").mark_point(
        shape="triangle-up", size=220, filled=True, color="#e45756").encode(x=x, y="median_step_ms:Q", tooltip=tip)
    return alt.layer(band, line, marks).properties(width=WIDE, height=260,
                                                   title="step time (bar: p10-p90; red triangle: change point)")


@_fit_width
def history_memory(history: pl.DataFrame, by: str = "run_at") -> alt.Chart:
    frame = history.filter(pl.col("peak_reserved_bytes").is_not_null() | pl.col("peak_allocated_bytes").is_not_null())
    if by == "git_rev":
        frame = frame.with_columns(pl.col("git_rev").fill_null("(unrecorded)"))
    return alt.Chart(frame.rename(_PEAK_NAMES)).transform_fold(list(_PEAK_NAMES.values()), as_=["kind", "bytes"]) \
        .transform_calculate(gib=f"datum.bytes / {GIB}").mark_line(point=True).encode(
        x=_history_x(by, frame), y=alt.Y("gib:Q", title="peak memory (GiB)"), color=alt.Color("kind:N", title=None),
        tooltip=["run_name:N", "kind:N", alt.Tooltip("gib:Q", format=",.2f")],
    ).properties(width=WIDE, height=200, title="peak memory")


@_fit_width
def rank_wait_heatmap(per_step: pl.DataFrame) -> alt.Chart:
    """Rank x step heatmap of each rank's wait at collectives (the rank that never waits is the straggler)."""
    return (alt.Chart(per_step).mark_rect()
            .encode(x=alt.X("step:O", title="step"), y=alt.Y("rank:O", title="rank"),
                    color=alt.Color("wait_ms:Q", title="wait (ms)", scale=alt.Scale(scheme="orangered")),
                    tooltip=["rank", "step", alt.Tooltip("wait_ms:Q", format=".3f", title="wait ms"),
                             alt.Tooltip("imposed_ms:Q", format=".3f", title="wait imposed ms"),
                             "last_arrivals", "collectives"])
            .properties(width="container", height=max(80, 28 * per_step["rank"].n_unique())))


TRAINING_METRICS = {"loss": "loss", "tokens_per_s": "tokens/s", "mfu_pct": "MFU (%)"}


def training_metrics(steps: pl.DataFrame) -> alt.VConcatChart | None:
    """Loss, throughput and MFU per step, the ones the log printed (W&B-style small multiples); None without any.
    A step's value is the mean over the ranks that printed it."""
    # a metric the log printed as 0 throughout (nanochat's SFT prints `mfu: 0.00`) measured nothing: no flat chart
    present = [c for c in TRAINING_METRICS if c in steps.columns and (steps[c].drop_nulls() != 0).any()]
    if not present:
        return None
    per_step = steps.group_by("step").agg([pl.col(c).mean() for c in present]).sort("step")
    charts = [alt.Chart(per_step.select("step", c).drop_nulls()).mark_line(strokeWidth=1).encode(
        x=alt.X("step:Q", title="step (iteration)"), y=alt.Y(f"{c}:Q", title=TRAINING_METRICS[c], scale=alt.Scale(zero=False)),
        tooltip=["step", alt.Tooltip(f"{c}:Q", title=TRAINING_METRICS[c], format=",.4g")])
        .properties(width=WIDE, height=140) for c in present]
    return alt.vconcat(*charts)


@_fit_width
def step_vs_typical(categories: list[dict[str, Any]], step: int) -> alt.Chart:
    """One step's parts (they sum to its GPU span) beside the rank's typical steady step: two stacked bars of the
    same decomposition as the per-step chart, so the part that grew is the one whose band is longer."""
    rows = [{"which": f"step {step}", "category": c["category"], "ms": c["ms"]} for c in categories if c["part"]]
    rows += [{"which": "typical steady step", "category": c["category"], "ms": c["typical_ms"]}
             for c in categories if c["part"] and c["typical_ms"] is not None]
    frame = pl.DataFrame(rows, schema={"which": pl.Utf8, "category": pl.Utf8, "ms": pl.Float64})
    return alt.Chart(frame).mark_bar().encode(
        y=alt.Y("which:N", title=None, sort=[f"step {step}", "typical steady step"]),
        x=alt.X("ms:Q", title="ms (the step's GPU span, by part)", stack="zero"),
        color=alt.Color("category:N", title=None, scale=DECOMPOSITION_SCALE, legend=alt.Legend(orient="top")),
        order=alt.Order("order:Q"),
        tooltip=["which", "category", alt.Tooltip("ms:Q", format=",.3f")],
    ).transform_calculate(order=_DECOMPOSITION_ORDER).properties(width=WIDE, height=alt.Step(28),
                                                                title="this step against the typical steady step")
