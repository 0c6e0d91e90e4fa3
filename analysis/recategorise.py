"""Runs compared under one set of kernel-category rules: what explain does when their profiles were categorised
under different rules (an extra rule in one run's --categories or receipts.toml).

Each attached export keeps the rules it was made under (anatomy_sources.category_rules_*: their text and digest).
When the runs of one explanation differ, every run is brought to the reference rules (the baseline's, most of
them). The kernel rows take the reference rules' category of their name (the names do not depend on the rules).
The busy categories (gemm, attention, a user's own, ...) are unions of intervals. From a run's raw events, where
they were kept (`ingest --keep-raw`: every activity with its name), each kernel is re-categorised and each
category's union per rank and step computed again: the numbers the ingest would have stored under the reference
rules. A run without raw events cannot be moved exactly (a union less a moved kernel's time is not known where
kernels overlap), so the categories the rule sets sort differently are left out of every run's comparison, their
kernels still compared one by one. Where a moved kernel changes kind (compute under one set, communication under
the other), the step's decomposition and the ranks' exposed communication, which the kinds partition, are left
out too. The explanation says the runs were categorised under different rules, and what was left out; never
that a category vanished because a rule moved it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from receipts.schema.step_parts import DECOMPOSITION, PERIOD_PARTS

if TYPE_CHECKING:  # polars (and the rules) load only where runs under different rules are brought together
    import polars as pl

    from receipts.schema.categories import CategoryRules

Rows = list[dict[str, Any]]  # a run's component rows (analysis/explain_inputs.py stored_many)

# A run's busy-category component rows (level 'category') recomputed from its raw events under the given rules,
# or None when it kept none.
FromRaw = Callable[[str, "CategoryRules"], "pl.DataFrame | None"]


@dataclass(frozen=True)
class RulesDifference:
    """The runs of one comparison were categorised under different rules."""
    reference: str                  # sha256 of the rules every run is compared under (most baseline runs')
    moved_runs: tuple[str, ...]     # receipt ids re-categorised from their raw events
    moved_kernels: int              # kernel names whose category differs between a run's rules and the reference
    left_out: tuple[str, ...]       # categories left out of the comparison (sorted differently, no raw events)
    kinds_changed: bool             # a moved kernel changed kind: decomposition and rank levels left out
    unknown: tuple[str, ...]        # receipt ids whose rules are not recorded (attached before they were kept)

    def note(self, names: Mapping[str, str]) -> str:
        """One line for the reader, in the library's words (the CLI adds how to keep raw events)."""
        parts = [f"categorised under different kernel-category rules (an extra rule in one run's category rules "
                 f"or receipts.toml); compared under the baseline's (rules {self.reference[:12]}), "
                 f"{self.moved_kernels} kernel name(s) sorted differently"]
        if self.moved_runs:
            parts.append(f"re-categorised from raw events: {', '.join(names.get(i, i) for i in self.moved_runs)}")
        if self.left_out:
            parts.append(f"left out, without raw events to re-categorise them: categories {', '.join(self.left_out)}")
        if self.kinds_changed:
            parts.append("a kernel changed kind, so the step's decomposition and exposed communication are left out")
        if self.unknown:
            parts.append(f"rules not recorded (attached before they were kept) for "
                         f"{', '.join(names.get(i, i) for i in self.unknown)}")
        return "; ".join(parts)


def reference_text(rules: Mapping[str, str | None], baseline: Sequence[str]) -> str | None:
    """The kept rules every run is compared under: the text most of the `baseline` runs were categorised under (the
    other runs' when no baseline run's is recorded); None when no run's is. A kept text is its rules' canonical
    JSON (CategoryRules.text), so the same text is the same rules and the same digest."""
    recorded = [text for text in rules.values() if text is not None]
    voters = [text for rid in baseline if (text := rules.get(rid)) is not None] or recorded
    return Counter(voters).most_common(1)[0][0] if voters else None


def common_rules(runs: dict[str, Rows], rules: Mapping[str, str | None], baseline: Sequence[str],
                 from_raw: FromRaw) -> tuple[dict[str, Rows], RulesDifference | None]:
    """Every run's component rows (analysis/components.py COMPONENT_SCHEMA, less the rule) under the rules most of
    the `baseline` runs were categorised under (the other runs' when no baseline run's are recorded). `rules`: each
    run's kept rules text (None: not recorded); `from_raw`: a run's busy categories from its raw events. Unchanged,
    with None, when every recorded rule set is the same (the texts compared first: the same text is the same rules)."""
    reference = reference_text(rules, baseline)
    if reference is None or all(text in (None, reference) for text in rules.values()):
        return runs, None
    from receipts.schema.categories import NOT_KERNELS, CategoryRules

    known = {rid: CategoryRules.from_text(text) for rid, text in rules.items() if text is not None}
    digests = {rid: r.sha256 for rid, r in known.items()}
    if len(set(digests.values())) < 2:
        return runs, None
    import polars as pl

    from receipts.schema.model import COMPONENT_SCHEMA

    schema = {c: t for c, t in COMPONENT_SCHEMA.items() if c != "rule"}
    frames = {rid: pl.DataFrame(rows, schema=schema) for rid, rows in runs.items()}
    ref = CategoryRules.from_text(reference)
    out, moved_runs, kinds_changed = dict(frames), [], False
    left_out: set[str] = set()
    moved: set[str] = set()
    for rid, own in known.items():
        if own.sha256 == ref.sha256:
            continue
        kernels = frames[rid].filter(pl.col("level") == "kernel")
        names = kernels["name"].to_list()
        new = ref.classify_many(names)
        pairs = {(old, to) for old, to in zip(kernels["category"].to_list(), new) if old != to}
        moved |= {n for n, old, to in zip(names, kernels["category"].to_list(), new) if old != to}
        kinds_changed |= any(own.kinds.get(old) != ref.kinds.get(to) for old, to in pairs)
        raw = from_raw(rid, ref)
        if raw is None:
            # which categories the two sets sort differently, from the kernels this run ran (all of them when it
            # kept no kernel totals: every busy category may differ)
            left_out |= {c for pair in pairs for c in pair} if kernels.height else {"*"}
        else:
            moved_runs.append(rid)
        out[rid] = _recategorised(frames[rid], kernels.with_columns(pl.Series("category", new, dtype=pl.Utf8)), raw)
    leave = pl.lit(False)
    if left_out:
        busy = (pl.col("level") == "category") & ~pl.col("name").is_in([*PERIOD_PARTS, *NOT_KERNELS])
        leave = leave | (busy if "*" in left_out else (pl.col("level") == "category") & pl.col("name").is_in(left_out))
    if kinds_changed:
        leave = leave | ((pl.col("level") == "category") & pl.col("name").is_in(DECOMPOSITION)) | (pl.col("level") == "rank")
    kept = {rid: frame.filter(~leave).to_dicts() for rid, frame in out.items()}
    shown = ("every busy category",) if "*" in left_out else tuple(sorted(left_out))
    return kept, RulesDifference(ref.sha256, tuple(moved_runs), len(moved), shown, kinds_changed,
                                tuple(rid for rid in frames if rid not in known))


def _recategorised(frame: pl.DataFrame, kernels: pl.DataFrame, raw: pl.DataFrame | None) -> pl.DataFrame:
    """The run's rows with its kernels in the reference categories and, from `raw`, its busy categories."""
    import polars as pl

    from receipts.schema.categories import NOT_KERNELS

    rest = frame.filter(pl.col("level") != "kernel")
    if raw is not None:
        rest = pl.concat([rest.filter(~((pl.col("level") == "category")
                                        & ~pl.col("name").is_in([*PERIOD_PARTS, *NOT_KERNELS]))),
                          raw.select(frame.columns)], how="vertical_relaxed")
    return pl.concat([rest, kernels.select(frame.columns)], how="vertical_relaxed").sort("level", "name")


def busy_rows(raw: pl.DataFrame, rules: CategoryRules) -> pl.DataFrame:
    """anatomy_rows-shaped rows (rank, step, category, time_ms) of the kernel categories, from raw events (rank,
    step, category, name, start_ns, end_ns) with each kernel re-categorised by `rules`: each category's union of
    busy time per rank and step, as the ingest computes it. Copies and graph replays keep their categories (and
    rows: they are not the rules')."""
    import polars as pl

    from receipts.ingest.intervals import union_ns
    from receipts.schema.categories import NOT_KERNELS

    kernels = raw.filter(~pl.col("category").cast(pl.Utf8).is_in(NOT_KERNELS) & pl.col("step").is_not_null())
    names = kernels["name"].cast(pl.Utf8).fill_null("").unique().to_list()
    category = dict(zip(names, rules.classify_many(names)))
    events = kernels.select(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int64),
                            pl.col("name").cast(pl.Utf8).fill_null("").replace_strict(category, return_dtype=pl.Utf8)
                            .alias("category"), pl.col("start_ns").cast(pl.Int64),
                            pl.col("end_ns").cast(pl.Int64).clip(lower_bound=pl.col("start_ns").cast(pl.Int64)))
    return (union_ns(events, ["rank", "step", "category"])
            .select("rank", "step", "category", (pl.col("union_ns") / 1e6).alias("time_ms")))
