"""The anatomy view's drill-down from a slow step to its kernels, driven with Streamlit's AppTest over the real
run with two planted slow steps (tests/data/slow_step), and the receipt view's links into it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import cli
from conftest import realdata
from dashboard_store import _app, _charts, _no_exception, _texts

RUN = Path(__file__).resolve().parent / "data" / "slow_step" / "slowstep_1"


@pytest.fixture(scope="module")
def slow_store(tmp_path_factory) -> tuple[str, str]:
    from receipts.store import open_store

    db = str(tmp_path_factory.mktemp("drill_dash") / "slow.duckdb")
    assert cli(db, "ingest", str(RUN)).exit_code == 0
    with open_store(db, read_only=True) as store:
        return db, store.resolve("slowstep_1")


def _kernels(at):
    return next(d.value for d in at.dataframe if "typical_calls" in d.value.columns)


def test_the_drill_down_opens_the_slowest_steady_step_first(slow_store, monkeypatch):
    db, rid = slow_store
    at = _app(db, monkeypatch, view="anatomy", id=rid)
    _no_exception(at)
    picker = at.selectbox(key="drill_step")
    assert picker.value == "17" and picker.options[1].startswith("step 12 ·")  # the two planted steps lead
    assert picker.options[0].endswith("slowest steady") and picker.options[-1].endswith("warm-up")
    metrics = {m.label: m for m in at.metric}
    assert metrics["GPU span"].delta.startswith("+2")  # the 25 ms stall: the span grew ~28 ms
    spec = next(json.loads(c.proto.spec) for c in _charts(at) if "typical steady step" in c.proto.spec)
    assert spec["title"] == "this step against the typical steady step"
    assert at.query_params["step"] == "17"


def test_picking_the_gemm_step_names_its_extra_kernel_on_its_slowest_rank(slow_store, monkeypatch):
    db, rid = slow_store
    at = _app(db, monkeypatch, view="anatomy", id=rid)
    at.selectbox(key="drill_step").set_value("12").run()
    _no_exception(at)
    top = _kernels(at).iloc[0]
    assert top["category"] == "gemm" and top["calls"] == 61 and top["typical_calls"] == 13
    assert top["delta_ms"] > 5
    assert at.selectbox(key="drill_rank").value == at.query_params["rank"]  # the step's slowest rank, in the URL
    at.selectbox(key="drill_rank").set_value("0").run()
    assert _kernels(at).iloc[0]["calls"] == 61 and at.query_params["rank"] == "0"
    assert "Kernels of step 12 on rank 0" in _texts(at)


def test_a_link_opens_its_step_and_a_stale_step_says_so(slow_store, monkeypatch):
    db, rid = slow_store
    at = _app(db, monkeypatch, view="anatomy", id=rid, step="12", rank="0")
    _no_exception(at)
    assert at.selectbox(key="drill_step").value == "12" and at.selectbox(key="drill_rank").value == "0"
    stale = _app(db, monkeypatch, view="anatomy", id=rid, step="999")
    _no_exception(stale)
    assert any("Step 999 is not in this export (its steps: 0-23)" in w.value for w in stale.warning)
    assert stale.selectbox(key="drill_step").value == "17"


@pytest.mark.slow  # one more run of the app
def test_a_link_to_the_slowest_step_opens_it_as_the_cli_does(slow_store, monkeypatch):
    db, rid = slow_store
    slowest = _app(db, monkeypatch, view="anatomy", id=rid, step="slowest")  # `anatomy RUN --step slowest`
    _no_exception(slowest)
    assert not slowest.warning and slowest.selectbox(key="drill_step").value == "17"
    assert slowest.query_params["step"] == "17"


def test_the_receipt_view_links_its_slowest_steps_to_their_kernels(slow_store, monkeypatch):
    db, rid = slow_store
    at = _app(db, monkeypatch, view="receipt", id=rid)
    _no_exception(at)
    text = _texts(at)
    assert "Slowest steady steps in the profile, each opened to its kernels" in text
    assert f"(?view=anatomy&id={rid}&step=17)" in text and f"(?view=anatomy&id={rid}&step=12)" in text


def test_an_export_without_step_markers_has_no_step_to_open(tmp_path, monkeypatch):
    db = str(tmp_path / "p.duckdb")
    assert cli(db, "ingest", str(realdata("nsys", "profile1.sqlite")), "--run-name", "profile1").exit_code == 0
    at = _app(db, monkeypatch, view="anatomy")
    _no_exception(at)
    assert "This export has no step markers: one window, no step to open." in _texts(at)
