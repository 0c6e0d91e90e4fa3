"""Per-receipt steady-state summaries, computed once at ingest and stored: reads that do not scale
with steps. `show`, `list` and `compare` read them; the step series is still stored for the gate, `check`,
`history` and the dashboard charts.

The numbers are exactly those of the recompute path: the same series (steady steps, a step's time its slowest
rank's, tokens/s summed over ranks when the log is per rank, as sql/steady_steps_many.sql defines it) through the
same functions (analysis.stats.summarize, median_interval). A receipt stored before its summary existed (schema
< 6), or under another RULE, is summarised from its series on read, with the same result.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from receipts.analysis.figures import RunInterval, Summary

if TYPE_CHECKING:
    import numpy as np
    import polars as pl

    from receipts.schema.model import Steps
    from receipts.store import Store

# Reading a stored summary needs none of numpy, polars or the statistics (`show` imports none of them:
# tests/test_lean_imports.py); making one, or reading a series, imports them where it does.

# Bump when the window rule, the series definition or the statistics change: stored summaries under an older
# rule are then recomputed from the series on read (and `receipts db upgrade` records the new rule).
RULE = "steady-summary-v2"


def steady_series(steps: Steps) -> tuple[np.ndarray, np.ndarray]:
    """(step_ms, tokens_per_s) of the steady steps in step order, from a frame with step, rank, step_ms,
    tokens_per_s and warmup, as sql/steady_steps_many.sql reads it from the store."""
    per_step = _steady_per_step(steps)
    return _values(per_step, "step_ms"), _values(per_step, "tokens_per_s")


def summarise_steps(steps: Steps) -> dict[str, Any]:
    """summarise(*steady_series(steps)), holding one series at a time (a 10M-step log's is 80 MB)."""
    per_step = _steady_per_step(steps)
    return {"rule": RULE, "step_ms": _one(_values(per_step, "step_ms")),
            "tokens_per_s": _one(_values(per_step, "tokens_per_s"))}


def _steady_per_step(steps: Steps) -> pl.LazyFrame:
    """One row per steady step, in step order: a step's time its slowest rank's, its tokens/s summed over ranks
    when the log is per rank. Lazy: from a spilled frame each series collects only its own column."""
    import polars as pl

    from receipts.schema.model import one_row_per_step

    steady = (steps.lazy().select("step", "rank", "step_ms", "tokens_per_s", "warmup")
              .filter(~pl.col("warmup") & pl.col("step_ms").is_not_null()))
    if one_row_per_step(steady):  # a log's usual series: each step's row is already its aggregate
        return steady
    return (steady.group_by("step")
            .agg(pl.col("step_ms").max(),
                 # a sum over ranks that report nothing is unknown (null, as SQL's sum), not 0
                 pl.when(pl.col("tokens_per_s").count() == 0).then(None)
                 .when(pl.col("rank").n_unique() > 1).then(pl.col("tokens_per_s").sum())
                 .otherwise(pl.col("tokens_per_s").max()).alias("tokens_per_s"))
            .sort("step"))


def _values(per_step: pl.LazyFrame, metric: str) -> np.ndarray:
    import polars as pl

    return per_step.select(pl.col(metric).drop_nulls()).collect().to_series().to_numpy()


def series_by_receipt(steps: pl.DataFrame, ids: list[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(step_ms, tokens_per_s) of each receipt from a sql/steady_steps_many.sql frame, empty for a receipt
    without steady steps: the series a summary is made from, on read and when re-summarising alike."""
    import numpy as np

    by_receipt = {key[0]: frame for key, frame in steps.partition_by("receipt_id", as_dict=True).items()}
    empty = (np.empty(0), np.empty(0))
    return {rid: (own["step_ms"].to_numpy(), own["tokens_per_s"].drop_nulls().to_numpy())
            if (own := by_receipt.get(rid)) is not None else empty for rid in ids}


def summarise(step_ms: np.ndarray, tokens_per_s: np.ndarray) -> dict[str, Any]:
    """The stored form: Summary and RunInterval of both series as plain data (floats round-trip exactly)."""
    return {"rule": RULE, "step_ms": _one(step_ms), "tokens_per_s": _one(tokens_per_s)}


def _one(x: np.ndarray) -> dict[str, Any]:
    from receipts.analysis.stats import median_interval, summarize

    s, i = summarize(x), median_interval(x)
    return {"summary": asdict(s) if s else None, "interval": asdict(i) if i else None}


def stored_many(store: "Store", ids: list[str]) -> dict[str, dict[str, Any]]:
    """The summaries stored for `ids` under this build's RULE, by receipt id (a receipt without one, or with one
    made under another rule, is left out: its caller summarises it from its series)."""
    if not ids:
        return {}
    return {r["receipt_id"]: s for r in store.query_rows("receipt_summaries_many", {"ids": ids})
            if (s := parse(r["summary_json"])) is not None}


def parse(text: str | None) -> dict[str, Any] | None:
    """A stored summary if it was made under this build's RULE, else None (recompute from the series)."""
    if not text:
        return None
    data = json.loads(text)
    return data if data.get("rule") == RULE else None


def parts(stored: dict[str, Any], metric: str) -> tuple[Summary | None, RunInterval | None]:
    entry = stored[metric]
    return (Summary(**entry["summary"]) if entry["summary"] else None,
            RunInterval(**entry["interval"]) if entry["interval"] else None)


def resummarize(store: "Store", *, batch: int = 500) -> int:
    """Give every receipt a steady-state summary made under this build's rule (analysis/summary.py RULE): those
    stored before summaries existed, or under an older rule, are summarised from their stored step series, the
    same series and functions the read path uses. Returns how many were (re)written."""
    stale = store.query("stale_summaries", {"rule": RULE})["receipt_id"].to_list()
    for start in range(0, len(stale), batch):
        ids = stale[start:start + batch]
        series = series_by_receipt(store.query("steady_steps_many", {"ids": ids}), ids)
        store.replace_summaries({rid: summarise(*series[rid]) for rid in ids})
    return len(stale)
