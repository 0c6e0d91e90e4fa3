"""A total order for runs: the run's own date where its source gives one, else the ingest time to the microsecond
and the store's ingest sequence, so logs without time stamps ingested in one batch keep its command-line order
(`history` says when the order comes from ingest)."""

from __future__ import annotations

import numpy as np
import pytest

from cli_helpers import cli, cli_json
from conftest import realdata

LANE = ("--host-lineage", "a100-sxm4-node", "--preset", "nanochat-d20", "--regime", "ddp/no-compile")


def nanochat_logs(folder, n: int = 14, *, slow_from: int = 7, steps: int = 40) -> list:
    """n nanochat base_train logs shaped as the real A100 excerpt's lines (no time stamps), each run a little
    noisy, runs from `slow_from` on 4% slower: a planted step-time change, in the order returned."""
    template = realdata("logs/nanochat_pr147_a100_mfu.txt").read_text().splitlines()[0]
    assert template.startswith("step 00004/21400 (0.02%) | loss: 8.893647 | lrm: 1.00 | dt: 989.44ms")
    rng = np.random.default_rng(33)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for run in range(n):
        base = 990.0 * (1.04 if run >= slow_from else 1.0) * (1 + rng.normal(0, 0.002))
        lines = []
        for step in range(1, steps + 1):
            dt = base * (1 + rng.normal(0, 0.003)) * (1.6 if step == 1 else 1.0)
            line = template.replace("step 00004/", f"step {step:05d}/").replace("dt: 989.44ms", f"dt: {dt:.2f}ms")
            lines.append(line.replace("(0.02%)", f"({100 * step / 21400:.2f}%)"))
        # names that sort against the batch order, so no order by name or path can pass for the batch's
        paths.append(folder / f"run_{(n - run) * 7 % 97:02d}_{run:02d}.log")
        paths[-1].write_text("\n".join(lines) + "\n")
    return paths


def test_a_batch_of_logs_without_dates_keeps_its_order_and_history_finds_the_planted_change(db, tmp_path):
    logs = nanochat_logs(tmp_path / "logs")
    result = cli(db, "ingest", *map(str, logs), *LANE)
    assert result.exit_code == 0, result.output
    code, out = cli_json(db, "history", logs[0].stem)
    assert code == 0
    assert [r["run_name"] for r in out["runs"]] == [p.stem for p in logs]
    assert {r["run_date_source"] for r in out["runs"]} == {"ingest"}
    assert out["order"] == "ingest"
    (change,) = out["change_points"]
    assert change["run_name"] == logs[7].stem and change["pvalue"] < 1e-3 and 3 < change["change_pct"] < 5
    text = cli(db, "history", logs[0].stem, "--format", "table").stdout
    assert "ordered by when they were ingested" in text


def test_ingest_time_is_kept_to_the_microsecond(db, tmp_path):
    logs = nanochat_logs(tmp_path / "logs", n=3)
    assert cli(db, "ingest", *map(str, logs), *LANE).exit_code == 0
    code, rows = cli_json(db, "list")
    stamps = sorted(r["ingested_at"] for r in rows)
    assert all(len(s) == len("2026-03-16T22:57:30.775123+00:00") for s in stamps), stamps
    assert len(set(stamps)) == 3


def test_the_dashboard_history_spaces_runs_ingested_within_a_second(db, tmp_path, monkeypatch):
    """Dated by their ingest, a batch's runs lie milliseconds apart: the history axis defaults to their run order
    and the page says where the order came from."""
    import json

    pytest.importorskip("streamlit")
    pa = pytest.importorskip("pyarrow")
    from test_dashboard_apptest import _app, _charts, _no_exception

    logs = nanochat_logs(tmp_path / "logs")
    assert cli(db, "ingest", *map(str, logs), *LANE).exit_code == 0
    at = _app(db, monkeypatch, view="history", host=LANE[1], preset=LANE[3], regime=LANE[5])
    _no_exception(at)
    assert at.radio(key="history_x").value == "run_order"
    assert any("placed by when they were ingested" in c.value for c in at.caption)
    chart = _charts(at)[0].proto
    layer = json.loads(chart.spec)["layer"][1]
    assert layer["encoding"]["x"]["field"] == "run_order"
    rows = pa.ipc.open_stream(chart.datasets[0].data.data).read_all().to_pylist()
    assert [r["run_order"] for r in rows] == list(range(1, 15))
    assert [r["run_name"] for r in rows] == [p.stem for p in logs]
