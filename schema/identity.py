"""Identity canonicalisation: (host lineage, preset family, launch regime).

"Anything missing one of those three is a rumor. Anything carrying all three is a comparison."
Raw values are kept beside canonical ones, and every resolution step leaves a note.
"""

from __future__ import annotations

import fnmatch
import re

from receipts.schema.model import Identity, IdentityClaim, LaunchRegime
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
    regime = LaunchRegime(engine=engine, compile_mode=compile_mode or "none", parallel=parallel)
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
        host_lineage=host,
        preset_family=preset,
        launch_regime=canonical_regime,
        raw_host_lineage=claim.host_lineage or claim.hostname,
        raw_preset=claim.preset,
        raw_regime=claim.regime,
        hostname=claim.hostname,
        resolution=tuple(host_notes + preset_notes + regime_notes),
        regime=regime,
        features=tuple(sorted(features.items())),
    )
