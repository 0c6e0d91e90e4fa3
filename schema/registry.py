"""Registries as data: the shipped `registry.toml`, merged with the user's `receipts.toml`.

Loaded once per command and passed explicitly; no module-level state.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from receipts.errors import InputError, UnsupportedVersion

REGISTRY_VERSION = 1
USER_REGISTRY_NAME = "receipts.toml"


@dataclass(frozen=True)
class HostLineage:
    name: str
    patterns: tuple[str, ...]
    aliases: tuple[str, ...]
    description: str = ""


@dataclass(frozen=True)
class Preset:
    name: str
    aliases: tuple[str, ...]
    features: dict[str, Any]


@dataclass(frozen=True)
class Registry:
    hosts: dict[str, HostLineage]
    presets: dict[str, Preset]
    engines: dict[str, list[str]]
    compile_modes: dict[str, list[str]]
    degrees: dict[str, list[str]]
    sources: tuple[str, ...]  # which files were merged, for `receipts show --json`
    # `strict = true` in receipts.toml / --registry (or `--strict`): identity values the registry does not
    # know are refused at ingest and retag instead of being kept with a "did you mean" warning.
    strict: bool = False


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(path, f"cannot read registry: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise InputError(path, f"not valid TOML: {exc}", line=getattr(exc, "lineno", None)) from exc
    version = data.get("version", REGISTRY_VERSION)
    if version != REGISTRY_VERSION:
        raise UnsupportedVersion(f"registry {path}", str(version), str(REGISTRY_VERSION))
    return data


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def load_registry(extra: Path | None = None, cwd: Path | None = None) -> Registry:
    """Shipped registry, then ./receipts.toml if present, then `extra` (--registry) if given."""
    shipped = resources.files("receipts.schema").joinpath("registry.toml")
    data = tomllib.loads(shipped.read_text(encoding="utf-8"))
    sources = ["<shipped>"]
    user = (cwd or Path.cwd()) / USER_REGISTRY_NAME
    for path in (user if user.is_file() else None, extra):
        if path is None:
            continue
        data = _merge(data, _read_toml(Path(path)))
        sources.append(str(path))

    hosts = {
        name: HostLineage(name, tuple(h.get("patterns", ())), tuple(h.get("aliases", ())), h.get("description", ""))
        for name, h in data.get("hosts", {}).items()
    }
    presets = {
        name: Preset(name, tuple(p.get("aliases", ())), dict(p.get("features", {})))
        for name, p in data.get("presets", {}).items()
    }
    regimes = data.get("regimes", {})
    return Registry(
        hosts=hosts,
        presets=presets,
        engines=dict(regimes.get("engines", {})),
        compile_modes=dict(regimes.get("compile", {})),
        degrees=dict(regimes.get("degrees", {})),
        sources=tuple(sources),
        strict=_strict(data, sources[-1]),
    )


def _strict(data: dict[str, Any], where: str) -> bool:
    value = data.get("strict", False)
    if not isinstance(value, bool):
        raise InputError(where, f"`strict` must be true or false, not {value!r}")
    return value
