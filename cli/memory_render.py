"""Memory geometry for the terminal (`show`, `compare`, `estimate`). Formatting only: every number arrives computed
(analysis/memory_geometry.py, analysis/estimate.py)."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from receipts.cli.context import console, err_console


def gib(value: int | float | None, *, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value / 2**30:+,.3f} GiB" if signed else f"{value / 2**30:,.3f} GiB"


def render_geometry(g: dict[str, Any]) -> None:
    """The geometry table: each bucket measured beside estimated, then the three gaps."""
    if g["source"] is None:
        return
    if g["source"] == "receipt" and g["estimate"] is None:
        return  # the receipt's peaks alone: `memory:` above says it all
    where = f"rank {g['rank']}" if g["rank"] is not None else (f"device {g['device']}" if g["device"] is not None
                                                               else "the run")
    est = g["estimate"]
    title = f"memory geometry: {where}, measured by {g['source']}"
    if est:
        title += f", estimated by {escape(est['path'] or 'an estimate')}"
    table = Table(title=title)
    for col in ("bucket", "measured", "estimated", "estimate error"):
        table.add_column(col, justify="left" if col == "bucket" else "right")
    for row in g["buckets"]:
        error = "-" if row["error_bytes"] is None else (
            gib(row["error_bytes"], signed=True) + (f" ({row['error_pct']:+.1f}%)" if row["error_pct"] is not None else ""))
        table.add_row(row["bucket"].replace("_", " "), gib(row["measured_bytes"]), gib(row["estimated_bytes"]), error)
    if g["source"] != "capture":
        for name, value in g["categories"].items():
            table.add_row(f"{name} (at the {g['source']}'s peak)", gib(value), "-", "-")
    gaps = g["gaps"]
    table.add_row("peak allocated", gib(g["peak_allocated_bytes"]), gib(est["allocated_bytes"]) if est else "-",
                  gib(gaps["estimate_to_allocated_bytes"], signed=True) if est else "-")
    table.add_row("peak reserved", gib(g["peak_reserved_bytes"]), gib(est["total_bytes"]) if est else "-", "-")
    table.add_row("device", gib(g["device_total_bytes"]), "-", "-")
    console.print(table)
    if est:
        console.print("  (the estimate's reserved: its allocated buckets plus runtime reserve and overhead)")
    # one gap a line: side by side they ran past 120 columns
    rule = f" [{gaps['fragmentation_rule']}]" if gaps["fragmentation_rule"] else ""
    for label, value in (("estimate -> allocated", gib(gaps["estimate_to_allocated_bytes"], signed=True)),
                         ("allocated -> reserved (fragmentation)", gib(gaps["fragmentation_bytes"]) + rule),
                         ("reserved -> device (headroom)", gib(gaps["headroom_bytes"]))):
        console.prose(escape(f"  {label + ':':<39} {value}"))
    extra = []
    if g["resident_bytes"] is not None:
        extra.append(f"resident between steps {gib(g['resident_bytes'])}")
    if g["alloc_retries"] is not None:
        extra.append(f"allocator retries {g['alloc_retries']}, OOMs {g['ooms']}")
    if g["filled_from"]:
        extra.append("from other sources: " + ", ".join(f"{k.removesuffix('_bytes')} ({v})"
                                                        for k, v in g["filled_from"].items()))
    if extra:
        console.prose("  " + escape("; ".join(extra)))
    for s in g["sources"]:
        if s["kind"] == "snapshot" and g["source"] != "snapshot":
            for r in s["ranks"]:
                where = f"device {r['device']}" if r["device"] is not None else "the snapshot"
                parts = ", ".join(f"{k} {gib(v)}" for k, v in r["categories"].items())
                console.prose(escape(f"  snapshot {s['path'] or s['source_sha256'][:12]} ({where}) at its peak "
                                     f"{gib(r['peak_allocated_bytes'])}: {parts}"))
        for r in s["ranks"]:
            for w in r["warnings"]:
                err_console.prose(f"  [yellow]warning ({s['kind']}):[/] {escape(w)}")


def render_drift(drifts: list[dict[str, Any]] | None, moved: str | None) -> None:
    if not drifts:
        return
    console.print("  memory drift (B - A, largest first)" + (f": the {moved.replace('_', ' ')} bucket moved most"
                                                            if moved else ""))
    for d in drifts:
        if d["delta_bytes"]:
            console.print(f"    {d['category']:<28} {gib(d['a_bytes']):>14} -> {gib(d['b_bytes']):>14}  "
                          f"{gib(d['delta_bytes'], signed=True)}")


def render_estimate(e: dict[str, Any]) -> None:
    table = Table(title="memory estimate, bytes per rank")
    for col in ("field", "bucket", "estimated"):
        table.add_column(col, justify="right" if col == "estimated" else "left")
    from receipts.schema.memory import ESTIMATE_FIELDS

    for name, value in e["categories"].items():
        table.add_row(name.replace("_", " "), ESTIMATE_FIELDS[name] or "(outside allocated)", gib(value))
    table.add_row("allocated", "", gib(e["allocated_bytes"]))
    table.add_row("total", "", gib(e["total_bytes"]))
    if e["device_total_bytes"] is not None:
        table.add_row("device", "", gib(e["device_total_bytes"]))
        table.add_row("headroom", "", gib(e["headroom_bytes"], signed=True))
    console.print(table)
    for note in e["notes"]:
        console.print(f"[yellow]note:[/] {escape(note)}")
