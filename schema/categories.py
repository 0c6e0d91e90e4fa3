"""Kernel-name -> anatomy category, from rules kept as data (kernel_categories.toml).

Each rule names a category and the category's kind: communication, compute or copy. The kind, never the
category's name, says how the step's GPU span is partitioned (compute_only, comm_hidden, exposed_comm,
memcpy_only, idle: ingest/intervals.py) and which kernels are collectives to match across ranks
(analysis/stragglers.py), so a user's category of communication kernels counts as communication whatever it
is called. An anatomy records the rules it was made under (`CategoryRules.text`, `.sha256`): the digest tells two
runs categorised alike from two that were not, and their text lets explain re-categorise a run's kernels.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from receipts.errors import InputError, UnsupportedVersion
# A category's kind read from kept rules without this module's TOML (explain's path), and the names it needs
from receipts.schema.category_kinds import BUILT_IN_KINDS as BUILT_IN_KINDS, KINDS as KINDS
from receipts.schema.category_kinds import MEMORY_CATEGORIES as MEMORY_CATEGORIES, RULES_VERSION as RULES_VERSION
from receipts.schema.category_kinds import kinds_of
from receipts.schema.kernel_names import canonical_kernel_name
# The parts a step is split into, a light module of their own (what explain needs of the categories), kept here too
from receipts.schema.step_parts import BETWEEN_STEPS as BETWEEN_STEPS, DECOMPOSITION as DECOMPOSITION
from receipts.schema.step_parts import HOST_GAP as HOST_GAP, IDLE_LONG as IDLE_LONG, LONG_GAP_NS as LONG_GAP_NS
from receipts.schema.step_parts import PERIOD_PARTS as PERIOD_PARTS, STEP_PARTS as STEP_PARTS
from receipts.schema.toml_file import read_toml

if TYPE_CHECKING:  # polars and NumPy load where names are classified in bulk (ingest), not where rules are read
    import polars as pl

_CATEGORY_NAME = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
MAX_CATEGORIES = 255  # an nsys export's activities keep their category code in one byte (ingest/nsys_activity.py)


def _shipped_toml() -> dict:
    return tomllib.loads(resources.files("receipts.schema").joinpath("kernel_categories.toml").read_text())


def _shipped_kinds() -> dict[str, str]:
    out: dict[str, str] = {}
    for rule in _shipped_toml().get("rules", []):
        out.setdefault(rule["category"], rule["kind"])
    return out


# The shipped rules' categories and kinds: what `anatomy --json` rows carry unless a user's rules add a category.
# An anatomy's own kinds come from the rules it was made under (CategoryRules.kinds), never from these names.
_SHIPPED_KINDS = _shipped_kinds()
SHIPPED_KINDS: Mapping[str, str] = kinds_of(_SHIPPED_KINDS.items())  # the built-in categories' too
KERNEL_CATEGORIES = (*_SHIPPED_KINDS, *(c for c in ("cuda_graph", "other") if c not in _SHIPPED_KINDS))
COMM_CATEGORIES = tuple(c for c, kind in _SHIPPED_KINDS.items() if kind == "communication")
COMPUTE_CATEGORIES = tuple(c for c in KERNEL_CATEGORIES if c not in COMM_CATEGORIES)
# Categories that are not kernels (a kernel count leaves them out): copies, and a graph replay's one activity.
NOT_KERNELS = (*MEMORY_CATEGORIES, "cuda_graph")


# Regex syntax that Python's `re` and polars' (Rust) engine read differently or only one of them reads: a
# rule containing any of it is matched with `re` alone in classify_many.
_NOT_PORTABLE = re.compile(r"\[:|&&|--|~~|\{,|\\[pPzZ]|\(\?(?!:)")


@dataclass(frozen=True)
class CategoryRules:
    """The effective rules, in the order they are tried: (category, kind, pattern) each."""

    rules: tuple[tuple[str, str, re.Pattern[str]], ...]
    # Each distinct name is classified once per loaded rule set: the ranks of a run share their kernel names,
    # and the rules' alternations cost ~0.3 ms on a 300-character templated name.
    _seen: dict[str, str] = field(default_factory=dict, init=False, compare=False, repr=False)

    @functools.cached_property
    def kinds(self) -> Mapping[str, str]:
        """Every category these rules can give an activity -> its kind (the first rule naming it decides)."""
        return kinds_of((category, kind) for category, kind, _ in self.rules)

    def of_kind(self, kind: str) -> tuple[str, ...]:
        return tuple(sorted(c for c, k in self.kinds.items() if k == kind))

    @functools.cached_property
    def enum(self) -> pl.Enum:
        """Every category an activity can get under these rules, as one Enum: a small integer per activity that the
        interval arithmetic groups by, where text would be ranked first."""
        import polars as pl

        return pl.Enum(sorted(self.kinds))

    @property
    def version(self) -> int:
        return RULES_VERSION

    @functools.cached_property
    def text(self) -> str:
        """The rules as canonical JSON: what an anatomy keeps of the rules it was made under."""
        return json.dumps({"version": RULES_VERSION, "rules": [[c, k, p.pattern] for c, k, p in self.rules]},
                          separators=(",", ":"))

    @functools.cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    @classmethod
    def from_text(cls, text: str) -> CategoryRules:
        """The rules an anatomy was made under, from their kept text (`text`)."""
        data = json.loads(text)
        if data.get("version") != RULES_VERSION:
            raise UnsupportedVersion("kept kernel-category rules", str(data.get("version")), str(RULES_VERSION))
        return cls(tuple((c, k, re.compile(p, re.IGNORECASE)) for c, k, p in data["rules"]))

    def classify(self, kernel_name: str) -> str:
        """The first rule that matches the name as the profiler wrote it or in its canonical spelling
        (schema/kernel_names.py): a rule written from a Kineto trace (`elementwise_kernel<128`) matches the same
        kernel in an nsys export (`elementwise_kernel<(int)128`), and the other way round."""
        category = self._seen.get(kernel_name)
        if category is None:
            canon = canonical_kernel_name(kernel_name)
            category = next((c for c, _, pattern in self.rules if pattern.search(kernel_name) or pattern.search(canon)),
                            "other")
            self._seen[kernel_name] = category
        return category

    def classify_many(self, names: list[str]) -> list[str]:
        """classify() over many names at once, with the same answers: every rule polars' regex engine reads is run
        over the printable-ASCII names in one select (one vectorised pass per rule, 10-20x Python's `re` on long
        templated names, and one query however many rules), and the first rule that matches a name wins, as in
        classify(). On such names the two engines agree on the syntax _NOT_PORTABLE does not name; other names,
        and other rules (look-around, back-references, POSIX or Unicode classes, class set operations, \\Z), go
        through `re` one by one as classify() does."""
        import numpy as np
        import polars as pl

        out: list[str | None] = [self._seen.get(n) for n in names]
        todo = [i for i, n in enumerate(names) if out[i] is None and n.isascii() and n.isprintable()]
        if todo:
            names_left = [names[i] for i in todo]
            canon_left = [canonical_kernel_name(n) for n in names_left]
            vectorised = {i: "(?i)" + pattern.pattern for i, (_, _, pattern) in enumerate(self.rules)  # re.IGNORECASE
                          if _NOT_PORTABLE.search(pattern.pattern) is None and _polars_reads("(?i)" + pattern.pattern)}
            hits: dict[int, np.ndarray] = {}
            if vectorised:
                found = pl.DataFrame({"name": names_left, "canon": canon_left}).select(
                    (pl.col("name").str.contains(p) | pl.col("canon").str.contains(p)).alias(str(i))
                    for i, p in vectorised.items())
                hits = {int(c): found[c].to_numpy() for c in found.columns}
            left = np.ones(len(todo), bool)
            for i, (category, _, pattern) in enumerate(self.rules):
                if i in hits:
                    hit = hits[i] & left
                else:
                    hit = np.array([bool(ok and (pattern.search(n) or pattern.search(cn)))
                                    for n, cn, ok in zip(names_left, canon_left, left)], bool)
                for j in np.flatnonzero(hit):
                    out[todo[j]] = category
                left &= ~hit
                if not left.any():
                    break
            for j in np.flatnonzero(left):
                out[todo[j]] = "other"
        result = [c if c is not None else self.classify(n) for n, c in zip(names, out)]
        self._seen.update(zip(names, result))
        return result


@functools.lru_cache(maxsize=1024)
def _polars_reads(pattern: str) -> bool:
    """Whether polars' regex engine compiles `pattern` (asked once per pattern and process)."""
    import polars as pl

    try:
        pl.Series(["x"]).str.contains(pattern)
    except pl.exceptions.PolarsError:
        return False
    return True


def _rules_from(data: dict, path: str, known: Mapping[str, str]) -> list[tuple[str, str, re.Pattern[str]]]:
    """The [[rules]] of one file. A rule's `kind` may be left out for a category `known` already (the shipped
    rules', or an earlier rule's of this file); a new category needs one, and a category has one kind."""
    out: list[tuple[str, str, re.Pattern[str]]] = []
    kinds = dict(known)
    rules = data.get("rules", [])
    if not isinstance(rules, list):
        raise InputError(path, "key rules must be an array of tables ([[rules]] with category, kind and pattern)")
    for i, rule in enumerate(rules, start=1):
        if not isinstance(rule, dict):
            raise InputError(path, f"rule {i}: must be a table with category, kind and pattern")
        category = rule.get("category")
        if not isinstance(category, str) or not _CATEGORY_NAME.match(category) \
                or category in DECOMPOSITION or category in MEMORY_CATEGORIES or category == "cuda_graph":
            raise InputError(path, f"rule {i}: category {str(category)[:40]!r} must be a lower-case name "
                                   "([a-z][a-z0-9_]*, at most 48 characters) other than the derived ones "
                                   f"({', '.join((*DECOMPOSITION, *MEMORY_CATEGORIES, 'cuda_graph'))})")
        kind = rule.get("kind", kinds.get(category))
        if kind is None:
            raise InputError(path, f"rule {i}: category {category!r} is new: give its kind ({', '.join(KINDS)})")
        if kind not in KINDS:
            raise InputError(path, f"rule {i}: kind {str(kind)[:40]!r} is not one of {', '.join(KINDS)}")
        if kinds.get(category, kind) != kind:
            raise InputError(path, f"rule {i}: category {category!r} is {kinds[category]}, not {kind} "
                                   "(a category has one kind)")
        kinds[category] = kind
        pattern = rule.get("pattern")
        if not isinstance(pattern, str):
            raise InputError(path, f"rule {i}: pattern must be a string (a regex over kernel names)")
        try:
            out.append((category, kind, re.compile(pattern, re.IGNORECASE)))
        except (re.error, RecursionError, OverflowError) as exc:
            raise InputError(path, f"rule {i}: pattern is not a valid regex ({exc})") from exc
    return out


def load_category_rules(extra: Path | None = None, cwd: Path | None = None) -> CategoryRules:
    shipped = _shipped_toml()
    if shipped.get("version") != RULES_VERSION:
        raise UnsupportedVersion("kernel_categories.toml", str(shipped.get("version")), str(RULES_VERSION))
    shipped_rules = _rules_from(shipped, "kernel_categories.toml", BUILT_IN_KINDS)
    user_rules: list[tuple[str, str, re.Pattern[str]]] = []
    for path, given in (((cwd or Path.cwd()) / "receipts.toml", False), (extra, True)):
        if path is not None and (given or Path(path).is_file()):  # a --categories file that is not there is an error
            known = BUILT_IN_KINDS | _SHIPPED_KINDS | {c: k for c, k, _ in user_rules}
            user_rules += _rules_from(read_toml(Path(path), "kernel-category rules"), str(path), known)
            if len({c for c, _, _ in user_rules} | set(BUILT_IN_KINDS) | set(_SHIPPED_KINDS)) > MAX_CATEGORIES:
                raise InputError(path, f"more than {MAX_CATEGORIES} categories in all: an activity's category is "
                                       "kept in one byte")
    return CategoryRules(tuple(user_rules + shipped_rules))
