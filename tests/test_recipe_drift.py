"""Recipe drift names every recipe fact receipts reads, field by field: the real Megatron-DeepSpeed log against a
copy whose argument dump differs in 9 recipe fields (plus a changed output path and a dropped argument, which are
not drift) in `compare`, its --json, and the dashboard's compare view."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cli_helpers import cli, cli_json
from receipts.analysis.compare import recipe_facts
from receipts.analysis.record import StoredReceipt

REALDATA = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "logs"
IDENTITY = ("--host-lineage", "h200-usw1c-bench-01", "--preset", "nam52_h200_dense_ref_v1")

# argument -> (value in the real log, value in the edited copy)
EDITS = {
    "initial_sequence_length": ("256", "128"),
    "train_tokens": ("30000000000", "20000000000"),
    "lr_warmup_tokens": ("3000000000", "1000000000"),
    "lr_decay_tokens": ("2600000000", "1300000000"),
    "increse_length_token_interval": ("0.05", "0.1"),
    "lr": ("0.0003", "0.0006"),
    "min_lr": ("3e-05", "6e-05"),
    "weight_decay": ("0.1", "0.01"),
    "seed": ("1234", "42"),
}


def _edit(text: str, name: str, old: str, new: str) -> str:
    line = re.compile(rf"^(  {name} \.+ ){re.escape(old)}$", re.MULTILINE)
    assert len(line.findall(text)) == 1, name
    return line.sub(lambda m: m.group(1) + new, text)


@pytest.fixture(scope="module")
def two_dumps(tmp_path_factory) -> tuple[str, str, str]:
    """A store holding the real log (run A) and its edited copy (run B), same lane: (db, id A, id B)."""
    logs = sorted(REALDATA.glob("megatron-deepspeed__*.log"))
    if not logs:
        pytest.skip("../shared/realdata/logs not present")
    folder = tmp_path_factory.mktemp("recipe")
    text = logs[0].read_text(encoding="utf-8", errors="replace")
    edited = text
    for name, (old, new) in EDITS.items():
        edited = _edit(edited, name, old, new)
    # not drift: an output path that carries the run's name, and an argument the copy does not print (unknown)
    edited = re.sub(r"^(  tensorboard_dir \.+ )(\S+)$", r"\1tensorboard/other-run", edited, flags=re.MULTILINE)
    edited = re.sub(r"^  adam_eps \.+ 1e-08\n", "", edited, count=1, flags=re.MULTILINE)
    (folder / "b.log").write_text(edited, encoding="utf-8")
    db = str(folder / "r.duckdb")
    for path, name in ((logs[0], "mds_a"), (folder / "b.log", "mds_b")):
        result = cli(db, "ingest", str(path), "--run-name", name, *IDENTITY)
        assert result.exit_code == 0, result.output
    code, a = cli_json(db, "show", "mds_a")
    code, b = cli_json(db, "show", "mds_b")
    return db, a["id"], b["id"]


def test_each_differing_argument_is_recipe_drift_and_nothing_else_is(two_dumps):
    db, _, _ = two_dumps
    code, out = cli_json(db, "compare", "mds_a", "mds_b")
    assert code == 0, out
    recipe = {d["field"]: (d["a"], d["b"]) for d in out["drift"]["recipe"]}
    assert set(recipe) == {f"features.{k}" for k in EDITS}
    assert recipe["features.initial_sequence_length"] == (256, 128) and recipe["features.lr"] == (0.0003, 0.0006)
    text = cli(db, "compare", "mds_a", "mds_b").stdout
    assert "recipe drift:" in text and "recipe drift: none" not in text
    for name, (old, new) in EDITS.items():
        assert f"features.{name}:" in text, name


def test_the_dump_is_read_whole_but_paths_ranks_and_garbled_values_are_not_facts(two_dumps):
    db, a_id, _ = two_dumps
    from receipts.analysis.record import load
    from receipts.store import open_store

    with open_store(db) as store:
        a: StoredReceipt = load(store, a_id)
    facts = recipe_facts(a)
    # shape, batch, optimizer and schedule from the dump (lines 170-373 of the log)
    assert facts["features.hidden_size"] == 768 and facts["features.optimizer"] == "adam"
    assert facts["features.adam_beta2"] == 0.95 and facts["features.lr_decay_style"] == "cosine"
    assert facts["features.global_batch_size"] == 256 and facts["features.log_interval"] == 10
    for name in ("save", "load", "tensorboard_dir", "rank", "local_rank", "world_size", "consumed_train_tokens",
                 "log_timers_to_tensorboard"):
        assert f"features.{name}" not in facts, name
    # `attention_dropout ... 0.1Emitting ninja build file ...`: another process's output glued on
    assert "features.attention_dropout" not in facts and "features.min_loss_scale" not in facts
    assert "features.lazy_mpu_init" not in facts  # None: no fact


@pytest.mark.slow
def test_the_dashboard_compare_view_shows_the_same_drift(two_dumps, monkeypatch):
    from dashboard_store import _app, _no_exception

    db, a_id, b_id = two_dumps
    at = _app(db, monkeypatch, view="compare", a=a_id, b=b_id)
    _no_exception(at)
    markdown = "\n".join(str(m.value) for m in at.markdown)
    assert f"**recipe** ({len(EDITS)})" in markdown
    shown = next(d.value for d in at.dataframe if "field" in d.value.columns
                 and any(str(f).startswith("features.") for f in d.value["field"]))
    assert set(shown["field"]) == {f"features.{k}" for k in EDITS}
