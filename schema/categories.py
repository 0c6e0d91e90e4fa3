"""Kernel-name -> anatomy category, from rules kept as data (kernel_categories.toml)."""

from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
import polars as pl

from receipts.errors import InputError, UnsupportedVersion
from receipts.schema.kernel_names import canonical_kernel_name
from receipts.schema.toml_file import read_toml

# The anatomy --json contract: every category a row may carry.
KERNEL_CATEGORIES = (
    "gemm", "attention", "moe",
    "nccl_all_gather", "nccl_reduce_scatter", "nccl_all_reduce", "nccl_all_to_all", "nccl_send_recv",
    # A CUDA-graph replay traced as one activity (nsys --cuda-graph-trace=graph): busy time whose
    # kernels are not visible, so it cannot be split into the categories above.
    "cuda_graph",
    "other",
)
MEMORY_CATEGORIES = ("memcpy_h2d", "memcpy_d2h", "memcpy_d2d", "memcpy_p2p", "memset")
# Derived from the intervals, not from names. compute_only + comm_hidden + exposed_comm + memcpy_only + idle
# partition the step span (they sum to it); the kernel and memory categories above overlap one another.
DECOMPOSITION = ("compute_only", "comm_hidden", "exposed_comm", "memcpy_only", "idle")
COMM_CATEGORIES = tuple(c for c in KERNEL_CATEGORIES if c.startswith("nccl_"))
# Every category an activity can get (a rule's category is one of KERNEL_CATEGORIES), as one Enum: a small
# integer per activity that the interval arithmetic groups by, where text would be ranked first.
CATEGORY_ENUM = pl.Enum(sorted({*KERNEL_CATEGORIES, *MEMORY_CATEGORIES}))


# Regex syntax that Python's `re` and polars' (Rust) engine read differently or only one of them reads: a
# rule containing any of it is matched with `re` alone in classify_many.
_NOT_PORTABLE = re.compile(r"\[:|&&|--|~~|\{,|\\[pPzZ]|\(\?(?!:)")


@dataclass(frozen=True)
class CategoryRules:
    rules: tuple[tuple[str, re.Pattern[str]], ...]
    # Each distinct name is classified once per loaded rule set: the ranks of a run share their kernel names,
    # and the rules' alternations cost ~0.3 ms on a 300-character templated name.
    _seen: dict[str, str] = field(default_factory=dict, init=False, compare=False, repr=False)

    def classify(self, kernel_name: str) -> str:
        """The first rule that matches the name as the profiler wrote it or in its canonical spelling
        (schema/kernel_names.py): a rule written from a Kineto trace (`elementwise_kernel<128`) matches the same
        kernel in an nsys export (`elementwise_kernel<(int)128`), and the other way round."""
        category = self._seen.get(kernel_name)
        if category is None:
            canon = canonical_kernel_name(kernel_name)
            category = next((c for c, pattern in self.rules if pattern.search(kernel_name) or pattern.search(canon)),
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
        out: list[str | None] = [self._seen.get(n) for n in names]
        todo = [i for i, n in enumerate(names) if out[i] is None and n.isascii() and n.isprintable()]
        if todo:
            names_left = [names[i] for i in todo]
            canon_left = [canonical_kernel_name(n) for n in names_left]
            vectorised = {i: "(?i)" + pattern.pattern for i, (_, pattern) in enumerate(self.rules)  # re.IGNORECASE
                          if _NOT_PORTABLE.search(pattern.pattern) is None and _polars_reads("(?i)" + pattern.pattern)}
            hits: dict[int, np.ndarray] = {}
            if vectorised:
                found = pl.DataFrame({"name": names_left, "canon": canon_left}).select(
                    (pl.col("name").str.contains(p) | pl.col("canon").str.contains(p)).alias(str(i))
                    for i, p in vectorised.items())
                hits = {int(c): found[c].to_numpy() for c in found.columns}
            left = np.ones(len(todo), bool)
            for i, (category, pattern) in enumerate(self.rules):
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
    try:
        pl.Series(["x"]).str.contains(pattern)
    except pl.exceptions.PolarsError:
        return False
    return True


def _rules_from(data: dict, path: str) -> list[tuple[str, re.Pattern[str]]]:
    out = []
    rules = data.get("rules", [])
    if not isinstance(rules, list):
        raise InputError(path, "key rules must be an array of tables ([[rules]] with category and pattern)")
    for i, rule in enumerate(rules, start=1):
        if not isinstance(rule, dict):
            raise InputError(path, f"rule {i}: must be a table with category and pattern")
        category = rule.get("category")
        if not isinstance(category, str) or category not in KERNEL_CATEGORIES:
            raise InputError(path, f"rule {i}: category {str(category)[:40]!r} is not one of {', '.join(KERNEL_CATEGORIES)}")
        pattern = rule.get("pattern")
        if not isinstance(pattern, str):
            raise InputError(path, f"rule {i}: pattern must be a string (a regex over kernel names)")
        try:
            out.append((category, re.compile(pattern, re.IGNORECASE)))
        except (re.error, RecursionError, OverflowError) as exc:
            raise InputError(path, f"rule {i}: pattern is not a valid regex ({exc})") from exc
    return out


def load_category_rules(extra: Path | None = None, cwd: Path | None = None) -> CategoryRules:
    shipped = tomllib.loads(resources.files("receipts.schema").joinpath("kernel_categories.toml").read_text())
    if shipped.get("version") != 1:
        raise UnsupportedVersion("kernel_categories.toml", str(shipped.get("version")), "1")
    user_rules: list[tuple[str, re.Pattern[str]]] = []
    for path, given in (((cwd or Path.cwd()) / "receipts.toml", False), (extra, True)):
        if path is not None and (given or Path(path).is_file()):  # a --categories file that is not there is an error
            user_rules += _rules_from(read_toml(Path(path), "kernel-category rules"), str(path))
    return CategoryRules(tuple(user_rules + _rules_from(shipped, "kernel_categories.toml")))
