"""What the gate judges, read from a Store: each claim's receipts (resolved once, superseded ones refused), the
noise floors of their lanes, and the runs of each `tag:T` baseline. `run_gate` reads them and hands them to the
pure judgement in analysis/gate.py."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from receipts.analysis.check import Baseline, baseline_for, read_lanes
from receipts.analysis.claims import Claim, ClaimsFile
from receipts.analysis.gate import Evidence, GateResult, Unresolved, evaluate
from receipts.analysis.configuration import configuration_floors
from receipts.analysis.lanes import DEFAULT_BASELINE_LAST, Lane, lane_of
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


def claim_floors(store: "Store", claims_file: ClaimsFile, evidence: Mapping[str, Evidence | Unresolved]
                 ) -> dict[Lane | str, NoiseFloor]:
    """The noise floor of each claim whose baseline is a receipt, by claim name: its baseline's configuration in
    their lane, the candidate left out (analysis/configuration.py, as `compare` takes it), so a claim's verdict does
    not move with other pull requests' runs in the lane."""
    from receipts.analysis.compare import drift

    pairs = [(c.name, evidence[c.baseline], evidence[c.candidate]) for c in claims_file.claims
             if c.baseline_tag is None and c.baseline is not None]
    judged = [(name, a.receipt, b.receipt) for name, a, b in pairs
              if isinstance(a, Evidence) and isinstance(b, Evidence) and lane_of(a.receipt) is not None
              and lane_of(a.receipt) == lane_of(b.receipt)]
    floors = configuration_floors(store, [(a, b) for _, a, b in judged], drift)
    out: dict[Lane | str, NoiseFloor] = {name: f for (name, _, _), f in zip(judged, floors) if f is not None}
    return out


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
    return evaluate(claims_file, evidence, claim_floors(store, claims_file, evidence), baselines)
