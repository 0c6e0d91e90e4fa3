"""Lanes as the dashboard shows them: counts per identity, and regressions along a lane's history.

A regression (asv's rule: a size factor AND a significance test, both explicit):
  1. the receipt's steady-state median step time exceeds its lane predecessor's by more than
     REGRESSION_FACTOR, and
  2. analysis.compare of (predecessor, receipt) says 'slower': the bootstrap CI of the ratio of medians
     lies wholly above 1 (and the ratio passes compare's own minimum effect).
A jump without a significant comparison is marked 'inconclusive', never a regression.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    from receipts.store import Store

# Step time up by more than 5% against the lane's previous receipt: below this, run-to-run noise on one
# node routinely moves medians (seed notes: warm-up and compile settle; steady medians wobble 1-3%).
REGRESSION_FACTOR = 1.05


def lane_summary(receipts: pl.DataFrame) -> pl.DataFrame:
    """One row per lane (rumors pooled in one 'rumor' lane) from dash_lanes rows.

    Columns: lane, host_lineage, preset_family, launch_regime, rumor (bool), n_receipts, last_run_at,
             median_step_ms (ms, median over the lane's receipts' steady medians).
    """
    if receipts.height == 0:
        return pl.DataFrame(schema={"lane": pl.Utf8, "host_lineage": pl.Utf8, "preset_family": pl.Utf8,
                                    "launch_regime": pl.Utf8, "rumor": pl.Boolean, "n_receipts": pl.UInt32,
                                    "last_run_at": pl.Datetime("us"), "median_step_ms": pl.Float64})
    keyed = receipts.with_columns(
        *(pl.when(pl.col("rumor")).then(None).otherwise(pl.col(c)).alias(c)
          for c in ("host_lineage", "preset_family", "launch_regime")))
    return (keyed.group_by("lane", "host_lineage", "preset_family", "launch_regime", "rumor")
            .agg(pl.len().alias("n_receipts"), pl.col("run_at").max().alias("last_run_at"),
                 pl.col("median_step_ms").median().alias("median_step_ms"))
            .sort(["rumor", "n_receipts", "lane"], descending=[False, True, False]))


def mark_regressions(store: "Store", history: pl.DataFrame, *, factor: float = REGRESSION_FACTOR) -> pl.DataFrame:
    """lane_history rows (oldest first) plus: prev_id, step_ratio (this / previous median, a fraction),
    ratio_ci_low, ratio_ci_high (bootstrap CI of the ratio, only where the factor was passed),
    verdict (compare's verdict, or null when the factor was not passed), regression (bool)."""
    from receipts.analysis.compare import compare  # scipy: imported only when a history is drawn
    from receipts.analysis.record import load

    timed = history.filter(pl.col("median_step_ms").is_not_null())
    prev_ids: list[str | None] = [None] + timed["receipt_id"].to_list()[:-1]
    prev_ms: list[float | None] = [None] + timed["median_step_ms"].to_list()[:-1]
    out = []
    for rid, ms, pid, pms in zip(timed["receipt_id"], timed["median_step_ms"], prev_ids, prev_ms):
        row = {"receipt_id": rid, "prev_id": pid, "step_ratio": None, "ratio_ci_low": None,
               "ratio_ci_high": None, "verdict": None, "regression": False}
        if pid is not None and pms:
            row["step_ratio"] = ms / pms
            if ms / pms > factor:  # the cheap factor first: most pairs never need the bootstrap
                c = compare(load(store, pid), load(store, rid))
                row["verdict"] = c.verdict if c.comparable else "refused"
                if c.ratio is not None:
                    row["ratio_ci_low"], row["ratio_ci_high"] = c.ratio.ci_low, c.ratio.ci_high
                row["regression"] = c.comparable and c.verdict == "slower"
        out.append(row)
    marks = pl.DataFrame(out, schema={"receipt_id": pl.Utf8, "prev_id": pl.Utf8, "step_ratio": pl.Float64,
                                      "ratio_ci_low": pl.Float64, "ratio_ci_high": pl.Float64,
                                      "verdict": pl.Utf8, "regression": pl.Boolean})
    return (history.join(marks, on="receipt_id", how="left")
            .with_columns(pl.col("regression").fill_null(False)))
