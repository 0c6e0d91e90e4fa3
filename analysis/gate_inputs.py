"""What the gate judges, read from a Store: each claim's receipts (resolved once, superseded ones refused), the
noise floors of their lanes, and the runs of each `tag:T` baseline. `run_gate` reads them and hands them to the
pure judgement in analysis/gate.py."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from receipts.analysis.check import Baseline, baseline_for, read_lanes
from receipts.analysis.claims import Claim, ClaimsFile
from receipts.analysis.gate import Evidence, GateResult, Unresolved, evaluate
from receipts.analysis.lanes import DEFAULT_BASELINE_LAST, Lane, lane_floors, lane_of
from receipts.analysis.noise import NoiseFloor
from receipts.analysis.record import StoredReceipt, load_many
from receipts.errors import ReceiptNotFound

if TYPE_CHECKING:
    from receipts.store import Store


def collect_evidence(store: "Store", refs: list[str]) -> dict[str, Evidence | Unresolved]:
    """Resolve each reference once and load its receipt; refs naming the same receipt share one load."""
    resolved = store.resolve_many(refs, current_only=True)     # superseded receipts are not evidence
    loaded = load_many(store, [rid for rid in resolved.values() if isinstance(rid, str)])
    out: dict[str, Evidence | Unresolved] = {}
    for ref, rid in resolved.items():
        if isinstance(rid, ReceiptNotFound):  # an unknown receipt is a rejection reason, not an error
            out[ref] = Unresolved(ref, str(rid))
        else:
            out[ref] = Evidence(loaded[rid], loaded[rid].phases)
    return out


def with_memory(store: "Store", evidence: dict[str, Evidence | Unresolved]) -> dict[str, Evidence | Unresolved]:
    """Each loaded receipt's memory geometry (analysis/memory_geometry.py) on its evidence: what a memory_bucket
    claim bounds."""
    from dataclasses import replace

    from receipts.analysis.memory_geometry import geometries_in_store

    loaded = [e for e in evidence.values() if isinstance(e, Evidence)]
    memory = geometries_in_store(store, [e.receipt.id for e in loaded])
    return {ref: replace(e, memory=memory[e.receipt.id]) if isinstance(e, Evidence) else e
            for ref, e in evidence.items()}


def claim_floors(store: "Store", evidence: Mapping[str, Evidence | Unresolved]) -> dict[Lane, NoiseFloor]:
    """The noise floor of every lane a loaded receipt belongs to, in one query."""
    lanes = {lane for e in evidence.values() if isinstance(e, Evidence) and (lane := lane_of(e.receipt)) is not None}
    return lane_floors(store, sorted(lanes, key=str))


def tag_baselines(store: "Store", claims_file: ClaimsFile, evidence: dict[str, Evidence | Unresolved]
                  ) -> dict[str, Baseline | None]:
    """The baseline of each `baseline: tag:T` claim (by claim name; None for a rumor candidate), one read per
    (tag, last); the baseline runs' receipts are added to `evidence` under their ids."""
    out: dict[str, Baseline | None] = {}
    groups: dict[tuple[str, int], list[tuple[Claim, StoredReceipt]]] = {}
    for c in claims_file.claims:
        found = evidence.get(c.candidate)
        if c.baseline_tag is not None and isinstance(found, Evidence):
            groups.setdefault((c.baseline_tag, c.last or DEFAULT_BASELINE_LAST), []).append((c, found.receipt))
    for (tag, last), claims in groups.items():
        candidates = {receipt.id: receipt for _, receipt in claims}
        reads = read_lanes(store, candidates, tag=tag, last=last)
        for rid, r in reads.receipts.items():
            evidence.setdefault(rid, Evidence(r, r.phases))
        for c, receipt in claims:
            out[c.name] = baseline_for(receipt, tag=tag, last=last, reads=reads)
    return out


def run_gate(store: "Store", claims_file: ClaimsFile) -> GateResult:
    refs = [ref for c in claims_file.claims for ref in ((c.baseline, c.candidate) if c.baseline_tag is None
                                                         else (c.candidate,))]
    evidence = collect_evidence(store, refs)
    if any(c.metric == "memory_bucket" for c in claims_file.claims):
        evidence = with_memory(store, evidence)
    baselines = tag_baselines(store, claims_file, evidence)
    return evaluate(claims_file, evidence, claim_floors(store, evidence), baselines)
