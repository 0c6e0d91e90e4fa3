"""Kernel-category rules kept with the data: a category's kind is a field of its rule (not an nccl_ prefix), each
attached export records the rules it was made under, and explain compares runs categorised under different rules
under one set of them, re-categorising from raw events where they were kept, never calling a category vanished
because a rule moved its kernels."""

from __future__ import annotations

import shutil

import duckdb
import polars as pl
import pytest

from cli_helpers import cli, cli_json
from conftest import EXPLAIN_DATA, GPU_DATA
from receipts.errors import InputError
from receipts.pipeline.parse import parse_profile
from receipts.schema.categories import DECOMPOSITION, CategoryRules, load_category_rules

KINETO_2GPU = GPU_DATA / "fsdp2_2gpu_kineto" / "traces"
# An extra rule as a teammate's receipts.toml might carry: cuBLAS / CUTLASS kernels counted as 'other'
EXTRA = '[[rules]]\ncategory = "other"\npattern = "nvjet|gemm|cutlass|xmma"\n'


def _rules(tmp_path, text: str, name: str = "rules.toml") -> CategoryRules:
    path = tmp_path / name
    path.write_text(text)
    return load_category_rules(path, cwd=tmp_path / "none")


def test_a_communication_category_not_named_nccl_counts_as_communication(tmp_path):
    """A user's category 'fabric' for the NCCL kernels, of kind communication: the step's decomposition (hidden and
    exposed communication), its communication time and the collectives matched across ranks are those of the
    shipped nccl_* categories. Given kind compute instead, the same kernels are compute: the kind decides."""
    shipped = parse_profile(KINETO_2GPU, "kineto-dir", load_category_rules(cwd=tmp_path), False)
    fabric = parse_profile(KINETO_2GPU, "kineto-dir", _rules(tmp_path, '[[rules]]\ncategory = "fabric"\n'
                                                             'kind = "communication"\npattern = "^nccl"\n'), False)
    as_compute = parse_profile(KINETO_2GPU, "kineto-dir", _rules(tmp_path, '[[rules]]\ncategory = "fabric"\n'
                                                                 'kind = "compute"\npattern = "^nccl"\n', "c.toml"), False)

    def parts(a):
        return a.rows.filter(pl.col("category").is_in(DECOMPOSITION)).sort("rank", "step", "category")

    assert "fabric" in fabric.rows["category"].to_list() and "nccl_all_gather" not in fabric.rows["category"].to_list()
    assert parts(fabric).equals(parts(shipped))
    assert fabric.steps["comm_ms"].sum() == shipped.steps["comm_ms"].sum() > 10
    assert as_compute.steps["comm_ms"].sum() == 0
    assert parts(as_compute).filter(pl.col("category") == "comm_hidden")["time_ms"].sum() == 0

    from receipts.analysis.at_ingest import with_stragglers

    matched = [with_stragglers(a).straggler_summary for a in (shipped, fabric)]
    assert matched[0] is not None and matched[0]["n_collectives"] == matched[1]["n_collectives"] > 0


def test_rules_say_their_kinds_and_refuse_a_new_category_without_one(tmp_path):
    rules = load_category_rules(cwd=tmp_path)
    assert rules.kinds["nccl_all_reduce"] == "communication" and rules.kinds["gemm"] == "compute"
    assert rules.kinds["memcpy_h2d"] == "copy" and rules.kinds["other"] == "compute"
    for text, expected in (('category = "fabric"\npattern = "x"', "category 'fabric' is new: give its kind"),
                           ('category = "gemm"\nkind = "communication"\npattern = "x"', "'gemm' is compute, not communication"),
                           ('category = "idle"\nkind = "compute"\npattern = "x"', "other than the derived ones"),
                           ('category = "fabric"\nkind = "network"\npattern = "x"', "kind 'network' is not one of")):
        path = tmp_path / "bad.toml"
        path.write_text(f"[[rules]]\n{text}\n")
        with pytest.raises(InputError, match=expected) as caught:
            load_category_rules(path, cwd=tmp_path / "none")
        assert str(path) in str(caught.value) and "rule 1" in str(caught.value)


def test_the_rules_digest_tells_an_extra_rule_and_the_kept_text_reads_back(tmp_path):
    shipped, extra = load_category_rules(cwd=tmp_path), _rules(tmp_path, EXTRA)
    assert shipped.sha256 == load_category_rules(cwd=tmp_path).sha256 != extra.sha256
    back = CategoryRules.from_text(extra.text)
    assert back.sha256 == extra.sha256 and back.classify("nvjet_sm90_tst_128x256") == "other"
    assert shipped.classify("nvjet_sm90_tst_128x256") == "gemm"


# A user's categories whose names say nothing of their kind: the NCCL kernels as 'fabric' (communication), and a
# compute category whose name merely starts like the shipped collectives'.
FABRIC = ('[[rules]]\ncategory = "fabric"\nkind = "communication"\npattern = "^nccl"\n'
          '[[rules]]\ncategory = "nccl_lookalike"\nkind = "compute"\npattern = "^lookalike_"\n')


def _class_by_name(level: str, name: str, category: str | None) -> str:
    """The noise class a component got when the nccl_ name prefix decided what waits."""
    from receipts.analysis.explain_noise import BETWEEN_STEPS, HOST_GAP, IDLE_LONG

    if level in ("nvtx", "rank", "gap"):
        return {"nvtx": "cpu", "rank": "wait", "gap": "place"}[level]
    if level == "category":
        if name.startswith("nccl_") or name in ("comm_hidden", "exposed_comm"):
            return "wait"
        if name == IDLE_LONG:
            return "stall"
        return "host" if name in (HOST_GAP, BETWEEN_STEPS) else "gap" if name == "idle" else "busy"
    return "wait" if (category or "").startswith("nccl_") else "compute"


def test_a_components_noise_class_is_its_categorys_kind_not_its_name(tmp_path):
    """A communication category not named nccl_* waits (its collectives' time holds the wait for the slowest peer),
    and its kernels too; a compute category named nccl_* is busy time. The kinds come from the kept rules' text, as
    explain reads them, and are the compiled rules' own."""
    from receipts.analysis.explain_noise import component_class
    from receipts.schema.category_kinds import kinds_from_text

    rules = _rules(tmp_path, FABRIC)
    kinds = kinds_from_text(rules.text)
    assert kinds == rules.kinds and kinds["fabric"] == "communication" and kinds["nccl_lookalike"] == "compute"
    assert component_class("category", "fabric", None, kinds) == "wait"
    assert component_class("kernel", "ncclDevKernel_AllGather_RING_LL", "fabric", kinds) == "wait"
    assert component_class("category", "nccl_lookalike", None, kinds) == "busy"
    assert component_class("kernel", "lookalike_gemm", "nccl_lookalike", kinds) == "compute"


def test_the_shipped_rules_give_every_component_the_class_its_name_gave(tmp_path):
    """Under the shipped rules (and where no rules were kept: explain's default) the kinds give each category,
    each kernel of each category and each derived part the class the nccl_ prefix gave: no verdict moves."""
    from receipts.analysis.explain_noise import component_class
    from receipts.schema.categories import SHIPPED_KINDS, STEP_PARTS
    from receipts.schema.category_kinds import kinds_from_text

    shipped = load_category_rules(cwd=tmp_path)
    assert kinds_from_text(shipped.text) == shipped.kinds == SHIPPED_KINDS
    assert {c for c, k in SHIPPED_KINDS.items() if k == "communication"} == {c for c in SHIPPED_KINDS
                                                                             if c.startswith("nccl_")}
    names = [*SHIPPED_KINDS, *STEP_PARTS, "between_steps", "unknown_category"]
    for level in ("category", "kernel", "nvtx", "rank", "gap"):
        for name in names:
            for category in (None, *names):
                assert component_class(level, name, category, SHIPPED_KINDS) == _class_by_name(level, name, category)


def test_explain_judges_a_category_by_the_kind_it_is_given():
    """The same 10% move of a user's category 'fabric', pairwise: as communication its noise is the wait class's
    (20% of the value: no change named), as compute (its kind unknown to the shipped rules) the busy class's (1%)."""
    from receipts.analysis.explain import RunComponents, StepChange, Value, explain

    def run(rid: str, fabric: float) -> RunComponents:
        return RunComponents(rid, rid, {("category", "fabric"): Value(fabric), ("category", "gemm"): Value(60.0)})

    step = StepChange("slower", 100.0, 101.0, "")
    kinds = {"fabric": "communication", "gemm": "compute"}
    as_comm, by_default = (explain([run("a", 10.0)], [run("b", 11.0)], step=step, mode="pairwise", kinds=k)
                           for k in (kinds, None))
    fabric = [next(c for c in e.components if c.name == "fabric") for e in (as_comm, by_default)]
    assert fabric[0].noise_ms == pytest.approx(0.2 * 10.5, rel=0.05) and fabric[0].verdict != "changed"
    assert fabric[1].noise_ms < 0.2 and fabric[1].verdict == "changed"


def test_the_runs_are_compared_under_the_rules_most_baseline_runs_kept():
    from receipts.analysis.recategorise import reference_text

    assert reference_text({"a": "x", "b": "x", "c": "y", "d": None}, ["a", "b", "c"]) == "x"
    assert reference_text({"a": None, "b": "y", "c": "x"}, ["a"]) in ("x", "y")  # no baseline run's kept: the others'
    assert reference_text({"a": None, "b": "y"}, ["a"]) == "y"
    assert reference_text({"a": None, "b": None}, ["a"]) is None


@pytest.fixture(scope="module")
def two_rules(tmp_path_factory):
    """base_1 attached under the shipped rules, aa_1 (an A/A run of the same configuration) under an extra rule that
    counts GEMMs as 'other', with its raw events kept."""
    folder = tmp_path_factory.mktemp("rules")
    extra = folder / "extra.toml"
    extra.write_text(EXTRA)
    db = str(folder / "r.duckdb")
    assert cli(db, "ingest", str(EXPLAIN_DATA / "base_1")).exit_code == 0
    done = cli(db, "ingest", str(EXPLAIN_DATA / "aa_1"), "--categories", str(extra), "--keep-raw")
    assert done.exit_code == 0, done.output
    return db


def _categories(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["components"] if c["level"] == "category"}


@pytest.mark.slow
def test_each_export_keeps_the_rules_it_was_made_under(two_rules, tmp_path):
    con = duckdb.connect(two_rules, read_only=True)
    kept = dict(con.execute("SELECT r.run_name, a.category_rules_sha256 FROM anatomy_sources a "
                            "JOIN receipts r ON r.id = a.receipt_id").fetchall())
    con.close()
    assert kept["base_1"] == load_category_rules(cwd=tmp_path).sha256
    assert kept["aa_1"] == _rules(tmp_path, EXTRA).sha256


@pytest.mark.slow
def test_runs_under_different_rules_are_re_categorised_from_raw_events(two_rules, tmp_path):
    """Not 'gemm vanished, other +38 ms, changed': aa_1's kernels are put back under the baseline's rules, and its
    busy categories are the ones an ingest under those rules stores, to the nanosecond."""
    code, report = cli_json(two_rules, "explain", "aa_1", "--against", "base_1")
    assert code == 0, report
    rules = report["category_rules"]
    assert "different kernel-category rules" in rules["note"] and rules["moved_runs"] == ["aa_1"]
    assert rules["left_out"] == [] and not rules["kinds_changed"] and rules["moved_kernels"] > 0
    cats = _categories(report)
    assert not [c for c in cats.values() if c["presence"] or c["verdict"] == "changed"], cats
    shipped = parse_profile(EXPLAIN_DATA / "aa_1" / "profile.sqlite.gz", "nsys-gz", load_category_rules(cwd=tmp_path),
                            False)
    con = duckdb.connect(two_rules, read_only=True)
    steps = con.execute("SELECT s.rank, s.step, s.warmup FROM anatomy_steps s JOIN receipts r ON r.id = s.receipt_id "
                        "WHERE r.run_name = 'aa_1'").pl()  # the receipt's window, as the ingest stored it
    con.close()
    from receipts.analysis.components import components

    truth = {r["name"]: r["ms_per_step"] for r in components(shipped.rows, steps, None, None).iter_rows(named=True)
             if r["level"] == "category"}
    for name in ("gemm", "attention", "other"):
        assert cats[name]["candidate_ms_per_step"] == pytest.approx(truth[name], abs=1e-9), name
    kernels = [c for c in report["components"] if c["level"] == "kernel" and "nvjet" in c["name"]]
    assert kernels and {c["category"] for c in kernels} == {"gemm"}
    text = cli(two_rules, "explain", "aa_1", "--against", "base_1").output
    assert "rules: categorised under different kernel-category rules" in text
    assert max(len(line) for line in text.splitlines()) <= 80


@pytest.mark.slow
def test_without_raw_events_the_categories_sorted_differently_are_left_out_and_named(two_rules, tmp_path):
    db = str(tmp_path / "copy.duckdb")
    shutil.copy(two_rules, db)
    con = duckdb.connect(db)
    con.execute("UPDATE anatomy_sources SET raw_events_path = NULL")
    con.close()
    code, report = cli_json(db, "explain", "aa_1", "--against", "base_1")
    assert code == 0
    assert "left out, without raw events to re-categorise them: categories attention, gemm, other" \
        in report["category_rules"]["note"]
    assert report["category_rules"]["left_out"] == ["attention", "gemm", "other"]
    assert "ingest --keep-raw" in " ".join(cli(db, "explain", "aa_1", "--against", "base_1").output.split())
    cats = _categories(report)
    assert not {"gemm", "other", "attention"} & set(cats) and "compute_only" in cats
    assert not [c for c in report["components"] if c["presence"] == "vanished"]
    compared = cli_json(db, "compare", "base_1", "aa_1")[1]
    assert compared["explain"]["category_rules"] == report["category_rules"]


@pytest.mark.slow
def test_db_upgrade_adds_the_rules_columns_to_an_older_store(tmp_path):
    from receipts.store import migrations

    db = str(tmp_path / "old.duckdb")
    con = duckdb.connect(db)
    migrations.init(migrations.DuckDBTarget(con, db), version=12)
    con.close()
    assert cli(db, "db", "upgrade").exit_code == 0
    con = duckdb.connect(db, read_only=True)
    columns = {r[0] for r in con.execute("SELECT column_name FROM information_schema.columns "
                                         "WHERE table_name = 'anatomy_sources'").fetchall()}
    con.close()
    assert {"category_rules_version", "category_rules_sha256", "category_rules_json"} <= columns


@pytest.mark.slow
def test_the_dashboard_compare_says_the_rules_differ(two_rules, monkeypatch):
    from dashboard_store import _app, _no_exception, _texts

    con = duckdb.connect(two_rules, read_only=True)
    ids = dict(con.execute("SELECT run_name, id FROM receipts").fetchall())
    con.close()
    at = _app(two_rules, monkeypatch, view="compare", a=ids["base_1"], b=ids["aa_1"])
    _no_exception(at)
    warnings = [str(w.value) for w in at.warning]
    assert any("A and B were categorised under different kernel-category rules" in w for w in warnings), warnings
    assert any("Kernel-category rules: categorised under different kernel-category rules" in w
               and "re-categorised from raw events: aa_1" in w for w in warnings), _texts(at)


@pytest.mark.slow
def test_explain_gives_a_communication_category_not_named_nccl_the_noise_of_one(two_rules, tmp_path):
    """base_1 categorised under rules that call the NCCL kernels 'fabric' (communication), aa_1 under the shipped
    ones: explained against base_1, the runs are compared under base_1's rules, and each NCCL kernel, now of
    'fabric', keeps the noise it has as an nccl_* kernel (the wait class), to the last digit."""
    rules = tmp_path / "fabric.toml"
    rules.write_text(FABRIC)
    db = str(tmp_path / "r.duckdb")
    assert cli(db, "ingest", str(EXPLAIN_DATA / "base_1"), "--categories", str(rules)).exit_code == 0
    assert cli(db, "ingest", str(EXPLAIN_DATA / "aa_1")).exit_code == 0

    def nccl_kernels(store: str) -> dict[str, dict]:
        code, report = cli_json(store, "explain", "aa_1", "--against", "base_1")
        assert code == 0, report
        return {c["name"]: c for c in report["components"] if c["level"] == "kernel" and c["name"].startswith("nccl")}

    fabric, shipped = nccl_kernels(db), nccl_kernels(two_rules)
    assert fabric.keys() == shipped.keys() and len(fabric) >= 2
    assert {c["category"] for c in fabric.values()} == {"fabric"}
    assert all(c["category"].startswith("nccl_") for c in shipped.values())
    for name, c in fabric.items():
        assert (c["noise_ms"], c["noise_df"]) == (shipped[name]["noise_ms"], shipped[name]["noise_df"]), name

