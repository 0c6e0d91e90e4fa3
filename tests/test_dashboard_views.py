"""The dashboard's compare view explaining why B differs (on the real explain lane), and the views' edges:
unknown values drawn as unknown, charts scaled to the steady steps, exports named only when they exist."""

from __future__ import annotations

import json
from pathlib import Path
import pytest

from dashboard_store import _app, _charts, _no_exception, _texts


def _explain_ids(db: str, *runs: str) -> list[str]:
    from receipts.store import open_store

    with open_store(db, read_only=True) as store:
        return [store.resolve(r) for r in runs]


@pytest.mark.slow
def test_compare_view_explains_why_b_differs_with_noise_bands(explain_lane, monkeypatch):
    """Two real profiled runs (tests/data/explain): the pairwise explanation, drawn as deltas with intervals."""
    a, b = _explain_ids(explain_lane, "base_1", "attn_1")
    at = _app(explain_lane, monkeypatch, view="compare", a=a, b=b)
    _no_exception(at)
    text = _texts(at)
    assert "Why B differs" in text and "Pairwise (one run each side)" in text and "calibrated between-run noise" in text
    spec = next(s for s in (str(c.proto.spec) for c in _charts(at)) if "why B differs" in s)
    assert "low_ms" in spec and "high_ms" in spec  # each delta carries its interval: the component's noise band
    table = next(d.value for d in at.dataframe if "delta_ms" in d.value.columns)
    appeared = list(table[table["presence"] == "appeared"]["component"])
    assert any(name.startswith("fmha_cutlassB") for name in appeared)


@pytest.mark.slow
def test_compare_view_linked_from_check_explains_against_the_lane(explain_lane, monkeypatch):
    a, b = _explain_ids(explain_lane, "base_5", "stall_1")
    at = _app(explain_lane, monkeypatch, view="compare", a=a, b=b, against="tag:main")
    _no_exception(at)
    text = _texts(at)
    assert "Against tag:main" in text and "noise from 5 profiled baseline runs" in text
    assert "over all 77 components of every level" in text  # 73, the time between steps, idle in long gaps, 2 places
    table = next(d.value for d in at.dataframe if "delta_ms" in d.value.columns)
    first = table[table["verdict"] == "changed"].iloc[0]
    assert (first["level"], first["component"]) == ("category", "idle_long")

@pytest.mark.slow
def test_anatomy_view_lists_the_stall_s_long_gap_by_place(explain_lane, monkeypatch):
    """The anatomy of a stall run (tests/data/explain stall_1: a sleep between forward and backward) lists its long
    gap's place, in every steady step; a baseline run's says it has none."""
    (stalled, base) = _explain_ids(explain_lane, "stall_1", "base_1")
    at = _app(explain_lane, monkeypatch, view="anatomy", id=stalled)
    _no_exception(at)
    gaps = next(d.value for d in at.dataframe if "place" in d.value.columns)
    assert gaps.iloc[0]["share_pct"] == 100.0 and gaps.iloc[0]["place"].endswith(" #1")
    at = _app(explain_lane, monkeypatch, view="anatomy", id=base)
    _no_exception(at)
    assert "No GPU gap of 0.5 ms or more in a steady step" in _texts(at)


def test_the_report_beside_an_export_is_named_for_nsys_ui(tmp_path, monkeypatch):
    """tests/data/gpu keeps fsdp2_2gpu_nsys.nsys-rep beside its export: that report is the one to open."""
    from cli_helpers import cli

    d = Path(__file__).resolve().parent / "data" / "gpu"
    db = str(tmp_path / "rep.duckdb")
    assert cli(db, "ingest", str(d / "fsdp2_2gpu_nsys" / "run.log")).exit_code == 0
    assert cli(db, "ingest", str(d / "fsdp2_2gpu_nsys.sqlite.gz"), "--attach", "fsdp2_2gpu_nsys").exit_code == 0
    at = _app(db, monkeypatch, view="anatomy")
    _no_exception(at)
    expander = next(e for e in at.expander if e.label == "Open the source export")
    text = "\n".join(m.value for m in expander.markdown)
    assert f"`nsys-ui {d / 'fsdp2_2gpu_nsys.nsys-rep'}`" in text


def test_an_unknown_reserved_is_not_drawn_as_zero():
    """A log that prints allocated memory per step but no reserved (nanochat's `mem:`): the chart draws the
    allocated line alone, never a reserved line at 0 GiB, and no gap."""
    import polars as pl

    from receipts.dashboards import charts

    mem = pl.DataFrame({"step": [1, 2, 3], "allocated_bytes": [20 << 30, 21 << 30, 22 << 30],
                        "reserved_bytes": [None, None, None]}, schema_overrides={"reserved_bytes": pl.Int64})
    spec = charts.memory_series(mem).to_dict()
    values = [v for data in spec["datasets"].values() for v in data]
    assert {v["kind"] for v in values} == {"allocated"} and all(v["gib"] > 0 for v in values)
    assert "layer" not in spec and "allocated per step" in spec["title"]
    both = mem.with_columns(reserved_bytes=pl.Series([24 << 30, None, 26 << 30]))
    spec = charts.memory_series(both).to_dict()
    rows = [v for data in spec["datasets"].values() for v in data]
    assert sorted((v["kind"], v["step"]) for v in rows if "kind" in v) == [
        ("allocated", 1), ("allocated", 2), ("allocated", 3), ("reserved", 1), ("reserved", 3)]
    assert len(spec["layer"]) == 2  # the gap where both are known, and the lines


def test_an_mlperf_result_without_a_series_reads_without_none(tmp_path, monkeypatch):
    """One block covering the whole LoRA run (its first block and run_stop, from the real v5.1 log): no window,
    no host in the log. The page says so in words: never 'blocks None–None', 'hostname None' or a median None."""
    from cli_helpers import cli_json

    lora = Path(__file__).resolve().parent / "data" / "mlperf" / "v5.1__Dell_1xXE9680x8H200-SXM-141GB_llama2_70b_lora_result_0.txt"
    lines, blocks = [], 0
    for line in lora.read_text().splitlines():
        blocks += '"key": "block_start"' in line
        if blocks <= 1 or '"key": "run_stop"' in line:
            lines.append(line)
    one = tmp_path / "one_block.txt"
    one.write_text("\n".join(lines) + "\n")
    db = str(tmp_path / "mlperf.duckdb")
    code, out = cli_json(db, "ingest", str(one), "--host-lineage", "dell-xe9680-h200", "--preset", "mlperf_v51",
                         "--regime", "megatron/unknown-compile")
    assert code == 0, out
    rid = cli_json(db, "show", "one_block")[1]["id"]
    at = _app(db, monkeypatch, view="receipt", id=rid)
    _no_exception(at)
    shown = _texts(at) + "\n".join(str(m.value) for m in at.metric)
    assert "None" not in shown, [line for line in shown.splitlines() if "None" in line]
    assert "No steady-state window: the log has no block series" in shown and "hostname not in the log" in shown


def test_the_anatomy_per_step_chart_is_scaled_to_the_steady_steps():
    """The real 2-GPU nsys export's step 0 (a ~2 s compile) is clipped: the scale tops at the largest steady step
    (x 1.15), so the steady steps' parts stay readable."""
    from receipts.analysis.anatomy import anatomy_report
    from receipts.dashboards import charts
    from receipts.store import open_store
    from cli_helpers import cli

    import tempfile
    import polars as pl

    d = Path(__file__).resolve().parent / "data" / "gpu"
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "a.duckdb")
        assert cli(db, "ingest", str(d / "fsdp2_2gpu_nsys" / "run.log")).exit_code == 0
        assert cli(db, "ingest", str(d / "fsdp2_2gpu_nsys.sqlite.gz"), "--attach", "fsdp2_2gpu_nsys").exit_code == 0
        with open_store(db, read_only=True) as store:
            rid = store.resolve("fsdp2_2gpu_nsys")
            src = anatomy_report(store, rid).source
            rows = store.query("anatomy_rows", {"receipt_id": rid, "source_sha256": src.sha256})
    spec = charts.anatomy_by_step(rows).to_dict()
    top = spec["spec"]["encoding"]["y"]["scale"]["domain"][1]
    per_step = (rows.filter(pl.col("category").is_in(charts.DECOMPOSITION))
                .group_by("rank", "step", "warmup").agg(pl.col("time_ms").sum()))
    steady_max = per_step.filter(~pl.col("warmup"))["time_ms"].max()
    assert top == pytest.approx(steady_max * 1.15)
    assert per_step.filter(pl.col("warmup"))["time_ms"].max() > 10 * top  # the compile step is the clipped one


@pytest.mark.slow
def test_compare_view_overlays_more_runs_of_the_lane(explain_lane, monkeypatch):
    """A and B with three more runs of their lane (the real explain lane, ?more= in the URL): every run's steady
    steps, A and B keeping their colours first, each run's median a line; a linked id from outside the lane, or
    A itself, is not overlaid."""
    a, b, *more = _explain_ids(explain_lane, "base_1", "base_2", "base_3", "aa_1", "attn_1")
    at = _app(explain_lane, monkeypatch, view="compare", a=a, b=b, more=",".join([*more, a, "0" * 64]))
    _no_exception(at)
    picker = next(m for m in at.multiselect if m.key == "compare_more")
    assert sorted(picker.value) == sorted(more) and a not in picker.options and b not in picker.options
    assert len(picker.options) == 12  # the lane's 14 runs less A and B
    spec = next(json.loads(c.proto.spec) for c in _charts(at) if "more of the lane" in c.proto.spec)
    assert spec["title"] == "steady step time, A, B and 3 more of the lane"
    points, rules = spec["layer"]
    domain = points["encoding"]["color"]["scale"]["domain"]
    assert domain[:2] == ["A base_1", "B base_2"] and sorted(domain[2:]) == ["aa_1", "attn_1", "base_3"]
    assert points["mark"]["opacity"] >= 0.75 and points["mark"]["size"] >= 8  # dots one can see
    assert rules["mark"]["strokeDash"]  # each run's median, dashed
    assert sorted(at.query_params["more"].split(",")) == sorted(more)  # the choice stays in the URL: linkable


def test_step_dots_stay_visible_however_many_steps():
    """The overlay's dots: large where a run has few steps, never below 8 px² where it has thousands."""
    from receipts.dashboards import charts

    assert charts._dot_size(40) == 48.0 and charts._dot_size(1000) == 8.0 and charts._dot_size(0) == 48.0
    assert charts._dot_size(300) == 20.0


def test_a_link_to_a_superseded_receipt_names_the_receipt_that_replaced_it(tmp_path, monkeypatch):
    """A real nanochat log ingested at step 100, then again once the run went on: the first receipt is an older
    copy of the run. A link to it (say from an old PR comment) says so and links its successor; it never shows
    another run in its place, and an unknown id is still 'no receipt'."""
    from cli_helpers import cli, cli_json
    from conftest import realdata

    db = str(tmp_path / "r.duckdb")
    lane = ("--host-lineage", "gtx1660-desk", "--preset", "nanochat_d2_sft", "--regime", "single/no-compile")
    lines = realdata("logs", "sft_run_gtx1660.log").read_text().splitlines(keepends=True)
    cut = [i for i, line in enumerate(lines) if line.startswith("step ")][99]
    log = tmp_path / "run" / "train.log"
    log.parent.mkdir()
    log.write_text("".join(lines[:cut + 1]))
    assert cli(db, "ingest", str(log), *lane).exit_code == 0
    first = cli_json(db, "show", "train")[1]["id"]
    log.write_text("".join(lines))
    assert cli(db, "ingest", str(log), *lane).exit_code == 0
    current = cli_json(db, "show", "train")[1]["id"]
    assert current != first
    at = _app(db, monkeypatch, view="receipt", id=first)
    _no_exception(at)
    (warning,) = [w.value for w in at.warning if "superseded" in w.value]
    assert f"Receipt {first} (train) is an older copy of its run, superseded by [{current}]" in warning
    assert f"(?view=receipt&id={current})" in warning
    unknown = _app(db, monkeypatch, view="receipt", id="f" * 16)
    assert any(f"No receipt {'f' * 16} in this store" in e.value for e in unknown.error)
