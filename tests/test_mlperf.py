"""MLPerf Training result logs read right, on public v5.1 results (tests/data/mlperf/ORIGIN.md) and
the v4.0 ones in ../shared/realdata. References are computed here from the `:::MLLOG` JSON directly."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from receipts.pipeline import parse_log
from tests.cli_helpers import cli, cli_json
from tests.conftest import REPO, realdata

MLPERF = REPO / "tests" / "data" / "mlperf"
LLAMA8B = MLPERF / "v5.1__Dell_1xXE9680Lx8B200-SXM-180GB_llama31_8b_result_0.txt"
LORA = [MLPERF / f"v5.1__Dell_1xXE9680x8H200-SXM-141GB_llama2_70b_lora_result_{i}.txt" for i in (0, 1)]
RETINANET = MLPERF / "v5.1__Dell_1xXE9680x8H200-SXM-141GB_retinanet_result_0.txt"
FLUX = MLPERF / "v5.1__NVIDIA_theia_ngpu16_ngc25.09_nemo_flux1_result_0.txt"
IDENTITY = ("--host-lineage", "dell-xe9680-h200", "--preset", "mlperf_v51", "--regime", "megatron/unknown-compile")


def records(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        if ":::MLLOG {" in line:
            out.append(json.loads(line.split(":::MLLOG ", 1)[1]))
    return out


def test_nemo_tracked_stats_train_step_time_is_the_step_series():
    want = {}
    for r in records(LLAMA8B):
        if (r["key"] == "tracked_stats" and isinstance(r["value"], dict) and "train_step_time" in r["value"]
                and r["metadata"].get("step") is not None):
            want.setdefault(int(r["metadata"]["step"]), r["value"]["train_step_time"] * 1000.0)
    parsed = parse_log(LLAMA8B)
    assert parsed.provenance["step_unit"] == "step"
    got = dict(zip(parsed.steps["step"].to_list(), parsed.steps["step_ms"].to_list()))
    assert len(want) > 300 and got == pytest.approx(want)


def _blocks_in_order(path: Path) -> list[float]:
    """Each block_stop closes the latest open block_start, whatever their samples_count says."""
    open_at, out, seen = [], [], set()
    for r in records(path):
        if r["key"] in ("block_start", "block_stop"):
            key = (r["key"], r["time_ms"], json.dumps(r["metadata"].get("samples_count")))
            if key in seen:
                continue
            seen.add(key)
            if r["key"] == "block_start":
                open_at.append(r["time_ms"])
            else:
                out.append(float(r["time_ms"] - open_at.pop()))
    return out


@pytest.mark.parametrize("path", [LORA[0], FLUX], ids=["lora: start 0, stop 1536", "flux1: one key for all blocks"])
def test_blocks_keyed_by_samples_count_pair_in_order(path):
    want = _blocks_in_order(path)
    parsed = parse_log(path)
    assert parsed.provenance["step_unit"] == "block"
    assert len(want) >= 5 and parsed.steps["step_ms"].to_list() == want


def test_an_epoch_cut_short_by_run_stop_is_not_steady(db):
    epochs = {}
    for r in records(RETINANET):
        if r["key"] in ("epoch_start", "epoch_stop"):
            epochs.setdefault(r["metadata"]["epoch_num"], {})[r["key"]] = r["time_ms"]
    ms = {e: t["epoch_stop"] - t["epoch_start"] for e, t in epochs.items()}
    assert ms[4] < 0.02 * statistics.median(ms.values())  # the 6.3 s tail among ~476 s epochs
    code, out = cli_json(db, "ingest", str(RETINANET), *IDENTITY)
    assert code == 0, out
    code, shown = cli_json(db, "show", out["files"][0]["receipt_id"] if "files" in out else RETINANET.stem)
    s = shown["steady_state"]
    assert s["last_step"] == 3 and s["window_rule"].endswith("+cut-short-tail")
    assert s["cv"] < 0.01  # was 65.7% with the tail counted
    assert shown["series_unit"] == "epoch"


def test_time_to_train_is_the_headline_in_show_and_list(db):
    run = records(RETINANET)
    start = next(r["time_ms"] for r in run if r["key"] == "run_start")
    stop = next(r["time_ms"] for r in run if r["key"] == "run_stop")
    assert cli_json(db, "ingest", str(RETINANET), *IDENTITY)[0] == 0
    code, shown = cli_json(db, "show", RETINANET.stem)
    assert shown["time_to_train_s"] == pytest.approx((stop - start) / 1000)
    code, listed = cli_json(db, "list")
    assert listed[0]["time_to_train_s"] == pytest.approx((stop - start) / 1000) and listed[0]["series_unit"] == "epoch"
    text = cli(db, "show", RETINANET.stem).stdout
    assert "time to train: 33.84 min" in text and "epoch time: median" in text


def test_sysjson_gives_the_system_and_results_are_not_recipe(db):
    parsed = parse_log(LORA[0])
    assert (parsed.gpu_model, parsed.gpu_count) == ("NVIDIA H200", 8)
    assert "train_loss" not in parsed.features and "lora_rank" in parsed.features
    for path in LORA:
        assert cli_json(db, "ingest", str(path), *IDENTITY)[0] == 0
    code, out = cli_json(db, "compare", LORA[0].stem, LORA[1].stem)
    assert code == 0, out
    assert out["drift"]["recipe"] == []  # two runs of one submission: the losses differ, the recipe does not
    # compared in MLPerf's own terms: time to train first (run_start -> run_stop: 1354.454 s and 1353.471 s)
    assert (out["a"]["time_to_train_s"], out["b"]["time_to_train_s"]) == (1354.454, 1353.471)
    text = " ".join(cli(db, "compare", LORA[0].stem, LORA[1].stem).stdout.split())
    assert "time to train: A 22.57 min, B 22.56 min: B/A 0.9993 (-0.07%;" in text
    assert "median 150.32 s" in text and "moving blocks of 1 block)" in text and "of 1 steps" not in text


def test_a_single_block_covering_the_run_is_no_series(tmp_path):
    """Keep the first block of the LoRA log and its run_stop: one block is the whole run, not a steady state."""
    lines, blocks = [], 0
    for line in LORA[0].read_text().splitlines():
        if '"key": "block_start"' in line:
            blocks += 1
        if blocks <= 1 or '"key": "run_stop"' in line:
            lines.append(line)
    one = tmp_path / "one_block.txt"
    one.write_text("\n".join(lines) + "\n")
    parsed = parse_log(one)
    assert parsed.steps.height == 0
    assert any("one block covers the whole run" in w for w in parsed.warnings)
    assert parsed.provenance["time_to_train_ms"] > 0


@pytest.mark.parametrize("name", ["v4.0__Dell_results_XE9680x8H100-SXM-80GB_bert_result_0.txt",
                                  "v4.0__Supermicro_results_AS-8125GS-TNHR_8_H100-SXM-80GB_resnet_result_0.txt"])
def test_v40_results_still_read(name):
    parsed = parse_log(realdata("logs", name))
    assert parsed.steps.height >= 2 and parsed.provenance["time_to_train_ms"] > 0
    assert parsed.provenance["step_unit"] in ("segment", "epoch")


def test_v6_parallel_layout_and_precisions_are_features(tmp_path):
    """MLPerf Training 6.x discloses the layout and the lowest precisions as POINT_IN_TIME records (mlcommons
    logging's keys); a real v5.1 result with those records added after its hyperparameters reads them under the
    receipt's names, the lowest precision as `precision`."""
    lines = LLAMA8B.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if '"key": "global_batch_size"' in line)
    t = json.loads(lines[at].split(":::MLLOG ", 1)[1])["time_ms"]
    disclosed = {"tensor_parallelism": 2, "pipeline_parallelism": 1, "context_parallelism": 2,
                 "expert_parallelism": 1, "micro_batch_size": 1, "lowest_numerical_precision_in_linear": "fp8",
                 "lowest_numerical_precision_in_attn": "bfloat16", "lowest_numerical_precision_in_comm": "bfloat16"}
    added = [":::MLLOG " + json.dumps({"namespace": "", "time_ms": t, "event_type": "POINT_IN_TIME", "key": k,
                                       "value": v, "metadata": {"file": "pretrain.py", "lineno": 600}})
             for k, v in disclosed.items()]
    path = tmp_path / "v6_llama31_8b.txt"
    path.write_text("\n".join(lines[:at + 1] + added + lines[at + 1:]) + "\n")
    features = parse_log(path).features
    assert {k: features[k] for k in ("tp", "pp", "cp", "ep", "micro_batch_size")} == {
        "tp": 2, "pp": 1, "cp": 2, "ep": 1, "micro_batch_size": 1}
    assert (features["precision_linear"], features["precision_attn"], features["precision_comm"]) == (
        "fp8", "bfloat16", "bfloat16")
    assert features["precision"] == "fp8"
    assert "tensor_parallelism" not in features  # one name per fact: no double count in recipe drift
    assert "precision" not in parse_log(LLAMA8B).features  # a 5.1 log discloses none
