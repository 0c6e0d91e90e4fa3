"""Every dashboard view, driven headlessly with Streamlit's AppTest over a store of real ingested data
(tests/dashboard_store.py builds it): lanes, receipt, anatomy, compare, history, stragglers."""

from __future__ import annotations

import json
from pathlib import Path
import pytest

from dashboard_store import HOST, OTHER_HOST, PRESET, REGIME, SOAP, YARN, _app, _charts, _no_exception, _texts
from dashboard_store import store_ids  # noqa: F401  (a module-scoped fixture: pytest finds it by this name)


def test_lanes_view_groups_by_identity_and_marks_rumors(store_ids, monkeypatch):
    db, ids = store_ids
    at = _app(db, monkeypatch)
    _no_exception(at)
    assert at.sidebar.radio[0].value == "lanes"
    assert "Lanes" in _texts(at)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["receipts"] == "4" and metrics["rumors (incomplete identity)"] == "1"
    assert metrics["lanes"] == "2"  # the speedrun lane (2 receipts) and the other host's lane
    assert len(_charts(at)) == 1
    receipts = at.dataframe[1].value
    assert set(receipts["run_name"]) == {"soap", "yarn", "gtx1660", "rumor-fragmenting"}
    rumor = receipts[receipts["run_name"] == "rumor-fragmenting"].iloc[0]
    assert rumor["identity"] == "⚠ rumor: missing launch_regime"
    lanes = at.dataframe[0].value
    speedrun = lanes[lanes["lane"] == f"{HOST} · {PRESET} · {REGIME}"].iloc[0]
    assert speedrun["n_receipts"] == 2


def test_lanes_filters_and_search_go_through_sql_params(store_ids, monkeypatch):
    db, ids = store_ids
    at = _app(db, monkeypatch)
    at.multiselect[0].set_value([OTHER_HOST]).run()
    _no_exception(at)
    assert {m.label: m.value for m in at.metric}["receipts"] == "1"
    at.multiselect[0].set_value([]).run()
    at.text_input[0].set_value("soap").run()
    assert list(at.dataframe[1].value["run_name"]) == ["soap"]
    at.text_input[0].set_value("").run()
    at.selectbox[0].set_value("v25").run()  # lineage tag
    assert list(at.dataframe[1].value["run_name"]) == ["yarn"]


def test_receipt_view_shows_identity_env_topology_steps_and_memory_drift(store_ids, monkeypatch):
    db, ids = store_ids
    at = _app(db, monkeypatch, view="receipt", id=ids["rumor"])
    _no_exception(at)
    text = _texts(at)
    assert "Rumor: missing launch_regime" in text
    assert "GPU pairs off NVLink (NV# expected): GPU0–GPU3 SYS" in text
    assert "Fragmentation drift" in text
    env = next(d.value for d in at.dataframe if "state" in d.value.columns)
    assert set(env[env["state"] == "∅ explicitly unset"]["name"]) == {"NCCL_P2P_DISABLE", "CUDA_DEVICE_MAX_CONNECTIONS"}
    assert len(_charts(at)) == 4  # topology, step time, training metrics (tokens/s), memory per step
    assert "warm-up through step" in text


def test_receipt_view_of_a_real_log_shows_window_and_peak_gap(store_ids, monkeypatch):
    db, ids = store_ids
    at = _app(db, monkeypatch, view="receipt", id=ids["b"])  # yarn: its log prints peak allocated/reserved
    _no_exception(at)
    text = _texts(at)
    assert "Identity complete" in text and "Steady-state window: steps" in text
    assert "No topology recorded" in text
    assert "Fragmentation gap at peak" in text
    assert len(_charts(at)) == 2  # step time with warm-up band, per-rank peaks


def test_anatomy_view_draws_categories_ranks_phases_and_nvtx(store_ids, monkeypatch):
    db, ids = store_ids
    at = _app(db, monkeypatch, view="anatomy", id=ids["a"])
    _no_exception(at)
    text = _texts(at)
    assert "mfu_2gpu_before.sqlite" in text
    assert len(_charts(at)) == 5  # per step x rank, per rank, categories (overlapping), warm-up vs steady, NVTX
    spec = json.dumps([c.proto.spec for c in _charts(at)])
    assert "exposed_comm" in spec and "idle" in spec and "idle_long" in spec  # the idle of long gaps, its own part
    # the stacked charts stack only the parts that sum to the step, named for a reader
    assert "parts that sum to the step" in spec and "compute_only" in spec and "comm_hidden" in spec
    assert "categories overlap, not additive" in spec


def test_compare_view_comparable_pair_shows_ratio_anatomy_and_drift(store_ids, monkeypatch):
    db, ids = store_ids
    at = _app(db, monkeypatch, view="compare", a=ids["a"], b=ids["b"])
    _no_exception(at)
    text = _texts(at)
    assert "Refused" not in text
    assert "Same lane. Verdict:" in text and "Interval:" in text and "Noise floor:" in text
    assert any(m.label == "noise floor" for m in at.metric) and any(m.label == "floor from" for m in at.metric)
    for kind in ("recipe", "runtime", "infrastructure"):
        assert f"**{kind}**" in text
    assert len(_charts(at)) == 4  # ratio with CI, step times overlaid, their distributions, anatomy side by side
    assert "Step times, overlaid" in text


def test_compare_overlay_aligns_both_runs_by_steady_position(store_ids):
    """sql/dash_compare_series.sql over real receipts: each run's steady steps, numbered from 0 after its own
    warm-up, each step's time its slowest rank's (the steady_step_times macro)."""
    from receipts.store import open_store

    db, ids = store_ids
    store = open_store(db, read_only=True)
    try:
        series = store.query("dash_compare_series", {"a_id": ids["a"], "b_id": ids["b"], "more": []})
        steady = store.query("steady_steps_many", {"ids": [ids["a"], ids["b"]]})
        with_more = store.query("dash_compare_series", {"a_id": ids["a"], "b_id": ids["b"], "more": [ids["rumor"]]})
    finally:
        store.close()
    for side, rid in (("A", ids["a"]), ("B", ids["b"])):
        own = series.filter(series["side"] == side)
        assert own["receipt_id"].unique().to_list() == [rid]
        assert own["steady_index"].to_list() == list(range(own.height))
        assert own["step_ms"].to_list() == steady.filter(steady["receipt_id"] == rid)["step_ms"].to_list()
    assert with_more.filter(with_more["side"] != "more").equals(series)  # an overlaid run leaves A and B as they were
    assert with_more.filter(with_more["side"] == "more")["receipt_id"].unique().to_list() == [ids["rumor"]]


def test_compare_view_refusal_is_the_page(store_ids, monkeypatch):
    db, ids = store_ids
    at = _app(db, monkeypatch, view="compare", a=ids["a"], b=ids["other"])
    _no_exception(at)
    assert at.title[0].value == "Refused: not comparable"
    assert "not the same lane: host_lineage" in at.error[0].value
    diffs = next(d.value for d in at.dataframe if "why" in d.value.columns)
    assert list(diffs["field"]) == ["host_lineage"]
    assert list(diffs["B"]) == [OTHER_HOST]
    assert not _charts(at)  # nothing else competes with the refusal


def test_compare_view_refuses_a_rumor(store_ids, monkeypatch):
    db, ids = store_ids
    at = _app(db, monkeypatch, view="compare", a=ids["a"], b=ids["rumor"])
    _no_exception(at)
    assert at.title[0].value == "Refused: not comparable"
    assert "rumor" in at.error[0].value


def test_lane_history_view_shows_noise_floor_and_change_points(store_ids, monkeypatch):
    db, ids = store_ids
    at = _app(db, monkeypatch, view="history", host=HOST, preset=PRESET, regime=REGIME)
    _no_exception(at)
    metrics = {m.label: m.value for m in at.metric}
    # two runs in the lane: the default floor, and too few runs for a change point (a t-test needs 3)
    assert metrics["receipts in lane"] == "2" and metrics["change points"] == "0"
    assert metrics["noise floor"] == "1.50%"
    assert any("Noise floor (default)" in c.value for c in at.caption)
    assert len(_charts(at)) == 2
    at.radio(key="history_x").set_value("git_rev").run()
    _no_exception(at)
    assert len(_charts(at)) == 2


def test_lane_history_view_marks_the_change_point_of_the_real_h100_runs(tmp_path, monkeypatch):
    noise = Path(__file__).resolve().parent / "data" / "noise"
    logs = sorted(noise.glob("*/run.log"))
    if len(logs) < 15:
        pytest.skip("tests/data/noise not present")
    from cli_helpers import cli

    db = str(tmp_path / "noise.duckdb")
    assert cli(db, "ingest", *map(str, logs)).exit_code == 0
    at = _app(db, monkeypatch, view="history", host="h100-device-x1", preset="toy_fsdp2_v1", regime="fsdp2/no-compile")
    _no_exception(at)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["receipts in lane"] == "15" and metrics["change points"] == "1"
    table = next(d.value for d in at.dataframe if "change (%)" in d.value.columns)
    assert list(table["run"]) == ["slow_1"] and 1.5 < table["change (%)"][0] < 3.5
    assert any("MAD of 15 run medians" in c.value for c in at.caption)


def test_sidebar_switches_views(store_ids, monkeypatch):
    db, ids = store_ids
    at = _app(db, monkeypatch)
    for view in ("receipt", "anatomy", "compare", "history", "lanes"):
        at.sidebar.radio[0].set_value(view).run()
        _no_exception(at)
        assert at.query_params["view"] == [view] or at.query_params["view"] == view


def test_missing_store_is_one_plain_error(tmp_path, monkeypatch):
    at = _app(str(tmp_path / "absent.duckdb"), monkeypatch)
    _no_exception(at)
    assert "Cannot open the store" in at.error[0].value


def test_mlperf_receipt_has_time_to_train_as_its_headline(tmp_path, monkeypatch):
    """An MLPerf result's page leads with time to train and names the series unit (epoch)."""
    retinanet = Path(__file__).resolve().parent / "data" / "mlperf" / "v5.1__Dell_1xXE9680x8H200-SXM-141GB_retinanet_result_0.txt"
    from cli_helpers import cli_json

    db = str(tmp_path / "mlperf.duckdb")
    code, out = cli_json(db, "ingest", str(retinanet), "--host-lineage", "dell-xe9680-h200", "--preset", "mlperf_v51",
                         "--regime", "megatron/unknown-compile")
    assert code == 0, out
    rid = cli_json(db, "show", retinanet.stem)[1]["id"]
    at = _app(db, monkeypatch, view="receipt", id=rid)
    _no_exception(at)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["time to train (MLPerf run_start → run_stop)"] == "33.84 min"
    assert metrics["steady epochs"] == "3" and "median epoch (ms)" in metrics


def test_stragglers_view_names_the_planted_rank(tmp_path, monkeypatch):
    """The planted 2×H200 straggler (tests/data/gpu/straggler): rank 1 named with its impact, a rank × step heatmap."""
    from cli_helpers import cli

    d = Path(__file__).resolve().parent / "data" / "gpu" / "straggler"
    db = str(tmp_path / "straggler.duckdb")
    assert cli(db, "ingest", str(d / "straggler_plant_nsys" / "run.log")).exit_code == 0
    assert cli(db, "ingest", "--attach", "straggler_plant_nsys", str(d / "straggler_plant_nsys.sqlite.gz")).exit_code == 0
    at = _app(db, monkeypatch, view="stragglers")
    _no_exception(at)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["straggler"] == "rank 1" and metrics["cause"] == "compute"
    assert metrics["what-if impact"].endswith("ms/step")
    impact = next(m for m in at.metric if m.label == "what-if impact")
    assert not impact.delta  # a delta's arrow up reads as good news; the time lost is no gain
    assert "% of the step) shorter" in _texts(at)
    assert _charts(at), "the rank × step wait heatmap"
    headers = [str(c) for frame in at.dataframe for c in frame.value.columns]
    assert "own wait (ms/step)" in headers and not [h for h in headers if "_" in h], headers  # read, not snake_case
    per_rank = next(f.value for f in at.dataframe if "arrived last (%)" in f.value.columns)
    assert list(per_rank.columns[:2]) == ["rank", "arrived last (%)"]  # as the CLI: the rank first, a percentage
    assert per_rank.set_index("rank").loc[1, "arrived last (%)"] == pytest.approx(85.29, abs=0.01)  # the CLI: 85%


def test_a_stale_link_says_so_instead_of_showing_another_run(store_ids, monkeypatch):
    db, ids = store_ids
    at = _app(db, monkeypatch, view="receipt", id="deadbeef")
    _no_exception(at)
    assert any("No receipt deadbeef in this store" in e.value for e in at.error)
    assert at.query_params["id"] == ["deadbeef"] or at.query_params["id"] == "deadbeef"  # the URL is not rewritten
    assert not at.metric  # no receipt's figures on the page


def test_compare_with_itself_is_said(store_ids, monkeypatch):
    db, ids = store_ids
    at = _app(db, monkeypatch, view="compare", a=ids["a"], b=ids["a"])
    _no_exception(at)
    assert any("same receipt" in w.value for w in at.warning)


def test_step_chart_is_scaled_to_the_steady_window():
    """nanochat's 18 s step 0 must not flatten ~645 ms steady steps to a line at zero."""
    pytest.importorskip("altair")
    import polars as pl

    from receipts.dashboards import charts

    steps = pl.DataFrame({"step": list(range(200)), "rank": [0] * 200,
                          "step_ms": [18000.0, 900.0] + [645.0 + (i % 7) for i in range(198)]})
    spec = charts.step_series(steps, warmup_last_step=1).to_dict()
    domains = [layer["encoding"]["y"]["scale"]["domain"] for layer in spec["layer"] if "y" in layer.get("encoding", {})]
    assert domains and 650 < domains[0][1] < 800


def test_compare_b_picker_offers_a_lane_only(store_ids, monkeypatch):
    """B's picker lists the receipts of A's lane (A itself, rumors and other lanes left out) unless 'any lane'
    is ticked; a link naming another lane's B is still honoured (the refusal is the page)."""
    db, ids = store_ids
    at = _app(db, monkeypatch, view="compare", a=ids["a"])
    _no_exception(at)
    b_picker = at.selectbox[1]
    assert [o for o in b_picker.options if ids["b"][:12] in o] and len(b_picker.options) == 1
    at = _app(db, monkeypatch, view="compare", a=ids["a"], any_lane="1")
    assert len(at.selectbox[1].options) > 1


def test_receipt_view_charts_the_training_metrics_the_log_printed(store_ids, monkeypatch):
    """Loss, tokens/s and MFU were parsed and stored but never charted."""
    db, ids = store_ids
    at = _app(db, monkeypatch, view="receipt", id=ids["other"])  # nanochat: loss, tokens/s and MFU per step
    _no_exception(at)
    assert "Training metrics the log printed" in _texts(at)
    import polars as pl

    from receipts.dashboards import charts

    assert charts.training_metrics(pl.DataFrame({"step": [1, 2], "step_ms": [1.0, 2.0]})) is None


def test_topology_with_nics_shows_gpus_only_by_default(tmp_path, monkeypatch):
    """An 8-GPU + NIC matrix is unreadable: a 'GPUs only' toggle, on by default. The fixture is the
    layout of `nvidia-smi topo -m` on an 8-GPU node with two NICs (GPU pairs NV18, GPU-NIC PIX/SYS)."""
    from cli_helpers import cli, cli_json

    gpus = [f"GPU{i}" for i in range(8)]
    header = "\t" + "\t".join(gpus + ["NIC0", "NIC1", "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])
    rows = []
    for i, g in enumerate(gpus):
        cells = [" X " if j == i else "NV18" for j in range(8)] + ["PIX" if i < 4 else "SYS", "SYS" if i < 4 else "PIX"]
        rows.append("\t".join([g, *cells, "0-55" if i < 4 else "56-111", "0" if i < 4 else "1", "", "N/A"]))
    for n in range(2):
        cells = [("PIX" if (i < 4) == (n == 0) else "SYS") for i in range(8)] + [" X " if m == n else "SYS" for m in range(2)]
        rows.append("\t".join([f"NIC{n}", *cells]))
    topo = tmp_path / "topo.txt"
    topo.write_text("\n".join([header, *rows, "", "Legend:", "", "  X    = Self", "  NV#  = Connection traversing a bonded set of # NVLinks",
                               "", "NIC Legend:", "", "  NIC0: mlx5_0", "  NIC1: mlx5_1", ""]) + "\n")
    log = Path(__file__).resolve().parent / "data" / "gpu" / "fsdp2_2gpu_nsys" / "run.log"
    db = str(tmp_path / "t.duckdb")
    assert cli(db, "ingest", str(log)).exit_code == 0
    result = cli(db, "ingest", "--attach", "fsdp2_2gpu_nsys", "--force", str(topo))
    assert result.exit_code == 0, result.output
    rid = cli_json(db, "show", "fsdp2_2gpu_nsys")[1]["id"]
    at = _app(db, monkeypatch, view="receipt", id=rid)
    _no_exception(at)
    assert at.toggle and at.toggle[0].label == "GPUs only" and at.toggle[0].value is True


def test_nccl_tests_bus_bandwidth_attached_to_a_receipt_is_shown(tmp_path, monkeypatch):
    """nccl-tests output attached with --attach appeared nowhere; real all_reduce_perf output."""
    from cli_helpers import cli, cli_json
    from conftest import realdata

    perf = realdata("sysinfo", "a3mega_2x8xH100_all_reduce_perf.md")
    db = str(tmp_path / "n.duckdb")
    log = Path(__file__).resolve().parent / "data" / "gpu" / "fsdp2_2gpu_nsys" / "run.log"
    assert cli(db, "ingest", str(log)).exit_code == 0
    result = cli(db, "ingest", "--attach", "fsdp2_2gpu_nsys", "--force", str(perf))
    assert result.exit_code == 0, result.output
    rep = cli_json(db, "show", "fsdp2_2gpu_nsys")[1]
    at = _app(db, monkeypatch, view="receipt", id=rep["id"])
    _no_exception(at)
    metrics = {m.label: m.value for m in at.metric}
    want = rep["topology"]["nccl_tests"]["avg_busbw_gbps"]
    assert metrics["avg bus bandwidth"] == f"{want:.1f} GB/s"


def test_history_axis_names_its_time_unit():
    """Runs seconds apart read '.900 .900 :58' with Vega's automatic ticks: the format follows the span."""
    pytest.importorskip("altair")
    from datetime import datetime, timedelta

    import polars as pl

    from receipts.dashboards import charts

    t0 = datetime(2026, 11, 23, 10, 0, 0)
    frame = pl.DataFrame({"run_at": [t0 + timedelta(seconds=i) for i in range(5)]})
    assert charts._history_x("run_at", frame).to_dict()["axis"]["format"] == "%H:%M:%S"
    frame = pl.DataFrame({"run_at": [t0 + timedelta(days=40 * i) for i in range(5)]})
    assert charts._history_x("run_at", frame).to_dict()["axis"]["format"] == "%Y-%m-%d"


def test_stragglers_view_names_the_export_the_report_came_from(tmp_path, monkeypatch):
    """With a single-rank export attached after the multi-rank one, the newest export has no report: the page
    must name the export its report came from, not whichever export is listed first."""
    from cli_helpers import cli

    gpu = Path(__file__).resolve().parent / "data" / "gpu"
    plant = gpu / "straggler" / "straggler_plant_nsys.sqlite.gz"
    db = str(tmp_path / "s.duckdb")
    assert cli(db, "ingest", str(gpu / "straggler" / "straggler_plant_nsys" / "run.log")).exit_code == 0
    assert cli(db, "ingest", "--attach", "straggler_plant_nsys", str(plant)).exit_code == 0
    import time

    time.sleep(1.1)  # ingested_at has one-second resolution: the single-rank export is the newer one
    result = cli(db, "ingest", "--attach", "straggler_plant_nsys", "--force", str(gpu / "fsdp2_1gpu_nsys.sqlite.gz"))
    assert result.exit_code == 0, result.output
    at = _app(db, monkeypatch, view="stragglers")
    _no_exception(at)
    assert any(str(plant.resolve()) in c.value for c in at.caption)
    assert not any("fsdp2_1gpu_nsys" in c.value for c in at.caption)


def test_lane_filters_live_in_the_url(store_ids, monkeypatch):
    """A filtered lane view is a link: the filters are written into the URL, and a link (or a reload) with
    them opens the view filtered. A value this store does not have is dropped, not an error."""
    db, ids = store_ids
    at = _app(db, monkeypatch)
    at.multiselect[0].set_value([OTHER_HOST]).run()
    at.text_input[0].set_value("gtx").run()
    assert at.query_params["host"] in ([OTHER_HOST], OTHER_HOST) and at.query_params["q"] in (["gtx"], "gtx")
    at.text_input[0].set_value("").run()
    assert "q" not in at.query_params

    opened = _app(db, monkeypatch, view="lanes", host=OTHER_HOST, tag="v25")
    _no_exception(opened)
    assert opened.multiselect[0].value == [OTHER_HOST]
    assert opened.selectbox[0].value == "v25"
    assert {m.label: m.value for m in opened.metric}["receipts"] == "0"  # yarn (v25) is not on the other host
    shared = _app(db, monkeypatch, view="lanes", host="no-such-host", q="soap")
    _no_exception(shared)
    assert shared.multiselect[0].value == [] and list(shared.dataframe[1].value["run_name"]) == ["soap"]


def test_anatomy_view_says_where_the_export_is_and_how_to_open_it(store_ids, monkeypatch):
    db, ids = store_ids
    at = _app(db, monkeypatch, view="anatomy", id=ids["a"])
    _no_exception(at)
    expander = next(e for e in at.expander if e.label == "Open the source export")
    shown = [c.value for c in expander.code]
    assert len(shown) == 1 and shown[0].endswith("mfu_2gpu_before.sqlite")
    text = "\n".join(m.value for m in expander.markdown)
    # only the .sqlite is kept in realdata/: the report it came from is not named as if it were there
    assert "`nsys-ui " not in text and "no `mfu_2gpu_before.nsys-rep` beside this export" in text
    # the export is on this machine (the store was built from it here): offered for download
    assert any(b.label == "download mfu_2gpu_before.sqlite" for b in expander.get("download_button"))


def test_lanes_and_history_date_a_log_by_its_own_timestamps(tmp_path, monkeypatch):
    """Run dates come from the log when it carries them (nvidia-smi's banner in a speedrun record), not from the
    ingest: the lane list shows them and lane history orders by them, whatever order the logs were ingested in."""
    from cli_helpers import cli, cli_json

    db = str(tmp_path / "dated.duckdb")
    lane = ("--host-lineage", HOST, "--preset", PRESET, "--regime", REGIME)
    for path in (YARN, SOAP):  # the newer run first
        assert cli(db, "ingest", str(path), *lane).exit_code == 0
    at = _app(db, monkeypatch)
    _no_exception(at)
    listed = at.dataframe[1].value
    run_at = dict(zip(listed["run_name"], listed["run_at"].astype(str)))
    assert run_at == {SOAP.stem: "2024-10-09 18:10:50", YARN.stem: "2025-09-11 04:05:30"}
    history = _app(db, monkeypatch, view="history", host=HOST, preset=PRESET, regime=REGIME)
    _no_exception(history)
    assert {m.label: m.value for m in history.metric}["receipts in lane"] == "2"
    # the latest median is the last run in run order: Yarn (its log is dated 2025), though SOAP was ingested last
    code, rows = cli_json(db, "list")
    assert code == 0
    yarn_ms = next(r["median_step_ms"] for r in rows if r["run_name"] == YARN.stem)
    assert {m.label: m.value for m in history.metric}["latest median step (ms)"] == f"{yarn_ms:,.2f}"


def test_a_profile_read_from_a_folder_lists_its_files_and_how_to_open_them_together(tmp_path, monkeypatch):
    """One job profiled one nsys report per rank (tests/data/gpu/multiexport): the source is the folder."""
    from cli_helpers import cli

    run_dir = Path(__file__).resolve().parent / "data" / "gpu" / "multiexport" / "per_rank_gloo"
    db = str(tmp_path / "job.duckdb")
    assert cli(db, "ingest", str(run_dir)).exit_code == 0
    at = _app(db, monkeypatch, view="anatomy")
    _no_exception(at)
    expander = next(e for e in at.expander if e.label == "Open the source export")
    assert [c.value for c in expander.code] == [str(run_dir.resolve())]
    assert "2 Nsight Systems exports of one job" in "\n".join(m.value for m in expander.markdown)
    assert "rank0.sqlite.gz, rank1.sqlite.gz" in "\n".join(c.value for c in expander.caption)
    assert not expander.get("download_button")  # a folder is not one file to download


