"""A kernel category's kind (communication, compute, copy), read from the rules an anatomy kept (CategoryRules.text,
JSON) with the standard library alone. explain judges a component's noise by its category's kind, and start-up
matters there: it reads the kinds of the rules its runs were categorised under without reading the rules' TOML
or compiling their patterns (schema/categories.py does both, and builds the rules from these names).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from receipts.errors import UnsupportedVersion

RULES_VERSION = 2  # kernel_categories.toml's format, and a kept text's: 2 gives every rule its category's kind
KINDS = ("compute", "communication", "copy")
MEMORY_CATEGORIES = ("memcpy_h2d", "memcpy_d2h", "memcpy_d2d", "memcpy_p2p", "memset")
# Categories no rule gives: a memcpy or memset by its activity, and a CUDA-graph replay traced as one activity
# (nsys --cuda-graph-trace=graph): busy time whose kernels are not visible, so it cannot be split into the
# rules' categories. 'other' is where a kernel no rule claims lands.
BUILT_IN_KINDS: dict[str, str] = {"cuda_graph": "compute", "other": "compute"} | dict.fromkeys(MEMORY_CATEGORIES,
                                                                                             "copy")


def kinds_of(rules: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Every category rules of these (category, kind) pairs, in the order tried, can give an activity -> its kind:
    the built-in categories' and the first rule naming each category decides."""
    out = dict(BUILT_IN_KINDS)
    for category, kind in reversed(list(rules)):
        out[category] = kind
    return out


def kinds_from_text(text: str) -> dict[str, str]:
    """kinds_of the rules an anatomy was made under, from their kept text (`CategoryRules.text`)."""
    data = json.loads(text)
    if data.get("version") != RULES_VERSION:
        raise UnsupportedVersion("kept kernel-category rules", str(data.get("version")), str(RULES_VERSION))
    return kinds_of((category, kind) for category, kind, _ in data["rules"])
