"""An attachment against its receipt: refused when the file contradicts what the receipt knows of its machine
(GPU model or count, host, topology size, world size: from its own log or an earlier attachment, named either
way) or, for a profile, when its steps are not the log's (ingest/machine.py, analysis/at_ingest.py); else what
it adds to the receipt: the machine facts the receipt lacks, each with the file it came from, and the profiler.
With force the file is attached anyway and the contradiction recorded with its source."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from receipts.analysis.at_ingest import profile_step_times, steps_mismatch
from receipts.errors import InputError, Remedy
from receipts.ingest.machine import MachineSeen, contradictions, machine_fill
from receipts.schema.model import Anatomy
from receipts.store import Store
from receipts.store.base import ReceiptFill


@dataclass(frozen=True)
class Checked:
    forced: str | None    # the contradiction forced past (recorded on the source); None when there was none
    fill: ReceiptFill     # what attaching the file adds to the receipt


def check_attachment(store: Store, receipt_id: str, path: Path, seen: MachineSeen, *, force: bool, label: str,
                     profile: Anatomy | None = None, software: dict[str, str] | None = None) -> Checked:
    """Refuse (InputError, exit 2) a file whose machine contradicts the receipt's, or a profile whose steps are
    not the receipt's log's, naming both sides; with force, go on and return the contradiction. `label`: the file
    as provenance names it (e.g. "nsys export run.sqlite")."""
    row = store.query("receipt", {"receipt_id": receipt_id}).row(0, named=True)
    origins = json.loads(row["provenance_json"] or "{}").get("machine", {})
    found = contradictions(seen, row, origins)
    if profile is not None:
        mismatch = _steps_mismatch(store, receipt_id, profile)
        if mismatch:
            found.append(mismatch)
    forced = None
    if found:
        what = "; ".join(found)
        if not force:
            raise InputError(path, f"contradicts receipt {receipt_id} ({row['run_name']}): {what}; not attached",
                             remedy=Remedy("force"))
        forced = what
    columns = {} if forced else machine_fill(seen, row)  # a forced file's facts are in doubt: kept, not merged
    return Checked(forced, ReceiptFill(columns, {c: label for c in columns}, software or {}))


def _steps_mismatch(store: Store, receipt_id: str, profile: Anatomy) -> str | None:
    times = profile_step_times(profile)
    if not times:
        return None
    rows = store.query("attached_step_times", {"receipt_id": receipt_id, "first": min(times), "last": max(times)})
    if rows.height == 0:
        return None
    log = {int(s): float(ms) for s, ms in rows.select("step", "step_ms").iter_rows() if s is not None and ms is not None}
    return steps_mismatch(times, log, rows["first_step"][0], rows["last_step"][0])
