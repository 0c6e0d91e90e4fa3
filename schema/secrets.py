"""The env overlay's rules (schema/env.toml) and the one redaction function every writer uses.

DESIGN rule 6: secrets in the environment are redacted before anything is written. Everything
that leaves a process towards a log or a store (the RECEIPT header, the child's teed output, the
command line) goes through `redact()`; nothing else decides what a secret is.

Redaction is by four signals, any of which is enough:
- the variable NAME contains a secret word (TOKEN, KEY, ...): its value is replaced;
- the VALUE matches a known shape (ghp_, hf_, sk-, AKIA, JWT, PEM header, credentials in a URL's
  userinfo, `password=`, `mysql -u U -p PW`, ...); a shape with a group named `secret` replaces only
  that group (`redis://:<redacted>@host` keeps the host);
- a command-line flag whose last word is a secret word (`--password=PW`, `--hf-token PW`,
  `--db-password PW`), wherever it appears, in any value or line of text;
- the exact value of any secret-named variable, wherever it shows up later in free text
  (a child echoing its own token).

The rules are schema/env.toml extended by the [env] / [secrets] tables of ./receipts.toml and
--registry: schema.registry.load_registry reads those files once and carries the result
(Registry.env_rules) to every writer.
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
from receipts.schema import toml_file
from receipts.schema.toml_file import read_toml

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
    secret_values: tuple[re.Pattern, ...]  # value shapes (a group named `secret` = the part to replace)
    allow_names: frozenset[str]            # names that contain a secret word but are known harmless
    secret_flag: re.Pattern | None = None  # `--x-password=PW` / `--token PW`: built from secret_names


_LISTS = {"env": ("knobs", "prefixes"), "secrets": ("name_patterns", "value_patterns", "allow_names")}


def load_env_rules(extra: Path | None = None, *, documents: Iterable[tuple[Path, dict]] = ()) -> EnvRules:
    """Shipped schema/env.toml, extended (lists appended, tables merged) by the [env] / [secrets] tables of
    each user document (path, parsed TOML) in order, then of the file `extra`. Wrong types and invalid
    regexes are one InputError naming the file and key."""
    text = resources.files("receipts.schema").joinpath("env.toml").read_text(encoding="utf-8")
    data = tomllib.loads(text)
    if data.get("version", ENV_RULES_VERSION) != ENV_RULES_VERSION:
        raise UnsupportedVersion("env rules schema/env.toml", str(data.get("version")), str(ENV_RULES_VERSION))
    documents = list(documents) + ([(Path(extra), read_toml(Path(extra), "env rules"))] if extra is not None else [])
    for path, user in documents:
        for table, keys in _LISTS.items():
            section = toml_file.table(user.get(table), path, table)
            base = data.setdefault(table, {})
            for key in keys:
                base[key] = list(base.get(key, [])) + list(toml_file.strings(section.get(key), path, f"{table}.{key}"))
            if table == "env":
                aliases = toml_file.table(section.get("aliases"), path, "env.aliases")
                for name, target in aliases.items():
                    toml_file.text(target, path, f"env.aliases.{name}")
                base["aliases"] = {**base.get("aliases", {}), **aliases}
        for i, pattern in enumerate(toml_file.strings(toml_file.table(user.get("secrets"), path, "secrets")
                                                      .get("value_patterns"), path, "secrets.value_patterns")):
            try:
                re.compile(pattern)
            except (re.error, RecursionError, OverflowError) as exc:
                raise InputError(path, f"key secrets.value_patterns[{i}] is not a valid regex ({exc})") from exc
    env, sec = data.get("env", {}), data.get("secrets", {})
    names = tuple(dict.fromkeys(w.upper() for w in sec.get("name_patterns", ()) if w))
    return EnvRules(
        knobs=tuple(dict.fromkeys(env.get("knobs", ()))),
        prefixes=tuple(env.get("prefixes", ())),
        aliases=dict(env.get("aliases", {})),
        secret_names=names,
        secret_values=tuple(re.compile(p) for p in sec.get("value_patterns", ())),
        allow_names=frozenset(n.upper() for n in sec.get("allow_names", ())),
        secret_flag=_flag_pattern(names),
    )


def _flag_pattern(words: tuple[str, ...]) -> re.Pattern | None:
    """A flag whose last word part is a secret word, then its value after '=' or whitespace:
    `--password=PW`, `--hf-token PW`, `-db_password 'PW'`. `--tokenizer x` and `--max-tokens 5` are not
    (the word must end the flag name); a following flag (`--token --next`) is not taken as the value."""
    if not words:
        return None
    word = "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
    return re.compile(r"(?i)(?<![\w-])--?(?:[a-z0-9]+[-_.])*(?:" + word + r")"
                      r"(?:=|\s+(?=[^\s-]))(?P<secret>\"[^\"]*\"|'[^']*'|[^\s\"']+)")


def is_secret_name(name: str, *, rules: EnvRules) -> bool:
    upper = name.upper()
    return upper not in rules.allow_names and any(word in upper for word in rules.secret_names)


def secret_values_in(environ: Mapping[str, str], *, rules: EnvRules) -> tuple[str, ...]:
    """Exact values to hunt for in free text: every secret-named variable's value, longest first
    (so a value that contains another is replaced whole)."""
    found = {v for k, v in environ.items() if v and len(v) >= _MIN_EXACT_LEN and is_secret_name(k, rules=rules)}
    for value in environ.values():
        for pattern in _value_patterns(rules):
            for m in pattern.finditer(value or ""):
                # the secret part of a shape with a `secret` group (not the whole URL), else the whole value
                part = m.group("secret") if "secret" in pattern.groupindex else value
                if not part:
                    continue
                part = part.strip("\"'")
                # URL userinfo 'user:password': the password alone is what a child would echo
                for piece in {part, part.split(":", 1)[-1]}:
                    if len(piece) >= _MIN_EXACT_LEN or piece == value:
                        found.add(piece)
    return tuple(sorted(found - {""}, key=len, reverse=True))


def _value_patterns(rules: EnvRules) -> tuple[re.Pattern, ...]:
    return rules.secret_values + ((rules.secret_flag,) if rules.secret_flag is not None else ())


def _replace(pattern: re.Pattern, text: str) -> str:
    if "secret" not in pattern.groupindex:
        return pattern.sub(REDACTED, text)

    def only_the_secret(m: re.Match) -> str:
        if m.start("secret") < 0:
            return m.group(0)
        return text[m.start():m.start("secret")] + REDACTED + text[m.end("secret"):m.end()]
    return pattern.sub(only_the_secret, text)


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
        for pattern in _value_patterns(rules):
            obj = _replace(pattern, obj)
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
