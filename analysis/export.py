"""Receipts out to the tools teams already run: Bencher's BMF and PyTorch's benchmark v3 record.

What leaves is a lane's steady-state measures, each a run's median with its moving-block bootstrap interval
(the same numbers `show` and `compare` use), never a per-step sample:

  step_time_ms           median steady step time (ms), interval from the run's step series
  tokens_per_s           median steady tokens/s, interval likewise (when the log gives tokens)
  peak_allocated_bytes   the run's peak allocated memory (bytes; one value, no interval)
  exposed_comm_ms        communication not hidden under compute, ms per steady step, the mean over ranks
                         (when a profiler export is attached; one value)

Bencher Metric Format (https://bencher.dev/docs/reference/bencher-metric-format): one object keyed by
benchmark, each a map of measure slug -> {value, lower_value, upper_value}. One benchmark per lane (its name
`HOST_LINEAGE PRESET_FAMILY LAUNCH_REGIME`, as `history` takes it), from the lane's newest run: a Bencher
report is one run of each benchmark.

PyTorch benchmark v3 (pytorch/test-infra clickhouse_db_schema/oss_ci_benchmark_v3/schema.sql): a list of
records {benchmark, model, metric, runners, dependencies}, one per lane, tag set and measure, `benchmark_values`
holding every selected run's value (the record's list is for repeated runs: a main branch's runs and a PR's are
two records, never one pool); the uploader adds the
timestamp, repository and workflow fields. Every `extra_info` is a map of strings, as the table's
Map(String, String) requires.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Sequence

from receipts.analysis.lanes import Lane, lane_named, lane_of
from receipts.analysis.listing import receipt_list
from receipts.analysis.record import StoredReceipt, load_many

if TYPE_CHECKING:
    from receipts.store import Store

# measure slug -> (unit, lower is better)
MEASURES: dict[str, tuple[str, bool]] = {
    "step_time_ms": ("ms", True),
    "tokens_per_s": ("tokens/s", False),
    "peak_allocated_bytes": ("bytes", True),
    "exposed_comm_ms": ("ms", True),
}


@dataclass(frozen=True)
class Measured:
    value: float
    lower: float | None = None   # the run's interval, where the measure has one
    upper: float | None = None


@dataclass(frozen=True)
class RunExport:
    receipt: StoredReceipt
    lane: Lane
    run_date: str                 # RFC 3339: the run's start from its log, else its ingest
    measures: dict[str, Measured]


def _date(r: dict[str, Any]) -> str:
    return str(r["started_at"] or r["ingested_at"])


def _parse(text: str) -> datetime:
    when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def exported_runs(store: "Store", *, lane: str | None = None, since: datetime | None = None, tag: str | None = None,
                  last: int | None = None) -> list[RunExport]:
    """The current receipts with a full identity (rumors have no lane: they never leave), oldest first, with their
    measures; selected as `check` selects a baseline: carrying `tag`, the `last` most recent of each lane. `lane`:
    a lane written as its fields separated by spaces (as `history` takes it), else text its host lineage,
    preset or regime contains; `since`: run at or after."""
    exact = lane_named(lane)
    rows = [r for r in receipt_list(store, lane=None if exact else lane) if r["identity_complete"]]
    if exact:
        rows = [r for r in rows if Lane.of(r) == exact]
    if tag is not None:
        rows = [r for r in rows if tag in (r["tags"] or ())]
    if since is not None:
        since = since if since.tzinfo else since.replace(tzinfo=timezone.utc)
        rows = [r for r in rows if _parse(_date(r)) >= since]
    rows.sort(key=lambda r: (_parse(_date(r)), r["id"]))
    if last is not None:
        kept: dict[Lane, list[dict[str, Any]]] = {}
        for r in rows:
            kept.setdefault(Lane.of(r), []).append(r)
        chosen = {r["id"] for group in kept.values() for r in group[-last:]}
        rows = [r for r in rows if r["id"] in chosen]
    receipts = load_many(store, [r["id"] for r in rows]) if rows else {}
    out = []
    for r in rows:
        rec = receipts[r["id"]]
        run_lane = lane_of(rec)
        if run_lane is None:
            continue
        out.append(RunExport(rec, run_lane, _parse(_date(r)).isoformat(), _measures(store, rec)))
    return out


def selection(runs: Sequence[RunExport], fmt: str) -> list[str]:
    """One line per benchmark exported, saying which runs it holds: a reader of a Bencher or HUD chart learns
    what a point is (BMF: the lane's newest selected run; v3: every selected run of a lane and tag set)."""
    lines = []
    for (lane, tags), group in _groups(runs, by_tags=fmt != "bmf").items():
        newest = group[-1].receipt
        what = (f"its newest run {newest.run_name} ({newest.id[:12]}, tags {', '.join(newest.tags) or 'none'})"
                if fmt == "bmf" else
                f"{len(group)} run(s) tagged {', '.join(tags) or 'nothing'}, {group[0].receipt.run_name} .. "
                f"{newest.run_name}")
        lines.append(f"{lane_name(lane)}: {what}")
    return lines


def _groups(runs: Sequence[RunExport], *, by_tags: bool) -> dict[tuple[Lane, tuple[str, ...]], list[RunExport]]:
    out: dict[tuple[Lane, tuple[str, ...]], list[RunExport]] = {}
    for run in runs:
        key = (run.lane, tuple(sorted(run.receipt.tags)) if by_tags else ())
        out.setdefault(key, []).append(run)
    return out


def _measures(store: "Store", r: StoredReceipt) -> dict[str, Measured]:
    out: dict[str, Measured] = {}
    if r.step_interval is not None:
        i = r.step_interval
        out["step_time_ms"] = Measured(i.median, i.ci_low, i.ci_high)
    if r.tokens_interval is not None and r.tokens_interval.median > 0:
        i = r.tokens_interval
        out["tokens_per_s"] = Measured(i.median, i.ci_low, i.ci_high)
    if r.peak_allocated_bytes is not None:
        out["peak_allocated_bytes"] = Measured(float(r.peak_allocated_bytes))
    exposed = _exposed_comm_ms(store, r.id)
    if exposed is not None:
        out["exposed_comm_ms"] = Measured(exposed)
    return out


def _exposed_comm_ms(store: "Store", receipt_id: str) -> float | None:
    """Exposed communication per steady step of the newest attached export, the mean over its ranks."""
    sources = store.query("anatomy_sources", {"receipt_id": receipt_id})
    if sources.height == 0:
        return None
    window = store.query("anatomy_window", {"receipt_id": receipt_id, "source_sha256": sources["source_sha256"][0]})
    per_rank = [row["per_step_ms"] for row in window.iter_rows(named=True)
                if row["category"] == "exposed_comm" and row["phase"] in ("steady", "window")]
    return sum(per_rank) / len(per_rank) if per_rank else None


def mixed_configurations(runs: Sequence[RunExport]) -> dict[Lane, tuple[str, ...]]:
    """Lanes whose exported runs carry different tag sets (a baseline's and pull requests' runs): each lane's tag
    sets, for a warning that `--tag` exports one configuration."""
    seen: dict[Lane, set[str]] = {}
    for run in runs:
        seen.setdefault(run.lane, set()).add(",".join(sorted(run.receipt.tags)) or "(untagged)")
    return {lane: tuple(sorted(tags)) for lane, tags in seen.items() if len(tags) > 1}


def lane_name(lane: Lane) -> str:
    return " ".join(str(v) for v in lane.values())


def to_bmf(runs: Sequence[RunExport]) -> dict[str, dict[str, dict[str, float]]]:
    """Bencher Metric Format: per lane (its newest run) each measure's value, with lower/upper where the
    measure has an interval."""
    newest: dict[Lane, RunExport] = {}
    for run in runs:  # oldest first: the last one of a lane wins
        newest[run.lane] = run
    out: dict[str, dict[str, dict[str, float]]] = {}
    for lane, run in newest.items():
        measures = {}
        for slug, m in run.measures.items():
            metric = {"value": m.value}
            if m.lower is not None and m.upper is not None:
                metric.update(lower_value=m.lower, upper_value=m.upper)
            measures[slug] = metric
        if measures:
            out[lane_name(lane)] = measures
    return out


def _strings(mapping: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in mapping.items() if v is not None}


def to_pytorch_v3(runs: Sequence[RunExport]) -> list[dict[str, Any]]:
    """PyTorch benchmark v3 records: one per lane, tag set and measure, a value per selected run."""
    records = []
    for (lane, tags), group in _groups(runs, by_tags=True).items():
        newest = group[-1].receipt
        for slug, (unit, lower_is_better) in MEASURES.items():
            have = [run for run in group if slug in run.measures]
            if not have:
                continue
            records.append({
                "benchmark": {"name": "receipts", "mode": "training", "dtype": _dtype(newest),
                              "extra_info": _strings({**lane.as_dict(), "tags": ",".join(tags)})},
                "model": {"name": lane.preset_family, "type": "training-run", "backend": lane.launch_regime,
                          "origins": ["receipts"], "extra_info": _strings({"host_lineage": lane.host_lineage})},
                "metric": {"name": slug, "benchmark_values": [run.measures[slug].value for run in have],
                           "target_value": 0.0,
                           "extra_info": _strings({
                               "unit": unit, "lower_is_better": str(lower_is_better).lower(),
                               "receipt_ids": ",".join(run.receipt.id for run in have),
                               "run_names": ",".join(run.receipt.run_name for run in have),
                               "run_dates": ",".join(run.run_date for run in have),
                               "lower_values": ",".join(_num(run.measures[slug].lower) for run in have),
                               "upper_values": ",".join(_num(run.measures[slug].upper) for run in have)})},
                "runners": [_runner(newest)],
                "dependencies": _dependencies(newest),
            })
    return records


def _num(value: float | None) -> str:
    return "" if value is None else repr(value)


def _dtype(r: StoredReceipt) -> str:
    """The run's numerical precision where its receipt states one (MLPerf's lowest precisions, a feature)."""
    for key in ("precision", "dtype", "lowest_numerical_precision"):
        value = r.features.get(key) or r.provenance.get(key)
        if value:
            return str(value)
    return ""


def _runner(r: StoredReceipt) -> dict[str, Any]:
    return {"name": r.hostname or "", "type": r.lane.host_lineage or "", "cpu_info": "", "cpu_count": 0,
            "mem_info": "", "avail_mem_in_gb": 0, "gpu_info": r.gpu_model or "", "gpu_count": r.gpu_count or 0,
            "gpu_mem_info": "", "avail_gpu_mem_in_gb": 0,
            "extra_info": _strings({"machine_class": r.machine_class, "world_size": r.world_size})}


def _dependencies(r: StoredReceipt) -> dict[str, dict[str, Any]]:
    out = {}
    for name in ("torch", "nccl", "triton", "transformer_engine", "megatron_core"):
        version = r.software.get(name)
        if version:
            out[name] = {"repo": "", "branch": "", "sha": "", "version": str(version), "extra_info": {}}
    return out
