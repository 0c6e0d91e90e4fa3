"""0013: the kernel-category rules each attached export was categorised under.

anatomy_sources.category_rules_version, category_rules_sha256 and category_rules_json: the effective rules
(schema/categories.py CategoryRules: the shipped kernel_categories.toml, with ./receipts.toml's and --categories'
rules before it) as [category, kind, pattern] in the order they are tried, and their digest. Two runs whose
digests differ were categorised under different rules: `compare`, `explain` and the dashboard say so and
re-categorise the kernels under one rule set. Exports attached before this revision read null (rules unknown):
attach the export again to record them.
"""

from __future__ import annotations

import sqlalchemy as sa

VERSION = 13
DESCRIPTION = "the kernel-category rules of each attached export: anatomy_sources.category_rules_*"


def upgrade(op) -> None:
    op.add_column("anatomy_sources", sa.Column("category_rules_version", sa.Integer()))
    op.add_column("anatomy_sources", sa.Column("category_rules_sha256", sa.Text()))
    op.add_column("anatomy_sources", sa.Column("category_rules_json", sa.Text()))
