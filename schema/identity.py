"""Identity canonicalisation: (host lineage, preset family, launch regime).

"Anything missing one of those three is a rumor. Anything carrying all three is a comparison."
Raw values are kept beside canonical ones, and every resolution step leaves a note.
"""

from __future__ import annotations

import difflib
import fnmatch
import json
import re
from dataclasses import dataclass, replace
from typing import Any

from receipts.schema.lane import FIELDS, RAW, RESOLVED_WITH, IdentityClaim, Lane
from receipts.schema.model import Identity, LaunchRegime
from receipts.schema.registry import Registry


def _norm_words(text: str) -> list[str]:
    """'FSDP2, regional-compile' -> ['fsdp2', 'regional', 'compile']."""
    return re.sub(r"[\s,/;|+_=:\-()]+", " ", text.lower()).split()


def resolve_host(claim: IdentityClaim, registry: Registry) -> tuple[str | None, list[str]]:
    notes: list[str] = []
    raw = (claim.host_lineage or "").strip()
    if raw:
        key = raw.lower()
        for lineage in registry.hosts.values():
            if key == lineage.name.lower():
                return lineage.name, notes
            if key in (a.lower() for a in lineage.aliases):
                notes.append(f"host lineage alias {raw!r} -> {lineage.name!r}")
                return lineage.name, notes
        notes.append(f"host lineage {raw!r} is not in the registry; kept as given")
        return raw, notes
    hostname = (claim.hostname or "").strip().lower()
    if hostname:
        for lineage in registry.hosts.values():
            if any(fnmatch.fnmatchcase(hostname, p.lower()) for p in lineage.patterns):
                notes.append(f"hostname {claim.hostname!r} matched lineage {lineage.name!r}")
                return lineage.name, notes
        notes.append(f"hostname {claim.hostname!r} matches no host lineage in the registry")
    return None, notes


def resolve_preset(raw: str | None, registry: Registry) -> tuple[str | None, dict, list[str]]:
    notes: list[str] = []
    if not raw or not raw.strip():
        return None, {}, notes
    key = raw.strip().lower()
    for preset in registry.presets.values():
        if key == preset.name.lower():
            return preset.name, dict(preset.features), notes
        if key in (a.lower() for a in preset.aliases):
            notes.append(f"preset alias {raw.strip()!r} -> {preset.name!r}")
            return preset.name, dict(preset.features), notes
    notes.append(f"preset {raw.strip()!r} is not in the registry; kept as its own family")
    return raw.strip(), {}, notes


def parse_regime(raw: str | None, registry: Registry) -> tuple[LaunchRegime | None, list[str]]:
    """'FSDP2, regional compile' and 'fsdp2/regional-compile' parse to one LaunchRegime."""
    notes: list[str] = []
    if not raw or not raw.strip():
        return None, notes
    phrases: dict[tuple[str, ...], tuple[str, str]] = {}
    for canon, spellings in registry.engines.items():
        for s in [canon, *spellings]:
            phrases[tuple(_norm_words(s))] = ("engine", canon)
    for canon, spellings in registry.compile_modes.items():
        for s in spellings:
            phrases[tuple(_norm_words(s))] = ("compile", canon)
    degree_names: dict[str, str] = {}
    for canon, spellings in registry.degrees.items():
        for s in [canon, *spellings]:
            degree_names[" ".join(_norm_words(s))] = canon

    words = _norm_words(raw)
    longest = max((len(p) for p in phrases), default=1)
    engine = compile_mode = None
    degrees: dict[str, int] = {}
    unknown: list[str] = []
    i = 0
    while i < len(words):
        for n in range(min(longest, len(words) - i), 0, -1):
            hit = phrases.get(tuple(words[i:i + n]))
            if hit:
                kind, canon = hit
                if kind == "engine":
                    engine = canon
                else:
                    compile_mode = canon
                i += n
                break
        else:
            word = words[i]
            m = re.fullmatch(r"([a-z]+)(\d+)", word)
            if m and m.group(1) in degree_names:
                degrees[degree_names[m.group(1)]] = int(m.group(2))
                i += 1
            elif word in degree_names and i + 1 < len(words) and words[i + 1].isdigit():
                degrees[degree_names[word]] = int(words[i + 1])
                i += 2
            elif word in degree_names and degree_names[word] == "sp":
                degrees["sp"] = 1  # sequence parallel is a switch, not a degree
                i += 1
            else:
                unknown.append(word)
                i += 1
    if unknown:
        notes.append(f"regime {raw!r}: unrecognised words {unknown} kept in the canonical form")
    if engine is None:
        notes.append(f"regime {raw!r} names no engine (megatron, ddp, fsdp2, ...)")
        return None, notes
    parallel = tuple(sorted((k, v) for k, v in degrees.items() if not (k != "sp" and v == 1)))
    # An unstated compile mode is unknown, not "none": a regime string that does not say is no evidence of eager.
    regime = LaunchRegime(engine=engine, compile_mode=compile_mode or "unknown", parallel=parallel)
    if unknown:
        regime = LaunchRegime(engine, regime.compile_mode, parallel + tuple(("?" + w, 0) for w in sorted(unknown)))
    return regime, notes


def resolve_identity(claim: IdentityClaim, registry: Registry) -> Identity:
    host, host_notes = resolve_host(claim, registry)
    preset, features, preset_notes = resolve_preset(claim.preset, registry)
    regime, regime_notes = parse_regime(claim.regime, registry)
    canonical_regime = regime.canonical if regime else None
    if regime and claim.regime and canonical_regime != claim.regime.strip():
        regime_notes.append(f"regime {claim.regime.strip()!r} -> {canonical_regime!r}")
    return Identity(
        lane=Lane(host_lineage=host, preset_family=preset, launch_regime=canonical_regime),
        raw=replace(claim.raw(), host_lineage=claim.host_lineage or claim.hostname),
        hostname=claim.hostname,
        resolution=tuple(host_notes + preset_notes + regime_notes),
        regime=regime,
        features=tuple(sorted(features.items())),
    )


# ---- stored identity: the receipts columns an identity fills, and how a retag rewrites them -------------
def _dumps(value: Any) -> str:
    # The store's JSON spelling (store/rows.py): sorted keys, no spaces, so equal values are equal text.
    return json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))


def identity_columns(identity: Identity) -> dict[str, Any]:
    """The receipts columns one resolved identity fills (hostname aside: that is evidence, not a claim)."""
    regime = identity.regime
    return {
        **{column: value for f in FIELDS
           for column, value in ((RAW[f], getattr(identity.raw, f)), (f, getattr(identity.lane, f)))},
        "engine": regime.engine if regime else None, "compile_mode": regime.compile_mode if regime else None,
        "parallel_json": _dumps(dict(regime.parallel) if regime else {}),
        "identity_complete": identity.complete, "lane_key": identity.lane.key,
        "resolution_json": _dumps([n for n in identity.resolution if not is_registry_miss(n)]),
    }


# Notes saying a value was not found in the registry. They are warnings for the moment of ingest or retag
# (with a "did you mean"), not part of the stored resolution that `show` and `compare` print every time.
_MISS_MARKERS = ("is not in the registry", "matches no host lineage", "unrecognised words", "names no engine")


def is_registry_miss(note: str) -> bool:
    return any(m in note for m in _MISS_MARKERS)


@dataclass(frozen=True)
class UnknownValue:
    """A claimed identity value the registry does not know, and the nearest entry it does."""

    field: str                 # 'host_lineage' | 'preset' | 'regime'
    value: str
    problem: str               # what is wrong, e.g. "is not in the registry"
    suggestion: str | None     # the nearest registry name (or regime word), when one is close

    def __str__(self) -> str:
        hint = f"; did you mean {self.suggestion!r}?" if self.suggestion else "; no registry entry is close"
        return f"{self.field.replace('_', ' ')} {self.value!r} {self.problem}{hint}"


def _nearest(value: str, names: dict[str, str]) -> str | None:
    """names: spelling (lower-case) -> canonical name. difflib's ratio, the usual 0.6 cut-off."""
    hit = difflib.get_close_matches(value.lower(), list(names), n=1, cutoff=0.6)
    return names[hit[0]] if hit else None


def unknown_values(claim: IdentityClaim, registry: Registry) -> list[UnknownValue]:
    """Every value in `claim` (host lineage, preset, regime) that the registry cannot resolve.

    A hostname that matches no lineage is not listed: it claims nothing, it just leaves the lineage open."""
    out: list[UnknownValue] = []
    if claim.host_lineage and claim.host_lineage.strip():
        _, notes = resolve_host(IdentityClaim(host_lineage=claim.host_lineage), registry)
        if any(is_registry_miss(n) for n in notes):
            names = {s.lower(): h.name for h in registry.hosts.values() for s in (h.name, *h.aliases)}
            out.append(UnknownValue("host_lineage", claim.host_lineage.strip(), "is not in the registry",
                                    _nearest(claim.host_lineage.strip(), names)))
    if claim.preset and claim.preset.strip():
        _, _, notes = resolve_preset(claim.preset, registry)
        if any(is_registry_miss(n) for n in notes):
            names = {s.lower(): p.name for p in registry.presets.values() for s in (p.name, *p.aliases)}
            out.append(UnknownValue("preset", claim.preset.strip(), "is not in the registry",
                                    _nearest(claim.preset.strip(), names)))
    if claim.regime and claim.regime.strip():
        out += _regime_problems(claim.regime.strip(), registry)
    return out


def _regime_problems(raw: str, registry: Registry) -> list[UnknownValue]:
    regime, _ = parse_regime(raw, registry)
    vocabulary = {w: w for spellings in (*registry.engines.values(), *registry.compile_modes.values(),
                                         *registry.degrees.values(), list(registry.engines), list(registry.degrees))
                  for s in spellings for w in _norm_words(s)}
    out = []
    words = _unrecognised_words(raw, registry)
    fixes = {w: _nearest(w, vocabulary) for w in words}
    # A word that is its own nearest entry ('no' of 'no-compil') is only stranded by a neighbour's typo:
    # name the typo, not it, and suggest the whole regime with every typo corrected (what the user would type).
    typos = [w for w in words if (fixes[w] or "").lower() != w.lower()]
    fixed = raw
    for word in typos:
        fix = fixes[word]
        if fix:
            fixed = re.sub(rf"(?i)(?<![a-z0-9]){re.escape(word)}(?![a-z0-9])", fix, fixed, count=1)
    for word in typos or words:
        own = fixes[word] if (fixes[word] or "").lower() != word.lower() else None
        out.append(UnknownValue("regime", raw, f"has the unrecognised word {word!r}", fixed if fixed != raw else own))
    if regime is None:
        engines = {s.lower(): e for e, spellings in registry.engines.items() for s in (e, *spellings)}
        guess = next((_nearest(w, engines) for w in _norm_words(raw) if _nearest(w, engines)), None)
        out.append(UnknownValue("regime", raw, "names no engine (" + ", ".join(sorted(registry.engines)) + ")", guess))
    return out


def _unrecognised_words(raw: str, registry: Registry) -> list[str]:
    regime, _ = parse_regime(raw, registry)
    if regime is None:
        return []
    return [k[1:] for k, _ in regime.parallel if k.startswith("?")]


@dataclass(frozen=True)
class IdentityChange:
    """What `receipts retag` asks for; None leaves a field as stored."""

    claim: IdentityClaim = IdentityClaim()
    run_name: str | None = None
    add_tags: tuple[str, ...] = ()
    remove_tags: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not any((*self.claim.options().values(), self.run_name, self.add_tags, self.remove_tags))


# Which resolution notes belong to which part of the identity (resolve_host / resolve_preset / parse_regime
# start their notes with these words), so a retag replaces only the notes of what it changes.
_NOTE_PREFIX = {"host": ("host lineage", "hostname"), "preset": ("preset",), "regime": ("regime",)}


def retagged_columns(stored: dict[str, Any], change: IdentityChange, registry: Registry) -> dict[str, Any]:
    """The identity columns of a stored receipt after `change`: each named part re-resolved from its new raw
    value through the registry, the other parts left exactly as stored (a lineage matched from the
    hostname stays matched). Returns only the columns whose value changes."""
    columns = [c for f in FIELDS for c in (RAW[f], f)] + [c for f in FIELDS for c in RESOLVED_WITH.get(f, ())]
    new = {k: stored[k] for k in (*columns, "features_json", "run_name", "tags_json")}
    old_notes = list(json.loads(stored.get("resolution_json") or "[]"))
    notes: list[str] = []           # the notes of the parts re-resolved now
    replaced: list[str] = []
    claim = change.claim
    if claim.host_lineage:
        lineage, host_notes = resolve_host(IdentityClaim(host_lineage=claim.host_lineage), registry)
        new.update(raw_host_lineage=claim.host_lineage.strip(), host_lineage=lineage)
        replaced.append("host")
        notes += host_notes
    if claim.preset:
        old_features = dict(registry.presets[stored["preset_family"]].features) \
            if stored.get("preset_family") in registry.presets else {}
        family, features, preset_notes = resolve_preset(claim.preset, registry)
        # Features equal to the old preset's bundle came from it; the rest is evidence from the log and stays.
        kept = {k: v for k, v in json.loads(stored.get("features_json") or "{}").items() if old_features.get(k, object()) != v}
        new.update(raw_preset=claim.preset.strip(), preset_family=family, features_json=_dumps({**features, **kept}))
        replaced.append("preset")
        notes += preset_notes
    if claim.regime:
        regime, regime_notes = parse_regime(claim.regime, registry)
        canonical = regime.canonical if regime else None
        if regime and canonical != claim.regime.strip():
            regime_notes.append(f"regime {claim.regime.strip()!r} -> {canonical!r}")
        new.update(raw_regime=claim.regime.strip(), launch_regime=canonical,
                   engine=regime.engine if regime else None, compile_mode=regime.compile_mode if regime else None,
                   parallel_json=_dumps(dict(regime.parallel) if regime else {}))
        replaced.append("regime")
        notes += regime_notes
    prefixes = tuple(p for part in replaced for p in _NOTE_PREFIX[part])
    notes = [n for n in old_notes if not (prefixes and n.startswith(prefixes))] + notes
    notes = [n for n in notes if not is_registry_miss(n)]
    if change.run_name:
        new["run_name"] = change.run_name.strip()
    if change.add_tags or change.remove_tags:
        tags = (set(json.loads(stored.get("tags_json") or "[]")) | set(change.add_tags)) - set(change.remove_tags)
        new["tags_json"] = _dumps(sorted(tags))
    lane = Lane.of(new)
    new["identity_complete"], new["lane_key"] = lane.complete, lane.key
    new["resolution_json"] = _dumps(notes)
    return {k: v for k, v in new.items() if v != stored.get(k)}
