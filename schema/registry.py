"""Registries as data: the shipped `registry.toml`, merged with the user's `receipts.toml`.

Loaded once per command and passed explicitly; no module-level state.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from receipts.errors import InputError, UnsupportedVersion
from receipts.schema import toml_file
from receipts.schema.secrets import EnvRules, load_env_rules
from receipts.schema.toml_file import read_toml

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
    # The env overlay and secret rules: schema/env.toml extended by the [env] / [secrets] tables of the
    # same user files, so a user's secret patterns reach every writer that is handed this registry.
    env_rules: EnvRules = field(default_factory=load_env_rules)
    # `[logs] step_line`: a user's regular expression for a log no built-in format reads (ingest/declared.py)
    step_line: str | None = None


# The named groups a declared step line may have (ingest/declared.py says what each holds); step is required.
STEP_LINE_GROUPS = ("step", "step_ms", "loss", "tokens_per_s", "memory")


def compile_step_line(pattern: str):
    """A declared step line compiled by RE2 (the `google-re2` binding): a user's pattern runs over every line of
    a log, and RE2 matches in time linear in the line whatever the pattern (`(a+)+$` cannot backtrack), as
    polars' engine does. re2.error where RE2 cannot read it (backreferences, lookaround)."""
    import re2

    options = re2.Options()
    options.log_errors = False  # the refusal is ours to word, not a line of RE2's own on stderr
    return re2.compile(pattern, options)


def check_step_line(pattern: object, where: str | Path) -> str:
    """A declared step line, checked: a non-empty string, a regular expression RE2 and polars both read
    (linear-time engines: the pattern is untrusted input), with a `step` group and no group outside
    STEP_LINE_GROUPS. `where`: the file that declares it."""
    import re

    import polars as pl
    import re2

    key = "[logs] step_line"
    if not isinstance(pattern, str) or not pattern.strip():
        raise InputError(where, f"{key} must be a regular expression (a string), not {pattern!r}")
    try:
        re.compile(pattern)  # compiling matches nothing: it cannot hang, and its words for a typo are the clearest
        compiled = compile_step_line(pattern)
        pl.Series([""], dtype=pl.Utf8).str.extract_groups(pattern)
    except re.error as exc:
        raise InputError(where, f"{key} {pattern!r} is not a valid regular expression: {exc}") from None
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise InputError(where, f"{key} {pattern!r} cannot be used: {reason} (step lines are read by a "
                                "linear-time engine, RE2: no backreferences or lookaround)") from None
    except pl.exceptions.PolarsError as exc:
        raise InputError(where, f"{key} {pattern!r} is not a valid regular expression: "
                                f"{str(exc).strip().splitlines()[0]}") from None
    names = set(compiled.groupindex)
    if "step" not in names:
        raise InputError(where, f"{key} {pattern!r} has no (?P<step>...) group; expected named groups among "
                                f"{', '.join(STEP_LINE_GROUPS)}, step required")
    unknown = sorted(names - set(STEP_LINE_GROUPS))
    if unknown:
        raise InputError(where, f"{key} {pattern!r} has the group(s) {', '.join(unknown)}; expected named groups "
                                f"among {', '.join(STEP_LINE_GROUPS)}")
    return pattern


def _read_toml(path: Path) -> dict[str, Any]:
    data = read_toml(path, "registry")
    version = data.get("version", REGISTRY_VERSION)
    if version != REGISTRY_VERSION:
        raise UnsupportedVersion(f"registry {path}", str(version)[:40], str(REGISTRY_VERSION))
    _check_types(data, path)
    return data


def _check_types(data: dict[str, Any], path: Path) -> None:
    """Every registry value a user file sets has the type the shipped file gives it (checked per file,
    before merging, so the error names the file that is wrong)."""
    for name, host in toml_file.table(data.get("hosts"), path, "hosts").items():
        host = toml_file.table(host, path, f"hosts.{name}")
        toml_file.strings(host.get("patterns"), path, f"hosts.{name}.patterns")
        toml_file.strings(host.get("aliases"), path, f"hosts.{name}.aliases")
        toml_file.text(host.get("description"), path, f"hosts.{name}.description")
    for name, preset in toml_file.table(data.get("presets"), path, "presets").items():
        preset = toml_file.table(preset, path, f"presets.{name}")
        toml_file.strings(preset.get("aliases"), path, f"presets.{name}.aliases")
        toml_file.table(preset.get("features"), path, f"presets.{name}.features")
    logs = toml_file.table(data.get("logs"), path, "logs")
    if "step_line" in logs:
        check_step_line(logs["step_line"], path)
    regimes = toml_file.table(data.get("regimes"), path, "regimes")
    for section in ("engines", "compile", "degrees"):
        for word, spellings in toml_file.table(regimes.get(section), path, f"regimes.{section}").items():
            toml_file.strings(spellings, path, f"regimes.{section}.{word}")


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
    documents: list[tuple[Path, dict[str, Any]]] = []
    user = (cwd or Path.cwd()) / USER_REGISTRY_NAME
    for path in (user if user.is_file() else None, extra):
        if path is None:
            continue
        documents.append((Path(path), _read_toml(Path(path))))
        data = _merge(data, documents[-1][1])
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
        env_rules=load_env_rules(documents=documents),
        step_line=data.get("logs", {}).get("step_line"),
    )


def _strict(data: dict[str, Any], where: str) -> bool:
    value = data.get("strict", False)
    if not isinstance(value, bool):
        raise InputError(where, f"`strict` must be true or false, not {value!r}")
    return value
