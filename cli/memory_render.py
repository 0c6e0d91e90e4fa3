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
    """The geometry table: each bucket measured beside every attached estimate, the last one's error, then the
    three gaps."""
    if g["source"] is None:
        return
    if g["source"] == "receipt" and g["estimate"] is None:
        return  # the receipt's peaks alone: `memory:` above says it all
    where = f"rank {g['rank']}" if g["rank"] is not None else (f"device {g['device']}" if g["device"] is not None
                                                               else "the run")
    estimates = g.get("estimates") or ([g["estimate"]] if g["estimate"] else [])
    est = g["estimate"]
    title = f"memory geometry: {where}, measured by {g['source']}"
    if estimates:
        title += ", estimated by " + ", ".join(escape(e.get("label") or e["path"] or "an estimate") for e in estimates)
    table = Table(title=title)
    labels = [e.get("label") or "estimated" for e in estimates]
    for col in ("bucket", "measured", *labels, "estimate error"):
        table.add_column(escape(col), justify="left" if col == "bucket" else "right")
    for row in g["buckets"]:
        if row["bucket"] in ("runtime_reserve", "overhead") and not row["estimated_bytes"]:
            continue
        error = "-" if row["error_bytes"] is None else (
            gib(row["error_bytes"], signed=True) + (f" ({row['error_pct']:+.1f}%)" if row["error_pct"] is not None else ""))
        per = (row.get("estimated") or {labels[-1]: row["estimated_bytes"]}) if labels else {}
        name = row["bucket"].replace("_", " ")
        if row.get("measured_by") == "snapshot":
            name += " (snapshot)"
        table.add_row(name, gib(row["measured_bytes"]), *(gib(per.get(label)) for label in labels), error)
    gaps = g["gaps"]
    table.add_row("peak allocated", gib(g["peak_allocated_bytes"]), *(gib(e["allocated_bytes"]) for e in estimates),
                  gib(gaps["estimate_to_allocated_bytes"], signed=True) if est else "-")
    table.add_row("peak reserved", gib(g["peak_reserved_bytes"]), *(gib(e["total_bytes"]) for e in estimates), "-")
    table.add_row("device", gib(g["device_total_bytes"]), *("-" for _ in estimates), "-")
    console.print(table)
    if est:
        console.prose("  (an estimate's peak allocated is its largest phase, not the sum of its rows; its reserved "
                      "adds the runtime reserve and overhead)")
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
            label = d["category"] + (" (estimated)" if d["kind"] == "estimate" else "")
            console.print(f"    {label:<30} {gib(d['a_bytes']):>12} -> {gib(d['b_bytes']):>12}  "
                          f"{gib(d['delta_bytes'], signed=True)}")


def render_estimate(e: dict[str, Any]) -> None:
    """The estimate on a terminal: each field with its bucket, the peak and the phase that holds it, and whether
    it fits the device with the reserve."""
    from receipts.schema.memory import ESTIMATE_FIELDS

    table = Table(title=f"memory estimate, bytes per rank ({escape(e['method'])})")
    for col in ("field", "bucket", "estimated"):
        table.add_column(col, justify="right" if col == "estimated" else "left")
    for name, value in e["categories"].items():
        if value:
            table.add_row(name.replace("_", " "), ESTIMATE_FIELDS.get(name) or "(outside allocated)", gib(value))
    peak_at = max(e["phases"], key=e["phases"].get) if e["phases"] else None
    table.add_row("peak allocated", f"at {peak_at.replace('_', ' ')}" if peak_at else "(the tracker's peak)",
                  gib(e["peak_allocated_bytes"]))
    table.add_row("peak + reserve + overhead", "", gib(e["total_bytes"]))
    console.print(table)
    if e["phases"]:
        console.prose("  the peak is the largest of: " + ", ".join(
            f"{k.replace('_', ' ')} {gib(v)}" for k, v in e["phases"].items()) + " (not the sum of the fields)")
    console.prose("  " + fit_line(e))
    for note in e["notes"]:
        console.print(f"[yellow]note:[/] {escape(note)}")


def fit_line(e: dict[str, Any]) -> str:
    reserve = e["categories"].get("runtime_reserve", 0) + e["categories"].get("overhead", 0)
    if e["device_total_bytes"] is None:
        return (f"needs {gib(e['total_bytes'])} per rank (peak {gib(e['peak_allocated_bytes'])} + reserve "
                f"{gib(reserve)}); give --device-total (e.g. 141GB) to check the fit")
    verdict = "fits" if e["fits"] else "does NOT fit"
    return (f"{verdict}: peak {gib(e['peak_allocated_bytes'])} + reserve {gib(reserve)} = {gib(e['total_bytes'])} "
            f"of the device's {gib(e['device_total_bytes'])}, headroom {gib(e['headroom_bytes'], signed=True)}")


def estimate_rows(e: dict[str, Any]) -> list[dict[str, Any]]:
    """The estimate as field/bucket/bytes rows (TSV, CSV): the fields, the phases, the peak and the fit."""
    from receipts.schema.memory import ESTIMATE_FIELDS

    rows = [{"field": k, "bucket": ESTIMATE_FIELDS.get(k) or "reserve", "bytes": v}
            for k, v in e["categories"].items() if v]
    rows += [{"field": f"phase.{k}", "bucket": "peak", "bytes": v} for k, v in e["phases"].items()]
    rows += [{"field": "peak_allocated", "bucket": "peak", "bytes": e["peak_allocated_bytes"]},
             {"field": "total", "bucket": "peak", "bytes": e["total_bytes"]}]
    if e["device_total_bytes"] is not None:
        rows += [{"field": "device_total", "bucket": "device", "bytes": e["device_total_bytes"]},
                 {"field": "headroom", "bucket": "device", "bytes": e["headroom_bytes"]}]
    return rows
