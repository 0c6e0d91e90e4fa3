"""A second ingest of content already stored is answered without parsing the file (lifecycle.already_stored),
and says what the parse would have said: the same outcome, warnings, ended-early note and identity conflict."""

from __future__ import annotations

import shutil

import pytest

from conftest import REALDATA
from receipts import pipeline
from receipts.pipeline import ingest as pipeline_ingest
from receipts.schema.model import IdentityClaim
from receipts.schema.registry import load_registry
from receipts.store import open_store


@pytest.fixture()
def cut_log(tmp_path):
    """A real nanochat log killed mid-line: it ends early and warns."""
    text = (REALDATA / "logs" / "sft_run_gtx1660.log").read_bytes()
    path = tmp_path / "cut" / "run.log"
    path.parent.mkdir()
    path.write_bytes(text[: text.rindex(b"\nstep ") + 30])
    return path


def _ingest(store, path, **kw):
    (outcome,) = list(pipeline.ingest_each(store, [path], registry=load_registry(), **kw))
    assert isinstance(outcome, pipeline.IngestOutcome), outcome
    return outcome


@pytest.mark.parametrize("again", [
    {},
    {"identity": IdentityClaim(host_lineage="h100-other-lineage", preset="some_preset_v1"), "run_name": "renamed"},
    {"tags": ("second-look",)},
])
def test_an_unchanged_file_is_not_parsed_and_says_what_a_parse_would(tmp_path, cut_log, monkeypatch, again):
    with open_store(tmp_path / "r.duckdb") as store:
        first = _ingest(store, cut_log)
        assert first.created and first.ended_early
        with monkeypatch.context() as m:  # the path before: parse, then find the content stored
            m.setattr(pipeline_ingest, "already_stored", lambda *a, **k: None)
            parsed = _ingest(store, cut_log, **again)

        def no_parse(*a, **k):
            raise AssertionError("an unchanged file was parsed")
        monkeypatch.setattr(pipeline_ingest, "parse_log", no_parse)
        quick = _ingest(store, cut_log, **again)
    assert not quick.created and quick == parsed
    assert quick.ended_early == first.ended_early and quick.receipt_id == first.receipt_id
    assert bool(quick.identity_conflict) == bool(again.get("identity") or again.get("tags"))


def test_a_changed_file_is_parsed_again(tmp_path, cut_log):
    with open_store(tmp_path / "r.duckdb") as store:
        first = _ingest(store, cut_log)
        grown = tmp_path / "grown" / "run.log"
        grown.parent.mkdir()
        shutil.copy(REALDATA / "logs" / "sft_run_gtx1660.log", grown)
        second = _ingest(store, grown, run_name="cut")
    assert second.created and second.receipt_id != first.receipt_id
    assert second.supersedes == (first.receipt_id,)  # the cut log is a byte prefix of it
