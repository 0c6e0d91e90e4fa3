"""Which rank holds the step back, and what it costs: straggler and rank-skew attribution.

Input: every GPU activity of a multi-rank profile (rank, step, category, start_ns, end_ns), as the nsys and
Kineto parsers attribute it. Ranks must share one clock (one nsys export of several processes; Kineto traces
of one host, on their baseTimeNanoseconds); across hosts the clocks are only as aligned as NTP/PTP made them,
which the end-skew check below catches.

Method
1. Match each collective across ranks: communication kernels (the nccl_* categories, whichever library ran
   them) of one kind, by ordinal within the step: the k-th all-gather of step 7 on rank 0 is the k-th
   all-gather of step 7 on rank 1. The exports
   read here carry no cross-rank collective id (Kineto's Process Group / Collective name args are not on every
   kernel and carry no sequence number; nsys has none without NCCL's NVTX domain), so `matching` says so.
   A (step, kind) whose counts differ across ranks is not matched (a broken match would invent stragglers).
2. Per collective: arrival skew = latest start - earliest start; the last rank (none when the skew is under
   TIE_NS); each rank's wait = last start - its own start; latency = the shortest duration across ranks (the
   collective with the wait removed); end skew = latest end - earliest end.
3. Sanity: an implicitly synchronising collective ends together on every rank. When the median end skew is
   over CLOCK_BAR_NS and over half the median latency, clocks are unaligned or the match is broken: the
   result says so and names no straggler.
4. Per rank: last_arrival_share (share of matched collectives it arrived last at), wait_ms_per_step (its own
   waiting), wait_imposed_ms_per_step (the skew of the collectives it arrived last at: the others' wait).
   A rank is named a straggler when it arrived last at >= STRAGGLER_SHARE of the collectives (and at least
   twice its fair share 1/n on more than two ranks) and its impact (5.) is >= IMPACT_BAR of the median step
   (on the planted 2×H200 runs: 12.6% with the plant, 1.2% without, where the same rank is merely a bit late).
5. Impact (what-if): the step time saved had the straggler arrived with the median rank. A wait costs the
   step only where the waiting rank had nothing else to run: FSDP's collectives wait on their own stream
   while compute goes on. So per step, on each other rank, the union of its wait intervals at the
   straggler's late collectives ([own start, straggler's start)) minus the time its compute kernels covered
   (exposed wait); its median step, the median over the other ranks, as ms per step and % of the median step. (On the planted
   2×H200 straggler the raw wait was 15.8 ms per step and the exposed wait 7.3, against a measured 6.2 ms.)
6. Cause, only with evidence: in the window before each late collective (from the previous collective's end
   on that rank to this one's start), the straggler's busy time per category group (compute, memcpy) and its
   gaps (idle / launch) against the median other rank's; a cause is named when one group explains >=
   CAUSE_SHARE of the difference, else 'unclear'.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, cast

import numpy as np
import polars as pl

from receipts.ingest.intervals import intersection_ns, union_ns

TIE_NS = 5_000               # arrivals within 5 us are a tie: nobody arrived last
CLOCK_BAR_NS = 100_000       # median end skew above this (and above half the latency): clocks or match broken
STRAGGLER_SHARE = 0.6        # arrived last at >= 60% of the matched collectives
IMPACT_BAR = 0.02            # and its what-if impact is >= 2% of the median step time
CAUSE_SHARE = 0.6            # one group explains >= 60% of the straggler's extra time before its late collectives
MATCHING = ("step + collective kind + ordinal within them (no cross-rank collective id in the export); groups "
            "whose counts differ across ranks left unmatched")


@dataclass(frozen=True)
class RankSkew:
    rank: int
    last_arrival_share: float
    wait_imposed_ms_per_step: float
    wait_ms_per_step: float


@dataclass(frozen=True)
class Straggler:
    rank: int
    impact_ms_per_step: float
    impact_pct: float
    cause: str               # 'compute' | 'memcpy' | 'idle/launch gaps' | 'unclear'
    cause_detail: str


@dataclass(frozen=True)
class StragglerReport:
    matching: str
    n_ranks: int
    n_collectives: int             # matched collectives (each counted once, not per rank)
    n_steps: int
    median_step_ms: float | None
    clock_ok: bool
    note: str                      # why nothing is named, or the bar that was cleared
    ranks: tuple[RankSkew, ...]
    stragglers: tuple[Straggler, ...]
    per_step: pl.DataFrame = field(repr=False)     # rank, step, wait_ms, imposed_ms, last_arrivals, collectives
    per_kind: pl.DataFrame = field(repr=False)     # kind, collectives, median_skew_ms, median_latency_ms, ...


def _empty_per_step() -> pl.DataFrame:
    return pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int64, "wait_ms": pl.Float64, "imposed_ms": pl.Float64,
                                "last_arrivals": pl.Int64, "collectives": pl.Int64})


def _of_kind(kinds: Mapping[str, str], kind: str) -> list[str]:
    return [c for c, k in kinds.items() if k == kind]


def match_collectives(events: pl.DataFrame | pl.LazyFrame, kinds: Mapping[str, str]) -> tuple[pl.DataFrame, list[str]]:
    """One row per (collective, rank) with its key (step, kind, ordinal within the step and kind). A step
    whose count of some kind differs across ranks (a profiler window that opened mid-step on one rank, a
    collective one rank launched in the next step) leaves that kind of that step unmatched, named in the notes.
    Collectives: the activities of the categories `kinds` (CategoryRules.kinds) calls communication."""
    comm = (events.lazy().filter(pl.col("category").is_in(_of_kind(kinds, "communication"))
                                 & pl.col("rank").is_not_null()).collect())
    comm = comm.with_columns(pl.col("step").fill_null(-1)).sort("rank", "step", "category", "start_ns").with_columns(
        pl.int_range(pl.len()).over("rank", "step", "category").alias("ordinal"))
    n_ranks = comm["rank"].n_unique()
    counts = (comm.group_by("step", "category", "rank").len()
              .group_by("step", "category").agg(pl.col("len").n_unique().alias("sizes"), pl.len().alias("ranks")))
    good = counts.filter((pl.col("sizes") == 1) & (pl.col("ranks") == n_ranks)).select("step", "category")
    bad = counts.height - good.height
    notes = [f"{bad} (step, collective kind) groups whose counts differ across ranks left unmatched"] if bad else []
    return comm.join(good, on=["step", "category"]), notes


def analyse(events: pl.DataFrame | pl.LazyFrame, step_ms: float | None = None, *, kinds: Mapping[str, str]
            ) -> StragglerReport | None:
    """None when the profile has fewer than two ranks with communication (nothing to compare); `kinds`: each
    category's kind under the rules the profile was categorised by (CategoryRules.kinds). `events` may be
    lazy (a profile's steady steps, pipeline.with_stragglers): only the parts read are collected, the
    communication always, one rank's or the others' compute only for a rank that may be a straggler."""
    ev = events.lazy().select(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int64), "category",
                              pl.col("start_ns").cast(pl.Int64), pl.col("end_ns").cast(pl.Int64))
    matched, notes = match_collectives(ev, kinds)
    ranks = sorted(matched["rank"].unique().to_list())
    if len(ranks) < 2 or matched.height == 0:
        return None
    coll = (matched.group_by("step", "category", "ordinal")
            .agg(pl.col("start_ns").max().alias("last_start"), pl.col("start_ns").min().alias("first_start"),
                 pl.col("end_ns").max().alias("last_end"), pl.col("end_ns").min().alias("first_end"),
                 (pl.col("end_ns") - pl.col("start_ns")).min().alias("latency_ns"),
                 pl.col("rank").sort_by("start_ns").last().alias("last_rank"))
            .with_columns((pl.col("last_start") - pl.col("first_start")).alias("skew_ns"),
                          (pl.col("last_end") - pl.col("first_end")).alias("end_skew_ns"))
            .with_columns(pl.when(pl.col("skew_ns") >= TIE_NS).then(pl.col("last_rank")).alias("last_rank")))
    per_rank = (matched.join(coll.select("step", "category", "ordinal", "last_start", "last_rank", "skew_ns"),
                             on=["step", "category", "ordinal"])
                .with_columns((pl.col("last_start") - pl.col("start_ns")).alias("wait_ns"),
                              (pl.col("last_rank") == pl.col("rank")).fill_null(False).alias("is_last")))
    per_step = (per_rank.filter(pl.col("step") >= 0).group_by("rank", "step")
                .agg((pl.col("wait_ns").sum() / 1e6).alias("wait_ms"),
                     (pl.when(pl.col("is_last")).then(pl.col("skew_ns")).otherwise(0).sum() / 1e6).alias("imposed_ms"),
                     pl.col("is_last").sum().cast(pl.Int64).alias("last_arrivals"),
                     pl.len().cast(pl.Int64).alias("collectives"))
                .sort("rank", "step"))
    n_steps = max(per_step["step"].n_unique(), 1) if per_step.height else 1
    n_coll = coll.height
    median_end_skew = cast(float, coll["end_skew_ns"].median())
    median_latency = cast(float, coll["latency_ns"].median())
    clock_ok = not (median_end_skew > CLOCK_BAR_NS and median_end_skew > 0.5 * median_latency)
    rank_rows = []
    for r in ranks:
        mine = per_rank.filter(pl.col("rank") == r)
        rank_rows.append(RankSkew(
            rank=r,
            last_arrival_share=float(mine["is_last"].sum()) / n_coll,
            wait_imposed_ms_per_step=float(mine.filter(pl.col("is_last"))["skew_ns"].sum()) / 1e6 / n_steps,
            wait_ms_per_step=float(mine["wait_ns"].sum()) / 1e6 / n_steps))
    per_kind = (coll.group_by("category").agg(
        pl.len().alias("collectives"), (pl.col("skew_ns").median() / 1e6).alias("median_skew_ms"),
        (pl.col("latency_ns").median() / 1e6).alias("median_latency_ms"),
        (pl.col("end_skew_ns").median() / 1e6).alias("median_end_skew_ms"))
        .rename({"category": "kind"}).sort("kind"))
    stragglers: list[Straggler] = []
    fair = 1.0 / len(ranks)
    if not clock_ok:
        note = (f"collectives do not end together (median end skew {median_end_skew / 1e6:.3f} ms against a median "
                f"latency of {median_latency / 1e6:.3f} ms): clocks unaligned across ranks or the match is broken; "
                "no straggler named")
    else:
        for rs in rank_rows:
            share_ok = rs.last_arrival_share >= STRAGGLER_SHARE and (len(ranks) <= 2 or rs.last_arrival_share >= 2 * fair)
            if share_ok and step_ms:
                candidate = _straggler(rs.rank, per_rank, ev, step_ms, kinds)
                if candidate.impact_ms_per_step >= IMPACT_BAR * step_ms:
                    stragglers.append(candidate)
        note = (f"named when arriving last at >= {STRAGGLER_SHARE:.0%} of {n_coll} matched collectives with a what-if "
                f"impact >= {IMPACT_BAR:.0%} of the median step ({step_ms:.3f} ms)" if step_ms else
                "no step time: no straggler named")
    if notes:
        note += "; " + "; ".join(notes)
    return StragglerReport(MATCHING, len(ranks), n_coll, n_steps, step_ms, clock_ok, note, tuple(rank_rows),
                           tuple(stragglers), per_step if per_step.height else _empty_per_step(), per_kind)


def exposed_wait_ms_per_step(rank: int, per_rank: pl.DataFrame, ev: pl.LazyFrame, kinds: Mapping[str, str]) -> float:
    """Median over the other ranks of their median step's wait at `rank`'s late collectives not covered by their
    own compute (steps without such a wait count as 0). The median step, as step times are compared: a few
    slow steps of the whole job do not inflate the what-if."""
    late = per_rank.filter(pl.col("is_last") & (pl.col("rank") == rank)).select("step", "category", "ordinal")
    waits = (per_rank.filter(pl.col("rank") != rank).join(late, on=["step", "category", "ordinal"])
             .filter(pl.col("last_start") > pl.col("start_ns"))
             .select("rank", "step", pl.lit("wait").alias("category"), "start_ns", pl.col("last_start").alias("end_ns")))
    others = sorted(set(per_rank["rank"].to_list()) - {rank})
    steps = sorted(set(per_rank["step"].to_list()))
    if waits.height == 0:
        return 0.0
    compute = (ev.filter(pl.col("category").is_in(_of_kind(kinds, "compute")) & (pl.col("rank") != rank))
               .select("rank", pl.col("step").fill_null(-1), "category", "start_ns", "end_ns").collect())
    keys = ["rank", "step"]
    wait = union_ns(waits, keys)
    covered = intersection_ns(waits, compute, keys) if compute.height else wait.select(*keys, pl.lit(0).alias("both_ns"))
    exposed = (wait.join(covered.select(*keys, "both_ns"), on=keys, how="left").fill_null(0)
               .with_columns(((pl.col("union_ns") - pl.col("both_ns")) / 1e6).alias("ms")))
    by = {(r, st): ms for r, st, ms in exposed.select("rank", "step", "ms").iter_rows()}
    per_other = [float(np.median([by.get((r, st), 0.0) for st in steps])) for r in others]
    return float(np.median(per_other))


def _straggler(rank: int, per_rank: pl.DataFrame, ev: pl.LazyFrame, step_ms: float, kinds: Mapping[str, str]
               ) -> Straggler:
    impact_ms = exposed_wait_ms_per_step(rank, per_rank, ev, kinds)
    cause, detail = _cause(rank, per_rank, ev, kinds)
    return Straggler(rank, impact_ms, 100.0 * impact_ms / step_ms, cause, detail)


def _cause(rank: int, per_rank: pl.DataFrame, ev: pl.LazyFrame, kinds: Mapping[str, str]) -> tuple[str, str]:
    """Busy time by group in the window before each late collective: the straggler against the median of the
    others, window = previous collective's end on that rank -> this collective's start."""
    spans = (per_rank.sort("rank", "start_ns")
             .with_columns(pl.col("end_ns").shift(1).over("rank").alias("window_start"))
             .filter(pl.col("window_start").is_not_null()))
    late_keys = per_rank.filter(pl.col("is_last") & (pl.col("rank") == rank)).select("step", "category", "ordinal")
    windows = spans.join(late_keys, on=["step", "category", "ordinal"]).select("rank", "category", "ordinal",
                                                                      "window_start", pl.col("start_ns").alias("window_end"))
    if windows.height == 0:
        return "unclear", "no window before its late collectives"
    groups = {"compute": _of_kind(kinds, "compute"), "memcpy": _of_kind(kinds, "copy")}
    totals: dict[int, dict[str, float]] = {}
    for r in windows["rank"].unique().to_list():
        w = windows.filter(pl.col("rank") == r)
        acts = ev.filter(pl.col("rank") == r).collect()
        starts, ends = acts["start_ns"].to_numpy(), acts["end_ns"].to_numpy()
        cats = acts["category"].to_numpy()
        out = {"compute": 0.0, "memcpy": 0.0, "idle/launch gaps": 0.0}
        for lo, hi in w.select("window_start", "window_end").iter_rows():
            if hi <= lo:
                continue
            inside = (starts < hi) & (ends > lo)
            busy = 0.0
            for name, members in groups.items():
                sel = inside & np.isin(cats, members)
                t = float(np.clip(np.minimum(ends[sel], hi) - np.maximum(starts[sel], lo), 0, None).sum())
                out[name] += t
                busy += t
            out["idle/launch gaps"] += max(0.0, float(hi - lo) - busy)
        totals[r] = out
    mine = totals.get(rank)
    rest = [v for r, v in totals.items() if r != rank]
    if mine is None or not rest:
        return "unclear", "no comparable window on the other ranks"
    diff = {k: mine[k] - float(np.median([o[k] for o in rest])) for k in mine}
    extra = sum(v for v in diff.values() if v > 0)
    detail = ", ".join(f"{k} {v / 1e6:+.3f} ms" for k, v in diff.items()) + " (straggler - median other rank, summed)"
    if extra <= 0:
        return "unclear", detail
    top, value = max(diff.items(), key=lambda kv: kv[1])
    return (top if value >= CAUSE_SHARE * extra else "unclear"), detail


def report_json(rep: StragglerReport) -> dict:
    return {
        "matching": rep.matching, "n_ranks": rep.n_ranks, "n_collectives": rep.n_collectives, "n_steps": rep.n_steps,
        "median_step_ms": rep.median_step_ms, "clock_ok": rep.clock_ok, "note": rep.note,
        "ranks": [{"rank": r.rank, "last_arrival_share": r.last_arrival_share,
                   "wait_imposed_ms_per_step": r.wait_imposed_ms_per_step, "wait_ms_per_step": r.wait_ms_per_step}
                  for r in rep.ranks],
        "stragglers": [{"rank": s.rank, "impact_ms_per_step": s.impact_ms_per_step, "impact_pct": s.impact_pct,
                        "cause": s.cause, "cause_detail": s.cause_detail} for s in rep.stragglers],
        "per_kind": rep.per_kind.to_dicts(),
        "per_step": rep.per_step.to_dicts(),
    }
