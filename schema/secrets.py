"""The env overlay's rules (schema/env.toml) and the one redaction function every writer uses.

DESIGN rule 6: secrets in the environment are redacted before anything is written. Everything
that leaves a process towards a log or a store (the RECEIPT header, the child's teed output, the
command line) goes through `redact()`; nothing else decides what a secret is.

Redaction is by three signals, any of which is enough:
- the variable NAME contains a secret word (TOKEN, KEY, ...): its value is replaced;
- the VALUE matches a known token shape (ghp_, hf_, sk-, AKIA, JWT, PEM header, ...);
- the exact value of any secret-named variable, wherever it shows up later in free text
  (a child echoing its own token, a `--token=...` on the command line).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from receipts.errors import InputError, UnsupportedVersion

ENV_RULES_VERSION = 1
REDACTED = "<redacted>"
# Values shorter than this are not hunted for in free text: "1" or "true" under a KEY-named
# variable would otherwise blank out half a log. Shape patterns still catch real tokens.
_MIN_EXACT_LEN = 6


@dataclass(frozen=True)
class EnvRules:
    knobs: tuple[str, ...]                 # always recorded, null when unset
    prefixes: tuple[str, ...]              # recorded when set
    aliases: dict[str, str]                # alias -> canonical (PYTORCH_CUDA_ALLOC_CONF -> PYTORCH_ALLOC_CONF)
    secret_names: tuple[str, ...]          # upper-case words; a name containing one is secret
    secret_values: tuple[re.Pattern, ...]  # token shapes
    allow_names: frozenset[str]            # names that contain a secret word but are known harmless


def load_env_rules(extra: Path | None = None) -> EnvRules:
    """Shipped schema/env.toml, extended (lists appended) by the [env]/[secrets] tables of `extra`."""
    text = resources.files("receipts.schema").joinpath("env.toml").read_text(encoding="utf-8")
    data = tomllib.loads(text)
    if extra is not None:
        try:
            user = tomllib.loads(Path(extra).read_text(encoding="utf-8"))
        except OSError as exc:
            raise InputError(extra, f"cannot read: {exc.strerror}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise InputError(extra, f"not valid TOML: {exc}") from exc
        for table in ("env", "secrets"):
            for key, value in (user.get(table) or {}).items():
                base = data.setdefault(table, {})
                if isinstance(value, list):
                    base[key] = list(base.get(key, [])) + value
                elif isinstance(value, dict):
                    base[key] = {**base.get(key, {}), **value}
    if data.get("version", ENV_RULES_VERSION) != ENV_RULES_VERSION:
        raise UnsupportedVersion("env rules schema/env.toml", str(data.get("version")), str(ENV_RULES_VERSION))
    env, sec = data.get("env", {}), data.get("secrets", {})
    return EnvRules(
        knobs=tuple(dict.fromkeys(env.get("knobs", ()))),
        prefixes=tuple(env.get("prefixes", ())),
        aliases=dict(env.get("aliases", {})),
        secret_names=tuple(w.upper() for w in sec.get("name_patterns", ())),
        secret_values=tuple(re.compile(p) for p in sec.get("value_patterns", ())),
        allow_names=frozenset(n.upper() for n in sec.get("allow_names", ())),
    )


def is_secret_name(name: str, *, rules: EnvRules) -> bool:
    upper = name.upper()
    return upper not in rules.allow_names and any(word in upper for word in rules.secret_names)


def secret_values_in(environ: Mapping[str, str], *, rules: EnvRules) -> tuple[str, ...]:
    """Exact values to hunt for in free text: every secret-named variable's value, longest first
    (so a value that contains another is replaced whole)."""
    found = {v for k, v in environ.items() if v and len(v) >= _MIN_EXACT_LEN and is_secret_name(k, rules=rules)}
    found |= {v for v in environ.values() if v and any(p.search(v) for p in rules.secret_values)}
    return tuple(sorted(found, key=len, reverse=True))


def redact(obj: Any, *, rules: EnvRules, known_values: Iterable[str] = ()) -> Any:
    """Return `obj` with secrets replaced by '<redacted>'. Works on str, and recursively on
    dict / list / tuple (a dict entry whose KEY is a secret name loses its value whole; null
    values stay null so 'unset' remains visible)."""
    known = tuple(known_values)
    return _redact(obj, rules, known)


def _redact(obj: Any, rules: EnvRules, known: tuple[str, ...]) -> Any:
    if isinstance(obj, str):
        for value in known:
            if value in obj:
                obj = obj.replace(value, REDACTED)
        for pattern in rules.secret_values:
            obj = pattern.sub(REDACTED, obj)
        return obj
    if isinstance(obj, Mapping):
        out = {}
        for key, value in obj.items():
            if isinstance(key, str) and value is not None and isinstance(value, (str, int, float)) \
                    and is_secret_name(key, rules=rules):
                out[key] = REDACTED
            else:
                out[key] = _redact(value, rules, known)
        return out
    if isinstance(obj, (list, tuple)):
        return type(obj)(_redact(v, rules, known) for v in obj)
    return obj


def env_overlay(environ: Mapping[str, str], *, rules: EnvRules) -> dict[str, str | None]:
    """The watched knobs (None = explicitly unset) plus every set variable under a watched prefix.
    Values are NOT yet redacted: pass the result through `redact()` before writing it."""
    overlay: dict[str, str | None] = {name: environ.get(name) for name in rules.knobs}
    for name, value in environ.items():
        if name.startswith(rules.prefixes):
            overlay[name] = value
    return dict(sorted(overlay.items()))
