"""Text rendering for the terminal. Formatting only: every number arrives computed."""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from receipts.cli.context import console, err_console
from receipts.cli.output import Column
from receipts.schema.lane import FIELDS, OPTION, Lane


def fmt_ms(value: float | None) -> str:
    """Milliseconds as a person reads them: `56.47 ms`; from 10 s up (an MLPerf block, an epoch) in seconds."""
    if value is None:
        return "-"
    return f"{value / 1000:,.2f} s" if abs(value) >= 10_000 else f"{value:,.2f} ms"


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds / 60:,.2f} min" if seconds >= 120 else f"{seconds:,.1f} s"


def fmt_bytes(value: int | None) -> str:
    if value is None:
        return "-"
    return f"{value / 2**30:,.2f} GiB"


# An interval wider than this factor (high / low) bounds nothing a reader can act on: t on 1 or 2 degrees of
# freedom over a noisy floor gives B/A [0.16, 5.83]. It is said in words instead of printed as if it measured.
UNBOUNDED_SPAN = 2.0


def ratio_interval(value: float, low: float, high: float, *, unit: str = "") -> str:
    """`0.9546 [0.9410, 0.9684]` (`unit` after the ratio: `1.0259x [...]`), or the ratio with "too few runs to bound
    this" when the interval spans more than UNBOUNDED_SPAN."""
    if low > 0 and high / low > UNBOUNDED_SPAN:
        return f"{value:.4f}{unit} (too few runs to bound this: the interval spans {low:.2f} to {high:.2f})"
    return f"{value:.4f}{unit} [{low:.4f}, {high:.4f}]"


def ended_early_line(run_name: str, reason: str) -> str:
    """The flag a crashed or stopped run carries wherever it is shown: its numbers cover only part of a run."""
    return (f"[bold red]ENDED EARLY[/] {escape(run_name)}: {escape(reason)} "
            "(a crashed or stopped run: its figures cover only the steps it logged)")


def excluded_text(s: dict[str, Any], unit: str) -> str:
    """What the steady window left out, from its rule: the warm-up (by a phase marker or the leading slow steps)
    and a cut-short last step, each only where the window excluded it."""
    n, rule = s["warmup_steps"] or 0, s["window_rule"] or ""
    if not n:
        return f"no {unit} excluded"
    parts = []
    if s.get("warmup_last_step") is not None:
        how = (f"the {rule.split(':', 1)[1].split('+')[0]} marker" if rule.startswith("marker:")
               else f"its leading slow {unit}s")
        parts.append(f"the warm-up through {unit} {s['warmup_last_step']} ({how})")
    if "cut-short-tail" in rule:
        parts.append(f"the cut-short last {unit}")
    return f"{n} {unit}(s) outside it excluded: " + (" and ".join(parts) or f"{unit}s without a time")


def list_json(r: dict[str, Any]) -> dict[str, Any]:
    """One receipt of `list --json`: the stable contract."""
    return {
        "id": r["id"], "run_name": r["run_name"],
        "identity": {**Lane.of(r).as_dict(), "complete": r["identity_complete"]},
        "machine_class": r["machine_class"], "source_format": r["source_format"], "tags": r["tags"],
        "n_steady_steps": r["n_steady_steps"], "median_step_ms": r["median_step_ms"],
        "series_unit": r["series_unit"], "time_to_train_s": r["time_to_train_s"],
        "peak_allocated_bytes": r["peak_allocated_bytes"], "peak_reserved_bytes": r["peak_reserved_bytes"],
        "ended_early": r["ended_early"], "started_at": r["started_at"], "ingested_at": r["ingested_at"],
        "superseded_by": r["superseded_by"],
    }


def list_title(rows: list[dict[str, Any]], *, total: int, show_all: bool) -> str:
    n_superseded = sum(1 for r in rows if r["superseded_by"])
    title = f"{total} receipts" + (f" ({n_superseded} superseded, marked in the last column)" if show_all
                                    else " (current; --all adds superseded ones)")
    if len(rows) < total:
        title += f"; the newest {len(rows)} shown (--limit N, --limit 0 for all)"
    return title


def list_columns(rows: list[dict[str, Any]], *, show_all: bool) -> list[Column]:
    """`receipts list`'s columns: on a terminal the id, the run, its lane and median step stay longest; TSV and
    CSV carry every field, whole. `rows`: analysis.listing.receipt_list's, newest first."""
    def per_unit(r: dict[str, Any]) -> str:
        return "" if r["series_unit"] == "step" else f"/{r['series_unit']}"

    # Time to train is MLPerf's headline; a store without MLPerf receipts gets no column of dashes.
    with_ttt = any(r["time_to_train_s"] is not None for r in rows)
    return [
        Column("id", "id", kind="id"),
        Column("run_name", "run", show=lambda r: r["run_name"] + ("" if r["identity_complete"] else " (rumor)")),
        # a field added to the lane needs its header and narrow-terminal drop order here: strict fails until then
        *(Column(f, label, drop=drop) for f, label, drop in zip(FIELDS, ("host lineage", "preset family", "regime"),
                                                                 (3, 4, 2), strict=True)),
        Column("identity_complete", only="data"),
        Column("machine_class", "machine", drop=6),
        Column("n_steady_steps", "steady n", drop=7,
               show=lambda r: f"{r['n_steady_steps']}" + (f" {r['series_unit']}s" if r["series_unit"] != "step" else "")),
        Column("median_step_ms", "median step", show=lambda r: fmt_ms(r["median_step_ms"]) + per_unit(r)),
        Column("series_unit", only="data"),
        *([Column("time_to_train_s", "time to train", drop=1, show=lambda r: fmt_duration(r["time_to_train_s"]))]
          if with_ttt else [Column("time_to_train_s", only="data")]),
        Column("peak_allocated_bytes", "peak alloc", drop=5, show=lambda r: fmt_bytes(r["peak_allocated_bytes"])),
        Column("peak_reserved_bytes", only="data"),
        Column("ended_early", only="data"),
        Column("started_at", kind="time", only="data"),
        Column("ingested_at", kind="time", only="data"),
        Column("tags", only="data"),
        Column("superseded_by", "superseded by", kind="id", only="" if show_all else "data"),
    ]


def render_report(r: dict[str, Any]) -> None:
    ident = r["identity"]
    status = "[green]complete[/]" if ident["complete"] else "[yellow]INCOMPLETE (a rumor: comparisons are refused)[/]"
    console.prose(f"[bold]{escape(r['run_name'])}[/]  {r['id']}  ({escape(r['source_format'] or '-')})")
    if r["ended_early"]:
        console.prose(ended_early_line(r["run_name"], r["ended_early"]))
    console.prose(f"identity: {status}")
    for key in FIELDS:
        raw = ident["raw"][OPTION[key]]
        console.prose(escape(f"  {key:14} {ident[key] or '-'}" + (f"   (given: {raw})" if raw and raw != ident[key] else "")))
    for note in ident["resolution"]:
        console.prose(f"    · {escape(note)}")
    if r.get("superseded_by"):
        console.prose(f"[yellow]superseded by {r['superseded_by']}[/] (a later ingest of the same run; "
                      "kept for audit, hidden from list, lanes, compare defaults and the gate)")
    for h in r.get("identity_history", []):
        changed = [f"{k} {h['old'][k]!r} -> {h['new'][k]!r}" for k in h["old"] if h["old"][k] != h["new"][k]]
        console.prose(f"  retag #{h['seq']} {h['changed_at']} by {escape(h['changed_by'])}: "
                      f"{escape('; '.join(changed) or 'no identity field changed')}  (why: {escape(h['why'])})")
    m = r["machine"]
    console.prose(escape(f"machine: {m['machine_class'] or '-'}  world size {m['world_size'] or '-'}  "
                         f"GPUs on host {m.get('gpus_on_host') or '-'}  ranks traced {m.get('ranks_traced') or '-'}  "
                         f"host {ident['hostname'] or '-'}{_machine_origins(r.get('provenance') or {})}"))
    if r.get("time_to_train_s") is not None:
        console.prose(f"[bold]time to train: {fmt_duration(r['time_to_train_s'])}[/] (MLPerf run_start -> run_stop; "
                      f"the series below is per {r['series_unit']})")
    s = r["steady_state"]
    unit = r.get("series_unit") or "step"
    console.prose(escape(f"window: {unit}s {s['first_step']}..{s['last_step']} steady ({s['n_steps']} {unit}s), "
                         f"{excluded_text(s, unit)}, rule {s['window_rule']}"))
    cv = "-" if s["cv"] is None else f"{s['cv']:.1%}"
    console.prose(f"{unit} time: median {fmt_ms(s['median_step_ms'])}  p10 {fmt_ms(s['p10_step_ms'])}  "
                  f"p90 {fmt_ms(s['p90_step_ms'])}  CV {cv}")
    if s["median_tokens_per_s"]:
        console.prose(f"throughput: median {s['median_tokens_per_s']:,.0f} tokens/s")
    floor = r.get("noise_floor")
    if floor:
        console.prose(f"lane noise floor: {floor['floor_pct']:.2f}% ({floor['source']}): {escape(floor['note'])}")
    mem = r["memory"]
    origin = "" if mem.get("source") in (None, "receipt") else f" (from the {mem['source']})"
    console.prose(f"memory: peak allocated {fmt_bytes(mem['peak_allocated_bytes'])}, "
                  f"peak reserved {fmt_bytes(mem['peak_reserved_bytes'])}{origin}")
    if r.get("memory_geometry"):
        from receipts.cli.memory_render import render_geometry

        render_geometry(r["memory_geometry"])
    if r.get("telemetry"):
        render_telemetry(r["telemetry"])
    if r["env"]:
        from rich.table import Table  # the report's table; `list --json` imports this module without it

        table = Table(title="env overlay", show_header=True)
        table.add_column("name")
        table.add_column("value")
        for name, value in r["env"].items():
            table.add_row(escape(name), "[dim](unset)[/]" if value is None else escape(str(value)))
        console.print(table)
    for src in r["sources"]:
        forced = f"  [yellow](attached with --force despite: {escape(src['forced'])})[/]" if src.get("forced") else ""
        console.prose(escape(f"source: {src['path']}  sha256 {src['sha256'][:16]}…  {src['format']}") + forced)
    for w in r["warnings"]:
        err_console.prose(f"[yellow]warning:[/] {escape(w)}")


def render_telemetry(t: dict[str, Any]) -> None:
    """One line per rank of what NVML said while the run ran: clocks, power, temperature, what slowed the GPU."""
    console.prose("GPU telemetry (NVML, medians over busy samples):")
    for g in t["ranks"]:
        def num(key: str, unit: str) -> str:
            return "-" if g[key] is None else f"{g[key]:,.0f} {unit}"

        spread = (f" ({g['sm_clock_min_mhz']:,.0f}-{g['sm_clock_max_mhz']:,.0f})"
                  if g["sm_clock_min_mhz"] is not None and g["sm_clock_min_mhz"] != g["sm_clock_max_mhz"] else "")
        slowed = ", ".join(f"{k} {v:.0%}" for k, v in g["throttle_share"].items() if k not in ("gpu_idle",)) or "none"
        errors = (f"ECC +{g['ecc_uncorrected_added']}" if g["ecc_uncorrected_added"] is not None else "ECC -") + \
            f", Xid {', '.join(map(str, g['xids'])) or 'none'}"
        who = f"rank {g['rank']}" if g["rank"] is not None else f"GPU {g['gpu_index']}"
        console.prose(escape(f"  {who}: SM {num('sm_clock_mhz', 'MHz')}{spread}, memory {num('mem_clock_mhz', 'MHz')}, "
                             f"{num('power_w', 'W')} of {num('power_limit_w', 'W')}, {num('temperature_c', 'C')}, "
                             f"busy {num('gpu_util_pct', '%')}; clocks held by: {slowed}; {errors} "
                             f"({g['busy_samples']} busy of {g['samples']} samples every {g['interval_s']:g} s)"))


def _machine_origins(provenance: dict) -> str:
    """Where the machine facts the log did not state came from (the attachments that gave them)."""
    origins = provenance.get("machine")
    files = list(dict.fromkeys(origins.values())) if isinstance(origins, dict) else []
    return f"  (from {', '.join(files)})" if files else ""
