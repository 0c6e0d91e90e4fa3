"""Memory geometry through the CLI and the dashboard, over the real runs of tests/data/memory (2 x H200):
`ingest` of a run directory (its snapshots attached), `estimate --attach`, `show --json` memory_geometry,
`compare --json` memory_drift, gate claims that bound a bucket, `push`, and the dashboard's memory view."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import cli, cli_json
from test_postgres import pg_server, pg_url  # noqa: F401 - fixtures: a fresh database on the local server

DATA = Path(__file__).parent / "data" / "memory"
PARAMS = 67_170_304  # the runs' model (TORCH_MEMORY's param_count)
SHAPE = ("--micro-batch", "4", "--sequence", "1024", "--hidden", "1024", "--layers", "4", "--vocab", "8192")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    db = str(tmp_path_factory.mktemp("memory") / "m.duckdb")
    for run in ("adamw_2gpu", "sgd_2gpu", "adamw_2gpu_ckpt"):
        code, out = cli_json(db, "ingest", str(DATA / run))
        assert code == 0, out
        assert [o["kind"] for o in out] == ["receipt", "memory", "memory"]
    return db


def test_show_json_memory_geometry(store):
    code, out = cli_json(store, "show", "adamw_2gpu")
    g = out["memory_geometry"]
    torch_says = json.loads(next(line for line in (DATA / "adamw_2gpu" / "run.log").read_text().splitlines()
                                 if line.startswith("TORCH_MEMORY"))[len("TORCH_MEMORY "):])
    assert (g["source"], g["rank"]) == ("capture", 0)
    assert g["categories"]["optimizer_state"] == torch_says["optimizer_state_bytes"]
    assert g["peak_allocated_bytes"] == out["memory"]["peak_allocated_bytes"]
    assert g["device_total_bytes"] == torch_says["total_memory"]
    # fragmentation at the peak comes from the attached snapshot, which alone sees that moment
    assert g["filled_from"] == {"fragmentation_at_peak_bytes": "snapshot"}
    snapshot = next(s for s in g["sources"] if s["kind"] == "snapshot")
    assert g["fragmentation_at_peak_bytes"] == snapshot["ranks"][0]["fragmentation_at_peak_bytes"]
    assert g["gaps"]["fragmentation_bytes"] == g["fragmentation_at_peak_bytes"]
    assert g["gaps"]["headroom_bytes"] == g["device_total_bytes"] - g["peak_reserved_bytes"]
    assert {s["kind"] for s in g["sources"]} == {"capture", "snapshot"}
    assert g["estimate"] is None and g["gaps"]["estimate_to_allocated_bytes"] is None


@pytest.mark.parametrize("run, optimizer", [("adamw_2gpu", "adamw"), ("sgd_2gpu", "sgd")])
def test_estimate_equals_measured_shards_exactly_and_reports_activation_error(store, run, optimizer):
    code, est = cli_json(store, "estimate", "--params", str(PARAMS), "--shard-degree", "2", "--optimizer", optimizer,
                         "--master-dtype", "fp32", *SHAPE, "--attach", run)
    assert code == 0 and est["attached"]["created"]
    g = cli_json(store, "show", run)[1]["memory_geometry"]
    rows = {r["bucket"]: r for r in g["buckets"]}
    for bucket in ("parameters", "gradients", "optimizer_state"):
        assert rows[bucket]["estimated_bytes"] == rows[bucket]["measured_bytes"], bucket
        assert rows[bucket]["error_bytes"] == 0
    # 4 layers x 34·s·b·h + the logits s·b·vocab x 2 bytes, against what a forward left allocated
    assert est["categories"]["activations"] == 4 * 34 * 1024 * 4 * 1024 + 1024 * 4 * 8192 * 2
    act = rows["activations"]
    assert act["error_bytes"] == act["estimated_bytes"] - act["measured_bytes"]
    assert abs(act["error_pct"]) < 15
    assert g["gaps"]["estimate_to_allocated_bytes"] == g["peak_allocated_bytes"] - est["allocated_bytes"]
    # the same estimate again changes nothing
    assert not cli_json(store, "estimate", "--params", str(PARAMS), "--shard-degree", "2", "--optimizer", optimizer,
                        "--master-dtype", "fp32", *SHAPE, "--attach", run)[1]["attached"]["created"]


def test_full_recompute_estimate_beside_the_checkpointed_run(store):
    code, est = cli_json(store, "estimate", "--params", str(PARAMS), "--shard-degree", "2", "--optimizer", "adamw",
                         "--master-dtype", "fp32", *SHAPE, "--recompute", "full", "--attach", "adamw_2gpu_ckpt")
    rows = {r["bucket"]: r for r in cli_json(store, "show", "adamw_2gpu_ckpt")[1]["memory_geometry"]["buckets"]}
    assert est["categories"]["activations"] == 4 * 2 * 1024 * 4 * 1024 + 1024 * 4 * 8192 * 2
    assert rows["activations"]["measured_bytes"] < rows["activations"]["estimated_bytes"]
    assert rows["optimizer_state"]["error_bytes"] == 0


def test_compare_json_memory_drift_names_the_bucket_that_moved(store):
    code, out = cli_json(store, "compare", "adamw_2gpu", "sgd_2gpu")
    drift = out["memory_drift"]
    assert drift[0] == {"category": "optimizer_state", "kind": "capture", "a_bytes": 268_681_216,
                        "b_bytes": 134_340_608, "delta_bytes": -134_340_608}
    moved = {d["category"]: d["delta_bytes"] for d in drift}
    assert moved["parameters"] == moved["gradients"] == moved["activations"] == 0
    assert moved["resident_between_steps"] == -134_340_608  # what stays between steps drops by the state SGD does not keep
    code, out = cli_json(store, "compare", "adamw_2gpu", "adamw_2gpu_ckpt")
    assert out["memory_drift"][0]["category"] == "activations" and out["memory_drift"][0]["delta_bytes"] < 0


def test_show_text_has_the_geometry_table_and_the_three_gaps(store):
    text = cli(store, "show", "sgd_2gpu").stdout
    assert "memory geometry: rank 0, measured by capture" in text
    assert "estimate -> allocated" in text and "allocated -> reserved (fragmentation)" in text
    assert "reserved -> device (headroom)" in text


def _claims(tmp_path, body: str) -> str:
    path = tmp_path / "claims.yaml"
    path.write_text("version: 1\nclaims:\n" + body)
    return str(path)


def test_gate_accepts_and_rejects_bucket_claims(store, tmp_path):
    path = _claims(tmp_path, """
  - {name: sgd halves the state, baseline: adamw_2gpu, candidate: sgd_2gpu, metric: memory_bucket,
     bucket: optimizer_state, change: -128.125MiB, tolerance_bytes: 1MiB, at_most: 200MiB}
  - {name: sgd shrinks activations, baseline: adamw_2gpu, candidate: sgd_2gpu, metric: memory_bucket,
     bucket: activations, change: -100MiB}
  - {name: state under 100MiB, baseline: adamw_2gpu, candidate: sgd_2gpu, metric: memory_bucket,
     bucket: optimizer_state, at_most: 100MiB}
""")
    code, out = cli_json(store, "gate", path)
    assert code == 1
    results = {c["name"]: c for c in out["claims"]}
    assert results["sgd halves the state"]["accepted"]
    assert results["sgd halves the state"]["measured"]["value"] == -134_340_608
    assert results["sgd shrinks activations"]["reason_codes"] == ["effect_mismatch", "not_significant"]
    assert results["state under 100MiB"]["reason_codes"] == ["bound_exceeded"]
    assert results["state under 100MiB"]["claimed"]["at_most_bytes"] == 100 << 20


@pytest.mark.parametrize("body, message", [
    ("  - {name: x, baseline: a, candidate: b, metric: memory_bucket, change: 1GiB}\n", "needs 'bucket'"),
    ("  - {name: x, baseline: a, candidate: b, metric: memory_bucket, bucket: weights, change: 1GiB}\n",
     "unknown bucket 'weights'"),
    ("  - {name: x, baseline: a, candidate: b, metric: peak_allocated, bucket: activations, change: 1GiB}\n",
     "'bucket' is for metric memory_bucket"),
    ("  - {name: x, baseline: a, candidate: b, metric: step_time, speedup: 1.1, at_most: 1GiB}\n",
     "'at_most' bounds a memory metric"),
    ("  - {name: x, baseline: a, candidate: b, metric: memory_bucket, bucket: activations}\n",
     "or a bound 'at_most'"),
])
def test_bad_bucket_claims_name_the_line(tmp_path, body, message):
    from receipts.analysis.claims import parse_claims
    from receipts.errors import InputError

    with pytest.raises(InputError, match=message) as exc:
        parse_claims("version: 1\nclaims:\n" + body, "claims.yaml")
    assert exc.value.line == 3 or exc.value.line == 4


def test_a_snapshot_needs_attach_and_attaches_once(store, tmp_path):
    snap = str(DATA / "adamw_1gpu" / "snapshot" / "rank0.pickle.gz")
    result = cli(store, "ingest", snap)
    assert result.exit_code == 2 and "give --attach RUN" in result.output
    code, out = cli_json(store, "ingest", snap, "--attach", "sgd_2gpu")
    assert code == 0 and out[0]["status"] == "ingested"
    assert cli_json(store, "ingest", snap, "--attach", "sgd_2gpu")[1][0]["status"] == "unchanged"


def test_push_carries_the_geometry(store, tmp_path):
    import duckdb

    with duckdb.connect(store, read_only=True) as con:
        snapshots = con.sql("SELECT count(*) FROM memory_sources WHERE kind = 'snapshot'").fetchone()[0]
        estimates = con.sql("SELECT count(*) FROM memory_sources WHERE kind = 'estimate'").fetchone()[0]
    target = str(tmp_path / "target.duckdb")
    code, pushed = cli_json(store, "push", "--to", target)
    assert code == 0 and snapshots >= 6  # two ranks' snapshots with each of the three runs
    kinds = {"snapshot": snapshots} | ({"estimate": estimates} if estimates else {})
    assert pushed["memory_kinds"] == kinds and pushed["memory_copied"] == snapshots + estimates
    again = cli(store, "push", "--to", str(tmp_path / "again.duckdb"))
    copied = f"{snapshots} memory snapshots" + (f" and {estimates} memory estimates" if estimates else "")
    assert f"; {copied} copied;" in " ".join(again.stdout.split())
    here = cli_json(store, "show", "adamw_2gpu")[1]["memory_geometry"]
    there = cli_json(target, "show", "adamw_2gpu")[1]["memory_geometry"]
    assert there == here


def test_dashboard_memory_view(store, monkeypatch):
    from streamlit.testing.v1 import AppTest

    app = Path(__file__).resolve().parents[1] / "dashboards" / "app.py"
    ids = {r["run_name"]: r["id"] for r in cli_json(store, "list")[1]}
    monkeypatch.setenv("RECEIPTS_DB", store)
    at = AppTest.from_file(str(app), default_timeout=60)
    at.query_params.update(view="memory", id=ids["adamw_2gpu"], b=ids["sgd_2gpu"])
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["allocated → reserved (fragmentation)"].endswith("GiB")
    assert metrics["reserved → device (headroom)"] != "-"
    texts = "\n".join(str(e.value) for e in at.markdown)
    assert "The **optimizer state** bucket moved most." in texts
    assert at.get("vega_lite_chart") or at.get("arrow_vega_lite_chart")



@pytest.mark.postgres
def test_postgres_store_holds_the_same_geometry(tmp_path, pg_url):
    """The team's PostgreSQL store: a run's receipt and snapshots and an estimate give `show --json` the
    geometry a DuckDB store gives; memory_sources' key makes a second attach a no-op there too."""
    duck = str(tmp_path / "d.duckdb")
    estimate = ("estimate", "--params", str(PARAMS), "--shard-degree", "2", "--optimizer", "sgd", "--master-dtype",
                "fp32", *SHAPE, "--attach", "sgd_2gpu")
    for db in (duck, pg_url):
        assert cli_json(db, "ingest", str(DATA / "sgd_2gpu"))[0] == 0
        assert cli_json(db, *estimate)[1]["attached"]["created"]
        assert not cli_json(db, *estimate)[1]["attached"]["created"]
    assert cli_json(pg_url, "show", "sgd_2gpu")[1]["memory_geometry"] == \
        cli_json(duck, "show", "sgd_2gpu")[1]["memory_geometry"]


@pytest.mark.parametrize("kind, said", [
    ("pickle0", "a pickle in protocol 0 or 1, not a PyTorch memory snapshot"),
    ("pickle1", "a pickle in protocol 0 or 1, not a PyTorch memory snapshot"),
    ("json", "a JSON document without traceEvents, not a PyTorch profiler trace"),
    ("log", "a training log"),
])
def test_attach_names_what_a_file_it_cannot_take_is(store, tmp_path, kind, said):
    """The real snapshot's contents written as an old pickle, or as JSON; a real log: each refused as what it is."""
    import gzip
    import pickle

    snapshot = pickle.loads(gzip.decompress((DATA / "sgd_2gpu" / "snapshot" / "rank0.pickle.gz").read_bytes()))
    path = tmp_path / f"rank0.{kind}"
    if kind.startswith("pickle"):
        path.write_bytes(pickle.dumps({"segments": snapshot["segments"][:2]}, protocol=int(kind[-1])))
    elif kind == "json":
        path.write_text(json.dumps({"segments": len(snapshot["segments"]), "device_traces": []}))
    else:
        path.write_bytes((DATA / "sgd_2gpu" / "run.log").read_bytes())
    result = cli(store, "ingest", str(path), "--attach", "sgd_2gpu")
    assert result.exit_code == 2 and f"this looks like {said}" in " ".join(result.stderr.split()), result.stderr


def test_a_log_without_peaks_shows_the_snapshots_peak(tmp_path):
    from conftest import write_native_log

    db = str(tmp_path / "s.duckdb")
    log = write_native_log(tmp_path / "run.log", [100.0] * 12, footer=False)
    code, out = cli_json(db, "ingest", str(log))
    assert code == 0, out
    run = out[0]["run_name"]
    assert "memory: peak allocated -" in cli(db, "show", run).stdout
    snap = str(DATA / "adamw_1gpu" / "snapshot" / "rank0.pickle.gz")
    assert cli(db, "ingest", snap, "--attach", run).exit_code == 0
    code, out = cli_json(db, "show", run)
    geo = out["memory_geometry"]
    assert out["memory"]["source"] == "snapshot"
    assert out["memory"]["peak_allocated_bytes"] == geo["peak_allocated_bytes"] is not None
    text = cli(db, "show", run).stdout
    gib = geo["peak_allocated_bytes"] / 2**30
    assert f"memory: peak allocated {gib:.2f} GiB" in text and "(from the snapshot)" in text
