"""GPU telemetry as an infrastructure cause, on a series recorded on an H200 (tests/data/telemetry/README.md) and a
throttled run derived from it: the footer's summary is the series' own, `show` prints it, `compare` names the
clock drift, and `explain` says when every kernel is slower by the clock ratio."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from receipts.analysis import telemetry
from receipts.capture.telemetry import read_series, summarise, write_series
from receipts.launch.launcher import visible_gpu_indices
from receipts.schema.telemetry import telemetry_of
from tests.cli_helpers import cli, cli_json
from tests.conftest import REPO

DATA = REPO / "tests" / "data" / "telemetry" / "launched"
RATIO = 0.7   # the derived run's SM clocks: 70% of the recorded ones (a power brake's depth)
HW_SLOWDOWN = 0x8


def _footer() -> dict:
    lines = [line for line in (DATA / "run.log").read_text().splitlines() if '"writer":"receipts run"' in line]
    return json.loads(lines[-1].split("RECEIPT ", 1)[1])


def throttled_samples() -> list[dict]:
    """The recorded series with every busy sample's SM clock at RATIO and the hardware slowdown bit set."""
    out = []
    for s in read_series(DATA / "telemetry.csv")[0]:
        if (s["gpu_util_pct"] or 0) >= 50:
            s = {**s, "sm_clock_mhz": round(s["sm_clock_mhz"] * RATIO), "throttle_mask": s["throttle_mask"] | HW_SLOWDOWN}
        out.append(s)
    return out


def derive_throttled(folder, *, kernels: str = "all") -> None:
    """A copy of the recorded run on throttled GPUs: its footer's telemetry summarised from throttled_samples(), each
    step and each kernel (`kernels='all'`; 'gemm': only the GEMMs, a code change on the same throttled GPUs) slower by
    1/RATIO, a new run id."""
    folder.mkdir()
    samples = throttled_samples()
    write_series(folder / "telemetry.csv", samples)
    text = (DATA / "run.log").read_text()
    text = text.replace('"run_id":"45472b582a2f43f9969ecb2fe7ec5a60"', f'"run_id":"throttled-{kernels}"')
    text = text.replace('"tags":["main"]', '"tags":["pr-throttled"]')  # a candidate, the recorded run its baseline
    text = re.sub(r'"step_ms":([0-9.]+)', lambda m: f'"step_ms":{float(m.group(1)) / RATIO}', text)
    footer = _footer()
    gpu = footer["telemetry"]["gpus"][0]
    gpu["summary"] = summarise(samples, interval_s=footer["telemetry"]["interval_s"])
    lines = text.splitlines()
    lines[-1] = "RECEIPT " + json.dumps(footer, separators=(",", ":"))
    (folder / "run.log").write_text("\n".join(lines) + "\n")
    (folder / "traces").mkdir()
    for trace in (DATA / "traces").glob("*.json.gz"):
        doc = json.loads(gzip.decompress(trace.read_bytes()))
        for event in doc["traceEvents"]:
            if event.get("cat") == "kernel" and (kernels == "all" or "nvjet" in event.get("name", "")):
                event["dur"] = event["dur"] / RATIO
        (folder / "traces" / trace.name).write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("telemetry")
    db = str(root / "t.duckdb")
    shutil.copytree(DATA, root / "recorded")
    derive_throttled(root / "throttled")
    derive_throttled(root / "gemm_throttled", kernels="gemm")
    for name in ("recorded", "throttled", "gemm_throttled"):
        assert cli(db, "ingest", str(root / name)).exit_code == 0
    return db


def test_the_footer_summary_is_the_recorded_series_own():
    footer = _footer()
    (gpu,) = footer["telemetry"]["gpus"]
    samples = read_series(DATA / "telemetry.csv")[gpu["gpu_index"]]
    assert summarise(samples, interval_s=footer["telemetry"]["interval_s"]) == gpu["summary"]
    # what the H200 did (tests/data/telemetry/README.md): held at its 700 W cap through every busy sample
    assert gpu["summary"]["sm_clock_mhz"] == 1680 and gpu["summary"]["throttle_share"] == {"sw_power_cap": 1.0}
    (t,) = telemetry_of(footer)
    assert (t.rank, t.busy_samples, t.samples, t.power_limit_w) == (0, 90, 157, 700.0)


@pytest.mark.slow  # three runs ingested with their Kineto traces, one rewritten
def test_show_compare_and_explain_read_the_telemetry(store):
    code, shown = cli_json(store, "show", "recorded")
    assert code == 0 and shown["telemetry"]["sm_clock_mhz"] == 1680
    assert shown["telemetry"]["ranks"][0]["throttle_share"] == {"sw_power_cap": 1.0}

    code, out = cli_json(store, "compare", "recorded", "throttled")
    infra = {d["field"]: d for d in out["drift"]["infrastructure"]}
    assert infra["gpu_sm_clock_mhz"]["a"] == 1680 and infra["gpu_sm_clock_mhz"]["b"] == round(1680 * RATIO)
    assert infra["gpu_throttle_reasons"]["b"] == "sw_power_cap 100%, hw_slowdown 100%"
    assert "machine_class" not in infra  # the same GPUs: only their clocks moved
    text = cli(store, "compare", "recorded", "throttled").stdout
    assert "gpu_sm_clock_mhz: 1680 -> 1176 (median busy SM clock -30.0%)" in " ".join(text.split())

    code, why = cli_json(store, "explain", "throttled", "--against", "recorded")
    assert code == 0 and why["clock"]["every_kernel"] is True
    assert why["clock"]["clock_ratio"] == pytest.approx(RATIO, abs=0.002)
    assert "every kernel is +42.9% slower, the SM clock ratio" in cli(store, "explain", "throttled", "--against",
                                                                        "recorded").stdout.replace("\n  ", " ")
    code, why = cli_json(store, "explain", "gemm_throttled", "--against", "recorded")
    assert why["clock"]["every_kernel"] is False and 0 < why["clock"]["within"] < why["clock"]["kernels"]

    code, checked = cli_json(store, "check", "throttled", "--against", "tag:main")
    (run,) = checked["results"]
    assert run["verdict"] == "slower" and run["baseline"]["run_names"] == ["recorded"]
    assert "gpu_sm_clock_mhz" in [d["field"] for d in run["drift"]["infrastructure"]]


@pytest.mark.slow
def test_the_dashboard_shows_the_telemetry_and_its_drift(store, monkeypatch):
    from dashboard_store import _app, _no_exception

    from receipts.store import open_store

    with open_store(store, read_only=True) as s:
        a, b = s.resolve("recorded"), s.resolve("throttled")
    at = _app(store, monkeypatch, view="receipt", id=b)
    _no_exception(at)
    table = next(f.value for f in at.dataframe if "clocks held by" in f.value.columns)
    assert table.iloc[0]["SM clock (MHz)"] == round(1680 * RATIO) and "hw_slowdown 100%" in table.iloc[0]["clocks held by"]
    at = _app(store, monkeypatch, view="compare", a=a, b=b)
    _no_exception(at)
    assert any("gpu_sm_clock_mhz" in f.value.get("field", []).tolist() for f in at.dataframe if "field" in f.value)


def test_the_in_training_recorder_samples_its_own_gpu():
    """receipts.capture outside `receipts run`: its footer carries its rank's GPU (tests/data/telemetry/recorder)."""
    from receipts.pipeline import parse_log

    (t,) = parse_log(DATA.parent / "recorder" / "run.log").telemetry
    assert (t.rank, t.gpu_name, t.samples, t.busy_samples) == (0, "NVIDIA H200", 73, 66)
    assert (t.sm_clock_mhz, t.power_limit_w, t.throttle_share) == (1717.5, 700.0, {"sw_power_cap": 1.0})


def test_drift_needs_telemetry_on_both_sides_and_a_moved_clock():
    (t,) = telemetry_of(_footer())
    run = telemetry.summarise([t])
    assert telemetry.drift(run, None) == [] and telemetry.drift(run, run) == []
    warm = telemetry.summarise([replace(t, sm_clock_mhz=t.sm_clock_mhz * 0.98)])  # GPU Boost's own wander
    assert telemetry.drift(run, warm) == []
    errors = telemetry.summarise([replace(t, ecc_uncorrected_added=2, xids=(79,))])
    assert telemetry.drift(run, errors) == [("gpu_errors", "ECC +0, Xid none", "ECC +2, Xid 79",
                                             "uncorrected ECC errors and Xids during the run")]


def test_kernels_at_the_clock_ratio():
    assert telemetry.kernels_at_clock_ratio(0.99, {"k": 1.01}) is None
    verdict = telemetry.kernels_at_clock_ratio(0.8, {"gemm": 1.25, "flash": 1.24, "copy": 1.02})
    assert verdict is not None and (verdict.within, verdict.kernels, verdict.every_kernel) == (2, 3, False)


def test_the_launcher_samples_the_gpus_the_job_sees():
    assert visible_gpu_indices(None) is None and visible_gpu_indices("2,3") == [2, 3]
    assert visible_gpu_indices("GPU-d0e052fd-41c1") is None and visible_gpu_indices("") == []
    assert visible_gpu_indices("-1") == []


@pytest.mark.parametrize("path, value, words", [
    (("summary", "samples"), 2**40, "samples must be a non-negative integer below 2,147,483,648"),
    (("summary", "xids"), ["79"], "xids must be an array of integers"),
    (("local_rank",), -1, "local_rank must be a non-negative integer"),
    (("summary", "throttle_share"), ["sw_power_cap"], "throttle_share must be an object of shares"),
])
def test_a_damaged_telemetry_footer_is_one_error_naming_its_line(tmp_path, db, path, value, words):
    """The recorded run.log with its footer's telemetry damaged: refused at the footer's line, the store untouched."""
    lines = (DATA / "run.log").read_text().splitlines()
    footer = _footer()
    target = footer["telemetry"]["gpus"][0]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    lines[-1] = "RECEIPT " + json.dumps(footer, separators=(",", ":"))
    log = tmp_path / "run.log"
    log.write_text("\n".join(lines) + "\n")
    done = cli(db, "ingest", str(log))
    assert done.exit_code == 2 and words in done.stderr and f"{log}:{len(lines)}" in done.stderr, done.stderr
    assert not Path(db).exists() or cli_json(db, "list")[1] == []
