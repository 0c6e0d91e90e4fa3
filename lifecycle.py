"""The identity lifecycle of stored receipts: correcting a claimed identity (`receipts retag`), noticing a
re-ingest that claims another identity, and one current receipt per run (superseding).

The store does the writing (one transaction each); this module decides what to write, re-resolving raw
values through the registry with schema/identity.py exactly as ingest does.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path

from receipts.errors import Remedy, UsageError
from receipts.schema.identity import (IdentityChange, identity_columns, resolve_identity, retagged_columns,
                                      unknown_values)
from receipts.schema.lane import FIELDS, OPTION, RAW, RESOLVED_WITH, Lane
from receipts.schema.model import NAME_MAX_CHARS, IdentityClaim, Receipt
from receipts.schema.registry import Registry
from receipts.store import Store
from receipts.store import rows as R
from receipts.store.base import RETAG_COLUMNS


@dataclass(frozen=True)
class RetagOutcome:
    receipt_id: str
    seq: int                                  # the identity_history row written
    changed: dict[str, tuple[object, object]]  # column -> (before, after)
    complete: bool
    warnings: tuple[str, ...] = ()


def retag(store: Store, ref: str, change: IdentityChange, *, why: str, registry: Registry) -> RetagOutcome:
    """Change a stored receipt's claimed identity, keeping the old one in identity_history."""
    if not why or not why.strip():
        raise UsageError("is needed: the history records why an identity was changed", option="why")
    if change.empty:
        raise UsageError("a retag needs something to change: a host lineage, preset, regime, run name or tag")
    for option, value in {**change.claim.options(), "run_name": change.run_name}.items():
        if value is not None and len(value) > NAME_MAX_CHARS:
            raise UsageError(f"is {len(value):,} characters long; at most {NAME_MAX_CHARS:,}", option=option)
    warnings = check_claim(change.claim, registry)
    receipt_id = store.resolve(ref)
    stored = store.query("receipt", {"receipt_id": receipt_id}).row(0, named=True)
    changes = retagged_columns(stored, change, registry)
    if not changes:
        raise UsageError(f"receipt {receipt_id} already has that identity; nothing to change")
    if "run_name" in changes:
        # A retag is explicit, so a shared name is allowed; say that the name now means several receipts.
        others = [r["id"] for r in store.query("run_name_users", {"run_name": changes["run_name"]}).iter_rows(named=True)
                  if r["id"] != receipt_id]
        if others:
            warnings.append(f"run name {changes['run_name']!r} is also used by current receipt(s) {', '.join(others)}: "
                            "address them by id, or retag one of them with another run name")
    expected = {k: stored[k] for k in RETAG_COLUMNS}
    seq = store.retag(receipt_id, expected=expected, changes=changes, why=why.strip())
    after = {**expected, **changes}
    shown = {k: (stored[k], changes[k]) for k in changes if k not in ("resolution_json", "parallel_json")}
    return RetagOutcome(receipt_id, seq, shown, bool(after["identity_complete"]), tuple(warnings))


# ---- ingest: one current receipt per run, conflicts said out loud, unknown values caught ----------------
@dataclass(frozen=True)
class LedgerWrite:
    receipt_id: str
    run_name: str
    created: bool
    complete: bool                            # of the receipt as stored (the earlier one when unchanged)
    supersedes: tuple[str, ...] = ()          # earlier receipts of this run that this one replaced
    superseded_by: str | None = None          # set when the file is an older view of a run already stored
    identity_conflict: dict | None = None     # re-ingest asked for another identity than the stored one
    warnings: tuple[str, ...] = ()
    restore: Remedy | None = None             # the retag that restores what a superseded receipt said otherwise
    missing: tuple[str, ...] = ()             # identity parts the stored receipt lacks (a rumor when any)
    ended_early: str | None = None            # already_stored: why the stored file looked cut short


def check_claim(claim: IdentityClaim, registry: Registry) -> list[str]:
    """'did you mean' warnings for claimed values the registry does not know; with registry.strict, a
    refusal (UsageError, exit 2) before anything is written."""
    unknown = unknown_values(claim, registry)
    if unknown and registry.strict:
        raise UsageError("strict mode: " + "; ".join(map(str, unknown)), remedy=Remedy("not_strict"))
    return [str(u) for u in unknown]


def write_current(store: Store, receipt: Receipt, *, registry: Registry, asked: IdentityClaim, named: bool,
                  anatomies: tuple = ()) -> LedgerWrite:
    """Write a parsed receipt the way the ledger wants it:

    - identity values not in the registry: a "did you mean" warning each (strict: refused, nothing written);
    - an earlier current receipt of the same run (its log a byte prefix of this file, or the same RECEIPT
      header run key) is superseded by this one in the same transaction, and what it knew of the identity
      that this file does not say (a retag, flags given then) carries over;
    - an explicit run name (`--run-name`, receipt.toml) that another current receipt already uses is
      refused unless tags make the intent explicit;
    - a file already stored (same content) whose explicit claims differ from the stored receipt is
      reported as an identity conflict with the `receipts retag` command that would apply them.

    `asked`: the explicit claims (flags over receipt.toml), not what the file itself says."""
    warnings = check_claim(receipt.parsed.claim.merged(asked), registry)
    asked_warnings = [w for w in warnings if w in check_claim(asked, registry)]
    head = log_head_sha256(receipt)
    restore = None
    # Which receipt of the run is current is decided and written by one writer at a time (PostgreSQL: an advisory
    # lock per run key and log family), so writers racing with views of one run leave one current receipt.
    with store.run_lock(tuple(k for k in (R.run_key(receipt), head) if k)):
        replaces, newer, notes = _predecessors(store, receipt, head)
        warnings += notes
        columns: dict = {"log_head_sha256": head}
        if newer is not None:
            columns["superseded_by"] = newer
        if replaces:
            carried, differs, restore = _carry_over(store, receipt, replaces, named=named)
            columns.update(carried)
            warnings += differs
        if named and not receipt.tags:
            _refuse_shared_run_name(store, receipt, set(replaces))
        result = store.write_receipt(receipt, anatomies=anatomies, supersedes=replaces, columns=columns)
    if result.created:
        complete = bool(columns.get("identity_complete", receipt.identity.complete))
        if replaces:
            warnings.append(f"supersedes {', '.join(replaces)} (an earlier view of the same run; kept for audit, "
                            "hidden from list, lanes, compare defaults and the gate)")
        final = {**identity_columns(receipt.identity), **columns}
        return LedgerWrite(result.receipt_id, result.run_name, True, complete, replaces, newer, None, tuple(warnings),
                           restore, missing=_missing(final))
    stored = store.query("receipt", {"receipt_id": result.receipt_id}).row(0, named=True)
    return _unchanged(stored, receipt.run_name, receipt.tags, asked, asked_warnings, registry=registry, named=named)


def already_stored(store: Store, content_sha256: str, *, run_name: str, tags: tuple[str, ...], asked: IdentityClaim,
                   registry: Registry, named: bool) -> LedgerWrite | None:
    """What write_current reports for a file whose content is already stored, without parsing it (a second
    ingest of the same log: a 2M-line one parsed for 5 s to be told "unchanged"); None when it is not stored.

    A receipt is its file's content (its id the sha256's first 16 hex digits, the full digest checked), so storing
    the parse again writes nothing whatever the parse gives. The outcome is the one a parse would give: the
    stored run name, identity and ledger state, an identity conflict for explicit claims that differ, the file's
    warnings and whether it ended early as its first parse said them (stored), and the warnings of the explicit
    claims (strict mode refuses an unknown one)."""
    found = store.query("receipt", {"receipt_id": content_sha256[:16]})
    if found.height == 0 or found["content_sha256"][0] != content_sha256:
        return None
    stored = found.row(0, named=True)
    warnings = [*json.loads(stored["warnings_json"] or "[]"), *check_claim(asked, registry)]
    write = _unchanged(stored, run_name, tuple(sorted(set(tags))), asked, warnings, registry=registry, named=named)
    return replace(write, ended_early=stored["ended_early"])


def _unchanged(stored: dict, run_name: str, tags: tuple[str, ...], asked: IdentityClaim, warnings: list[str], *,
               registry: Registry, named: bool) -> LedgerWrite:
    """A file already stored: what the file itself claims was said when it was first ingested; only new asks now."""
    conflict = identity_conflict(stored, run_name, tags, asked, registry=registry, named=named)
    return LedgerWrite(stored["id"], stored["run_name"], False, bool(stored["identity_complete"]),
                       (), stored["superseded_by"], conflict, tuple(warnings), missing=_missing(stored))


def _missing(row: dict) -> tuple[str, ...]:
    return tuple(part for part in _PART_COLUMNS if row.get(part) is None)


# Logs that are byte prefixes of one another share their first HEAD_BYTES bytes: their family (receipts.log_head_sha256).
# A shorter log is not matched against longer ones (two or three lines of a log; no steady window to speak of).
HEAD_BYTES = 256


def log_head_sha256(receipt: Receipt) -> str | None:
    """The sha256 of a log's first HEAD_BYTES bytes (as the file holds them); None for a profile or a shorter log."""
    source = receipt.sources[0]
    if source.role != "log" or source.size_bytes < HEAD_BYTES or not Path(source.path).is_file():
        return None
    with open(source.path, "rb") as f:
        head = f.read(HEAD_BYTES)
    return hashlib.sha256(head).hexdigest() if len(head) == HEAD_BYTES else None


def _predecessors(store: Store, receipt: Receipt,
                  head: str | None) -> tuple[tuple[str, ...], str | None, list[str]]:
    """(current receipts this one supersedes, the current receipt that supersedes this one or None, warnings)."""
    source = receipt.sources[0]
    if source.role != "log":
        return (), None, []
    run_key = R.run_key(receipt)
    found = store.query("run_predecessors", {"run_key": run_key, "size": source.size_bytes, "id": receipt.id,
                                             "head": head})
    rows = found.to_dicts()
    by_key = [r for r in rows if r["same_run"]]
    longer = [r for r in by_key if r["size_bytes"] > source.size_bytes]
    if longer:
        newer = max(longer, key=lambda r: r["size_bytes"])["id"]
        return (), newer, [f"this file is an earlier view of run {newer} (same run key, shorter log): stored as "
                           "superseded by it"]
    newer_row, notes = _longer_view(store, receipt, [r for r in rows if r["same_head"]
                                                     and r["size_bytes"] > source.size_bytes])
    if newer_row is not None:
        return (), newer_row["id"], notes
    replaces = {r["id"] for r in by_key}
    candidates = [r for r in rows if r["id"] not in replaces and 0 < r["size_bytes"] < source.size_bytes]
    replaces |= _byte_prefixes(Path(source.path), candidates)
    return tuple(sorted(replaces)), None, notes


def _longer_view(store: Store, receipt: Receipt, candidates: list[dict]) -> tuple[dict | None, list[str]]:
    """The longest candidate (a current receipt whose log is longer and starts with the same bytes) that this file
    is an earlier view of: its log, read where it was ingested, begins with this whole file; or, where that log is
    not readable here (ingested on another machine), it started when this file says its run did (when it says) and
    its stored step rows begin with this file's, line for line."""
    source = receipt.sources[0]
    for c in sorted(candidates, key=lambda r: (-r["size_bytes"], r["id"])):
        other = Path(c["path"])
        if other.is_file():
            if _begins_with(other, c["size_bytes"], c["sha256"], source.size_bytes, source.sha256):
                return c, [f"this file is a byte prefix of the log of receipt {c['id']} ({c['run_name']}, {other}): "
                           "stored as superseded by it (an earlier view of the same run)"]
        elif receipt.parsed.started_at in (None, c["started_at"]) and _steps_begin_with(store, c["id"], receipt):
            return c, [f"this file starts as the log of receipt {c['id']} ({c['run_name']}) does and its steps are "
                       f"that receipt's first ones, line for line (that log, {other}, is not readable here): stored "
                       "as superseded by it (an earlier view of the same run)"]
    return None, []


def _steps_begin_with(store: Store, receipt_id: str, receipt: Receipt) -> bool:
    """Whether a stored receipt's step rows begin with this receipt's (step, rank, step time and source line)."""
    columns = ["step", "rank", "step_ms", "line"]
    mine = receipt.parsed.steps.lazy().select(columns).collect()
    if mine.height == 0:
        return False
    stored = store.query("first_steps", {"receipt_id": receipt_id, "n": mine.height})
    return stored.height == mine.height and stored.equals(mine.sort(["step", "rank"], nulls_last=False))


def _begins_with(other: Path, other_size: int, other_sha256: str, size: int, sha256: str) -> bool:
    """Whether the file at `other` still holds the stored log (its first other_size bytes hash to other_sha256) and
    its first `size` bytes hash to `sha256`: one read of the stored log's length."""
    digest, position, prefix = hashlib.sha256(), 0, None
    with open(other, "rb") as f:
        for stop in (size, other_size):
            while position < stop:
                chunk = f.read(min(1 << 20, stop - position))
                if not chunk:
                    return False
                digest.update(chunk)
                position += len(chunk)
            if prefix is None:
                prefix = digest.copy().hexdigest()
                if prefix != sha256:
                    return False
    return digest.hexdigest() == other_sha256


def _byte_prefixes(path: Path, candidates: list[dict]) -> set[str]:
    """Which candidates' logs are byte prefixes of `path`: one read of the file up to the longest candidate,
    the running sha256 snapshotted at each candidate's size, so the cost is one pass however many there are."""
    by_size: dict[int, list[dict]] = {}
    for c in candidates:
        by_size.setdefault(int(c["size_bytes"]), []).append(c)
    found: set[str] = set()
    if not by_size or not path.is_file():
        return found
    digest, position = hashlib.sha256(), 0
    with open(path, "rb") as f:
        for size in sorted(by_size):
            while position < size:
                chunk = f.read(min(1 << 20, size - position))
                if not chunk:
                    return found
                digest.update(chunk)
                position += len(chunk)
            prefix_sha = digest.copy().hexdigest()
            found |= {c["id"] for c in by_size[size] if c["sha256"] == prefix_sha}
    return found


# What each part of the identity occupies in the receipts row (carried over together or not at all).
_PART_COLUMNS = {f: (RAW[f], f, *RESOLVED_WITH.get(f, ())) for f in FIELDS}


def _carry_over(store: Store, receipt: Receipt, replaces: tuple[str, ...], *,
                named: bool) -> tuple[dict, list[str], Remedy | None]:
    """What the newest superseded receipt knew that this file does not say: identity parts this parse leaves
    empty (given by flags or a retag back then), its run name when this one was not named, and its tags.
    Parts both state differently are not merged: a warning says so, with the retag that would restore them."""
    previous = store.query("receipts_many", {"ids": list(replaces)}).sort("ingested_at").row(-1, named=True)
    new = {**identity_columns(receipt.identity), "run_name": receipt.run_name,
           "tags_json": R.receipt_row(receipt, "")["tags_json"]}
    out: dict = {}
    notes = json.loads(new["resolution_json"])
    values: list[tuple[str, str]] = []
    for part, cols in _PART_COLUMNS.items():
        if new[part] is None and previous[part] is not None:
            out.update({c: previous[c] for c in cols})
            notes.append(f"{part.replace('_', ' ')} {previous[part]!r} carried over from superseded receipt "
                         f"{previous['id']}")
        elif previous[part] is not None and new[part] != previous[part]:
            values.append((OPTION[part], previous[cols[0]] or previous[part]))
    if out:
        lane = Lane.of({**new, **out})
        out["identity_complete"], out["lane_key"] = lane.complete, lane.key
        out["resolution_json"] = R.dumps(notes)
    if not named and previous["run_name"] != receipt.run_name:
        out["run_name"] = previous["run_name"]
    tags = sorted(set(json.loads(new["tags_json"])) | set(json.loads(previous["tags_json"])))
    if tags != json.loads(new["tags_json"]):
        out["tags_json"] = R.dumps(tags)
    if not values:
        return out, [], None
    said = ", ".join(f"{option.replace('_', ' ')} {value!r}" for option, value in values)
    return out, [f"the superseded receipt {previous['id']} had another identity than this file states ({said}); kept "
                 "what this file says"], Remedy("retag", receipt.id, tuple(values))


def _refuse_shared_run_name(store: Store, receipt: Receipt, replaced: set[str]) -> None:
    users = [r for r in store.query("run_name_users", {"run_name": receipt.run_name}).iter_rows(named=True)
             if r["content_sha256"] != receipt.content_sha256 and r["id"] not in replaced]
    if users:
        raise UsageError(f"run name {receipt.run_name!r} is already used by current receipt {users[0]['id']}",
                         remedy=Remedy("other_run_name", users[0]["id"]))


def identity_conflict(stored: dict, run_name: str, tags: tuple[str, ...], asked: IdentityClaim, *,
                      registry: Registry, named: bool) -> dict | None:
    """The explicit claims of a re-ingest that the stored receipt does not carry, or None.

    Returns {"receipt_id", "stored": {...}, "asked": {...}, "change": [[parameter, raw value], ...]}, the change
    being the retag that would apply them; only the fields that were asked for and differ are listed."""
    ident = resolve_identity(asked, registry)
    stored_part, asked_part, change = {}, {}, []
    for part in FIELDS:
        raw = getattr(asked, OPTION[part])
        if raw and getattr(ident.lane, part) != stored[part]:
            stored_part[part], asked_part[part] = stored[part], getattr(ident.lane, part)
            change.append([OPTION[part], raw])
    if named and run_name != stored["run_name"]:
        stored_part["run_name"], asked_part["run_name"] = stored["run_name"], run_name
        change.append(["run_name", run_name])
    missing_tags = sorted(set(tags) - set(json.loads(stored["tags_json"] or "[]")))
    if missing_tags:
        stored_part["tags"], asked_part["tags"] = json.loads(stored["tags_json"] or "[]"), missing_tags
        change += [["tag", t] for t in missing_tags]
    if not change:
        return None
    return {"receipt_id": stored["id"], "stored": stored_part, "asked": asked_part, "change": change}
