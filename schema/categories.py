"""Kernel-name -> anatomy category, from rules kept as data (kernel_categories.toml)."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from receipts.errors import InputError, UnsupportedVersion

# The anatomy --json contract: every category a row may carry.
KERNEL_CATEGORIES = (
    "gemm", "attention", "moe",
    "nccl_all_gather", "nccl_reduce_scatter", "nccl_all_reduce", "nccl_all_to_all", "nccl_send_recv",
    "other",
)
MEMORY_CATEGORIES = ("memcpy_h2d", "memcpy_d2h", "memcpy_d2d", "memcpy_p2p", "memset")
DERIVED_CATEGORIES = ("idle", "exposed_comm")
ALL_CATEGORIES = KERNEL_CATEGORIES + MEMORY_CATEGORIES + DERIVED_CATEGORIES
COMM_CATEGORIES = tuple(c for c in KERNEL_CATEGORIES if c.startswith("nccl_"))


@dataclass(frozen=True)
class CategoryRules:
    rules: tuple[tuple[str, re.Pattern[str]], ...]

    def classify(self, kernel_name: str) -> str:
        for category, pattern in self.rules:
            if pattern.search(kernel_name):
                return category
        return "other"

    def as_sql_case(self) -> tuple[str, list[str]]:
        """A parameterised CASE over `name` for DuckDB (regexp_matches), with its parameters."""
        parts, params = [], []
        for category, pattern in self.rules:
            parts.append("WHEN regexp_matches(name, ?) THEN ?")
            params.extend(["(?i)" + pattern.pattern, category])
        return "CASE " + " ".join(parts) + " ELSE 'other' END", params


def _rules_from(data: dict, path: str) -> list[tuple[str, re.Pattern[str]]]:
    out = []
    for i, rule in enumerate(data.get("rules", []), start=1):
        category = rule.get("category")
        if category not in KERNEL_CATEGORIES:
            raise InputError(path, f"rule {i}: category {category!r} is not one of {', '.join(KERNEL_CATEGORIES)}")
        try:
            out.append((category, re.compile(rule["pattern"], re.IGNORECASE)))
        except (KeyError, re.error) as exc:
            raise InputError(path, f"rule {i}: pattern missing or not a valid regex ({exc})") from exc
    return out


def load_category_rules(extra: Path | None = None, cwd: Path | None = None) -> CategoryRules:
    shipped = tomllib.loads(resources.files("receipts.schema").joinpath("kernel_categories.toml").read_text())
    if shipped.get("version") != 1:
        raise UnsupportedVersion("kernel_categories.toml", str(shipped.get("version")), "1")
    user_rules: list[tuple[str, re.Pattern[str]]] = []
    for path in ((cwd or Path.cwd()) / "receipts.toml", extra):
        if path is not None and Path(path).is_file():
            try:
                data = tomllib.loads(Path(path).read_text())
            except tomllib.TOMLDecodeError as exc:
                raise InputError(path, f"not valid TOML: {exc}") from exc
            user_rules += _rules_from(data, str(path))
    return CategoryRules(tuple(user_rules + _rules_from(shipped, "kernel_categories.toml")))
