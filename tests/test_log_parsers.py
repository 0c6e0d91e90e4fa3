"""Third-party log parsers against the real logs in ../shared/realdata/logs.

Expected numbers were read from the files by hand (grep -c for counts, the values by eye from the
quoted lines), never from the parsers' output. Hand-written fixtures appear only for edge cases.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from receipts.errors import InputError
from receipts.ingest import megatron, mllog, modded_nanogpt, nanochat, torchtitan
from receipts.ingest.log_formats import parser as log_parser
from receipts.ingest.sniff import detect_log_format
from receipts.ingest.textlog import read_log

LOGS = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "logs"
MB = 1024 * 1024
GIB = 1024 ** 3

SFT = "sft_run_gtx1660.log"
PR147 = "nanochat_pr147_a100_mfu.txt"
MDS = "megatron-deepspeed__gpt3-0.125B-tokendropping-graduallyIncrease-lr-3.0e-4-baseline.log"
ISSUE756 = "megatron-lm_issue756_mixtral_16xH100.txt"
TT1287 = "torchtitan_pr1287_dcp_zoc_steps200-250.txt"
TT1437 = "torchtitan_pr1437_flex_debug.txt"
TT1884 = "torchtitan_pr1884_llama3_8b_flex_4gpu.txt"
SOAP = "track_1_short_2024-10-09_SOAP__5bdc3988-496c-4232-b4ef-53764cb81c92.txt"
YARN = "track_1_short_2025-09-10_Yarn__ef66c943-e262-400f-822f-068d397a1dc9.txt"
BERT = "v4.0__Dell_results_XE9680x8H100-SXM-80GB_bert_result_0.txt"
RESNET = "v4.0__Supermicro_results_AS-8125GS-TNHR_8_H100-SXM-80GB_resnet_result_0.txt"

# Every plain-text log in realdata/logs, with the parser module that must claim it (the .json files
# there are structured exports, not logs).
FORMAT_OF = {
    SFT: "nanochat", PR147: "nanochat", MDS: "megatron", ISSUE756: "megatron",
    TT1287: "torchtitan", TT1437: "torchtitan", TT1884: "torchtitan",
    SOAP: "modded_nanogpt", YARN: "modded_nanogpt", BERT: "mllog", RESNET: "mllog",
}
# grep -c of the step lines of each log
STEP_COUNT = {SFT: 133, PR147: 7, MDS: 47, ISSUE756: 2, TT1287: 6, TT1437: 8, TT1884: 5, SOAP: 6000, YARN: 1670,
              BERT: 17, RESNET: 35}


def log_path(name: str) -> Path:
    path = LOGS / name
    if not path.exists():
        pytest.skip(f"real data not present: {path}")
    return path


def parsed(name: str):
    log = read_log(log_path(name))
    return log_parser(FORMAT_OF[name]).parse(log)


def row(run, step: int, rank: int | None = None) -> dict:
    frame = run.steps.filter(run.steps["step"] == step)
    if rank is not None:
        frame = frame.filter(frame["rank"] == rank)
    assert frame.height == 1, f"step {step} rank {rank}: {frame.height} rows"
    return frame.row(0, named=True)


def test_every_plain_log_is_covered():
    if not LOGS.exists():
        pytest.skip("real data not present")
    plain = {p.name for p in LOGS.iterdir() if p.suffix in (".txt", ".log")}
    assert plain == set(FORMAT_OF)


@pytest.mark.parametrize("name", sorted(FORMAT_OF))
def test_detection_picks_the_format(name):
    assert detect_log_format(read_log(log_path(name))) == FORMAT_OF[name]


@pytest.mark.parametrize("name", sorted(STEP_COUNT))
def test_step_counts_and_source_lines(name):
    run = parsed(name)
    assert run.steps.height == STEP_COUNT[name]
    assert run.steps["line"].null_count() == 0
    assert run.source_format == log_parser(FORMAT_OF[name]).FORMAT


# ---------------------------------------------------------------- nanochat

def test_nanochat_sft_run():
    run = parsed(SFT)
    first, last = row(run, 1), row(run, 133)
    # line 108: step 00001 (0.00%) | loss: 5.471677 | lrm: 1.00 | dt: 1142.98ms | tok/sec: 111 | mfu: 0.00
    assert (first["step_ms"], first["tokens_per_s"], first["loss"], first["mfu_pct"], first["line"]) == \
        (1142.98, 111.0, 5.471677, 0.0, 108)
    # line 240: step 00133 ... loss: nan | ... | dt: 4.98ms | tok/sec: 25,696
    assert (last["step_ms"], last["tokens_per_s"], last["line"]) == (4.98, 25696.0, 240)
    assert math.isnan(last["loss"])
    assert run.gpu_model == "NVIDIA GeForce GTX 1660 SUPER"   # line 93, 'GPU: ... | Peak FLOPS'
    assert run.world_size == 1 and run.gpu_count == 1         # line 1, 'Distributed world size: 1'
    assert run.features["n_layer"] == 2 and run.features["n_embd"] == 128
    # the file has no final newline but its last line is a complete step line: not cut short
    assert run.ended_early is None


def test_nanochat_pr147():
    run = parsed(PR147)
    assert row(run, 4)["step_ms"] == 989.44 and row(run, 4)["tokens_per_s"] == 529882.0
    assert row(run, 4)["mfu_pct"] == 74.13
    assert row(run, 10)["step_ms"] == 996.81 and row(run, 10)["loss"] == 7.473279
    assert run.provenance["total_steps"] == 21400


def test_nanochat_peak_memory_and_old_sft_lines(tmp_path):
    path = tmp_path / "chat_sft.log"
    path.write_text("Step 00000 | Validation bpb: 3.3084\n"
                    "Step 00010/00500 | Training loss: 1.234500| lrm: 1.000000| num_tokens: 12,345\n"
                    "step 00011/00500 (2.20%) | loss: 1.2 | grad norm: 0.5 | lrm: 1.00 | dt: 10.50ms | "
                    "tok/sec: 1,000 | mfu: 1.00 | total time: 0.01m\n"
                    "Peak memory usage: 1024.50MiB\n")
    run = nanochat.parse(read_log(path))
    assert run.steps["step"].to_list() == [10, 11]
    assert row(run, 10)["loss"] == 1.2345 and row(run, 10)["step_ms"] is None
    assert row(run, 11)["step_ms"] == 10.5
    assert run.memory[0].peak_allocated_bytes == int(1024.5 * MB)


# ---------------------------------------------------------------- Megatron

def test_megatron_deepspeed():
    run = parsed(MDS)
    # line 2740: iteration 10/171661 | ... elapsed time per iteration (ms): 1001.5 | ... lm loss: 1.078335E+01
    first = row(run, 10)
    assert (first["step_ms"], first["loss"], first["line"]) == (1001.5, 10.78335, 2740)
    last = row(run, 470)
    assert (last["step_ms"], last["loss"], last["line"]) == (490.4, 8.101424, 2936)
    # consumed tokens 5242880 -> 10485760 over iterations 10 -> 20, in 484.7 ms per iteration
    assert row(run, 20)["tokens_per_s"] == pytest.approx((10485760 - 5242880) / 10 / 0.4847)
    # line 2739: [Rank 0] (after 10 iterations) memory (MB) | allocated: 1674.31005859375 | max allocated:
    # 7176.13916015625 | reserved: 8774.0 | max reserved: 8774.0
    assert [(m.rank, m.peak_allocated_bytes, m.peak_reserved_bytes) for m in run.memory] == \
        [(0, int(7176.13916015625 * MB), 8774 * MB)]
    assert first["allocated_bytes"] == int(1674.31005859375 * MB) and first["reserved_bytes"] == 8774 * MB
    assert row(run, 20)["allocated_bytes"] is None
    # arguments dump, lines 170-373
    assert run.world_size == 8
    assert run.claim.regime == "megatron-deepspeed tp1 pp1 ep1 dp8"
    f = run.features
    assert (f["num_layers"], f["hidden_size"], f["ffn_hidden_size"], f["num_attention_heads"], f["seq_length"],
            f["micro_batch_size"], f["global_batch_size"]) == (12, 768, 3072, 12, 2048, 4, 256)
    assert run.format_version == "megatron-deepspeed"
    # the launcher was interrupted: line 2938 is the first traceback after the last iteration line
    assert run.ended_early is not None and "line 2938" in run.ended_early and "470" in run.ended_early


def test_megatron_lm_issue_excerpt():
    run = parsed(ISSUE756)
    assert (row(run, 2)["step_ms"], row(run, 2)["loss"]) == (5630.1, 2.02153)
    assert (row(run, 3)["step_ms"], row(run, 3)["loss"]) == (5410.6, 2.003316)
    assert [(m.rank, m.peak_allocated_bytes, m.peak_reserved_bytes) for m in run.memory] == \
        [(1, int(54250.98583984375 * MB), 61480 * MB)]
    assert run.started_at == "2024-04-06T02:55:45"
    assert run.claim.regime is None and run.world_size is None  # an excerpt without the arguments dump


MEGATRON_LM_ARGS = """\
using world size: 16, data-parallel size: 2, context-parallel size: 2, tensor-model-parallel size: 2, pipeline-model-parallel size: 2
------------------------ arguments ------------------------
  context_parallel_size ........................... 2
  data_parallel_size .............................. 2
  expert_model_parallel_size ...................... 1
  ffn_hidden_size ................................. 14336
  global_batch_size ............................... 128
  hidden_size ..................................... 4096
  num_attention_heads ............................. 32
  num_experts ..................................... 8
  num_layers ...................................... 32
  num_query_groups ................................ 8
  moe_router_topk ................................. 2
  pipeline_model_parallel_size .................... 2
  seq_length ...................................... 4096
  sequence_parallel ............................... False
  tensor_model_parallel_size ...................... 2
  world_size ...................................... 16
-------------------- end of arguments ---------------------
 [2024-04-06 02:55:45] iteration        1/     100 | consumed samples:          128 | elapsed time per iteration (ms): 9000.0 | lm loss: 2.1E+00 |
"""


def test_megatron_lm_regime_from_arguments_dump(tmp_path):
    path = tmp_path / "megatron.log"
    path.write_text(MEGATRON_LM_ARGS)
    run = megatron.parse(read_log(path))
    assert run.claim.regime == "megatron tp2 pp2 cp2 ep1 dp2"
    assert run.world_size == 16
    assert run.features["num_query_groups"] == 8 and run.features["moe_router_topk"] == 2
    assert run.features["num_experts"] == 8
    assert row(run, 1)["tokens_per_s"] is None  # no earlier iteration to difference against


# ---------------------------------------------------------------- torchtitan

def test_torchtitan_steps_200_250():
    run = parsed(TT1287)
    # line 2: step: 200  loss:  6.1384  memory: 49.66GiB(52.28%)  tps: 5,856  tflops: 339.16  mfu: 34.29%
    first = row(run, 200, rank=0)
    assert (first["loss"], first["tokens_per_s"], first["mfu_pct"]) == (6.1384, 5856.0, 34.29)
    assert first["reserved_bytes"] == round(49.66 * GIB) and first["allocated_bytes"] is None
    assert first["step_ms"] is None
    # 22:30:50,322 -> 22:31:04,970 over steps 200 -> 210
    assert row(run, 210, rank=0)["step_ms"] == pytest.approx(14648 / 10)
    assert row(run, 250, rank=0)["line"] == 10
    assert [(m.rank, m.peak_allocated_bytes, m.peak_reserved_bytes) for m in run.memory] == \
        [(0, None, round(49.66 * GIB))]
    assert run.started_at.startswith("2025-06-16T22:30:50.322")


def test_torchtitan_zero_memory_is_not_a_peak():
    run = parsed(TT1437)
    assert run.memory == () and run.steps["reserved_bytes"].null_count() == 8
    assert row(run, 3, rank=0)["loss"] == 4.9925
    assert row(run, 4, rank=0)["step_ms"] == pytest.approx(43242 - 42774)


def test_torchtitan_four_ranks():
    run = parsed(TT1884)
    assert sorted(run.steps.filter(run.steps["step"] == 1)["rank"].to_list()) == [0, 1, 2, 3]
    ten = row(run, 10, rank=2)
    assert (ten["loss"], ten["tokens_per_s"], ten["mfu_pct"]) == (10.2391, 5615.0, 32.88)
    assert ten["step_ms"] == pytest.approx((7957 - 1391) / 9)  # 10:37:01,391 -> 10:37:07,957 on rank 2
    peaks = {m.rank: m.peak_reserved_bytes for m in run.memory}
    assert peaks == {0: round(33.21 * GIB), 1: round(33.21 * GIB), 2: round(44.84 * GIB), 3: round(33.21 * GIB)}


def test_torchtitan_under_torchrun_tee_keeps_each_rank(tmp_path):
    """torchrun --tee puts `[defaultN]:` before torchtitan's own `[rankN]:`: the ranks are the shared rank label's,
    each rank's step times its own (before, every rank was NULL and step_ms mixed ranks' timestamps)."""
    import re

    text = log_path(TT1884).read_text()
    path = tmp_path / "tee.log"
    path.write_text(re.sub(r"^\[rank([0-9]+)\]:", r"[default\1]:[rank\1]:", text, flags=re.M))
    run = torchtitan.parse(read_log(path))
    assert sorted(run.steps.filter(run.steps["step"] == 1)["rank"].to_list()) == [0, 1, 2, 3]
    assert row(run, 10, rank=2)["step_ms"] == pytest.approx((7957 - 1391) / 9)
    assert run.steps["step_ms"].to_list() == parsed(TT1884).steps["step_ms"].to_list()


def test_torchtitan_ansi_colours_and_validate_lines(tmp_path):
    path = tmp_path / "titan.log"
    path.write_text(
        "[rank0]:[titan] 2025-01-01 00:00:00,000 - root - INFO - CUDA capacity: NVIDIA H200 with 139.81GiB memory\n"
        "[rank0]:[titan] 2025-01-01 00:00:01,000 - root - INFO - \x1b[31mstep:  1  \x1b[32mloss: 12.0000  "
        "\x1b[38;2;180;60;0mgrad_norm:  4.0000  \x1b[36mmemory: 10.00GiB(7.15%)  \x1b[34mtps: 1,000  "
        "\x1b[36mtflops: 50.00  \x1b[35mmfu: 5.06%\x1b[39m\n"
        "[rank0]:[titan] 2025-01-01 00:00:02,500 - root - INFO - \x1b[33mvalidate step:  1  \x1b[32mloss: 11.0000  "
        "\x1b[36mmemory: 10.00GiB(7.15%)  \x1b[34mtps: 900\x1b[39m\n")
    log = read_log(path)
    assert detect_log_format(log) == "torchtitan"
    run = torchtitan.parse(log)
    assert run.steps.height == 1
    assert (row(run, 1, rank=0)["loss"], row(run, 1, rank=0)["tokens_per_s"]) == (12.0, 1000.0)
    assert run.gpu_model == "NVIDIA H200"


# ---------------------------------------------------------------- modded-nanogpt

def test_modded_nanogpt_2024_clock_reset():
    run = parsed(SOAP)
    # lines 919-931: step:0 val 305ms, step:1 24179ms, step:2 24523ms, ..., step:10 26562ms, step:11 1539ms
    assert row(run, 1)["step_ms"] == 24179 and row(run, 1)["loss"] == 11.0091 and row(run, 1)["line"] == 920
    assert row(run, 2)["step_ms"] == 24523 - 24179
    assert row(run, 11)["step_ms"] == 1539          # the clock was zeroed when step 11 began
    assert row(run, 12)["step_ms"] == 1796 - 1539
    assert row(run, 6000)["step_ms"] == 2176390 - 2176134
    assert run.phases == (("warmup", 1, 10),)
    assert (run.gpu_model, run.gpu_count) == ("NVIDIA H100 80GB HBM3", 8)
    assert run.software["torch"] == "2.4.1+cu121" and run.software["nvidia_driver"] == "535.129.03"
    assert run.memory == ()  # that version printed its peak to stdout only, not to the record


def test_modded_nanogpt_2025():
    run = parsed(YARN)
    assert row(run, 1)["step_ms"] == 435 and row(run, 2)["step_ms"] == 459 - 435
    # step 126 follows the validation at 125 (lines 1303-1305): differenced against the train line
    assert row(run, 126)["step_ms"] == 11949 - 11833
    assert row(run, 1670)["step_ms"] == 159269 - 159175
    assert run.steps["step_ms"].sum() == 159269     # the train-line deltas add up to the last reading
    assert run.phases == ()
    assert [(m.rank, m.peak_allocated_bytes, m.peak_reserved_bytes) for m in run.memory] == \
        [(None, 32712 * MB, 48456 * MB)]                     # line 2863
    assert (run.gpu_model, run.gpu_count) == ("NVIDIA H100 80GB HBM3", 8)


# ---------------------------------------------------------------- MLPerf

def test_mllog_bert_segments():
    run = parsed(BERT)
    # block_start 1695170016966 -> first tracked_stats 1695170036070 (epoch_num 150801)
    assert row(run, 150801)["step_ms"] == 1695170036070 - 1695170016966
    # eval_stop 1695170038679 -> tracked_stats 1695170057172 (epoch_num 300432)
    assert row(run, 300432)["step_ms"] == 1695170057172 - 1695170038679
    assert run.steps["step"].max() == 2548645
    assert (run.gpu_model, run.gpu_count) == ("H100-SXM-80GB", 8)    # submission_platform 1xE9680x8H100-SXM-80GB
    assert run.features["global_batch_size"] == 768
    assert run.provenance["run_status"] == "success"
    assert run.provenance["time_to_train_ms"] == 1695170355358 - 1695170016945
    assert run.ended_early is None


def test_mllog_resnet_epochs():
    run = parsed(RESNET)
    assert run.provenance["step_unit"] == "epoch"
    assert row(run, 1)["step_ms"] == 1714734419578 - 1714734357831
    assert row(run, 35)["step_ms"] == 1714735187315 - 1714735164862   # lines 405-406
    assert run.gpu_count == 8 and run.gpu_model is None          # placeholder platform; num_gpus=8 lines
    assert run.features["global_batch_size"] == 3200


def test_mllog_aborted_run(tmp_path):
    path = tmp_path / "result_0.txt"
    path.write_text(
        ':::MLLOG {"namespace": "", "time_ms": 1000, "event_type": "INTERVAL_START", "key": "run_start", '
        '"value": null, "metadata": {}}\n'
        ':::MLLOG {"namespace": "", "time_ms": 2000, "event_type": "INTERVAL_END", "key": "block_stop", '
        '"value": null, "metadata": {"first_epoch_num": 1}}\n'
        ':::MLLOG {"namespace": "", "time_ms": 3000, "event_type": "INTERVAL_END", "key": "run_stop", '
        '"value": null, "metadata": {"status": "aborted"}}\n')
    run = mllog.parse(read_log(path))
    assert run.ended_early == "run_stop at line 3 has status 'aborted'"


# ---------------------------------------------------------------- cut short, bad input

# (log, line to cut in half, last step expected before it)
CUTS = [
    (SFT, 200, 92),      # line 200 is step 00093
    (MDS, 2936, 460),    # line 2936 is iteration 470
    (TT1437, 8, 9),      # line 8 is step 10
    (YARN, 2861, 1669),  # line 2861 is step:1670/1670 train
    (RESNET, 406, 34),   # line 406 is epoch_stop of epoch 35
]


@pytest.mark.parametrize("name,cut_line,last_step", CUTS)
def test_cut_short_last_line(tmp_path, name, cut_line, last_step):
    lines = log_path(name).read_text(encoding="utf-8").split("\n")
    victim = lines[cut_line - 1]
    path = tmp_path / name
    path.write_text("\n".join(lines[:cut_line - 1]) + "\n" + victim[: len(victim) // 2], encoding="utf-8")
    log = read_log(path)
    assert detect_log_format(log) == FORMAT_OF[name]
    run = log_parser(FORMAT_OF[name]).parse(log)
    assert run.steps["step"].max() == last_step
    assert run.steps["line"].max() < cut_line
    assert run.ended_early is not None and f"line {cut_line} is cut short" in run.ended_early


@pytest.mark.parametrize("module,text", [
    (nanochat, "Autodetected device type: cuda\n"),
    (megatron, "------------------------ arguments ------------------------\n"),
    (torchtitan, "[rank0]:[titan] 2025-01-01 00:00:00,000 - root - INFO - Starting job\n"),
    (modded_nanogpt, "step:0/10 val_loss:11.0 train_time:0ms step_avg:nanms\n"),
    (mllog, "no records here\n"),
])
def test_no_step_lines_is_an_input_error(tmp_path, module, text):
    path = tmp_path / "x.log"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        module.parse(read_log(path))
    assert err.value.path == path and "expected" in err.value.message


def test_malformed_mllog_record_names_the_line(tmp_path):
    path = tmp_path / "result_0.txt"
    path.write_text('noise\n:::MLLOG {"key": "run_start", "time_ms": 1}\n:::MLLOG {"key": oops}\n')
    with pytest.raises(InputError) as err:
        mllog.parse(read_log(path))
    assert err.value.line == 3


def test_a_receipt_record_without_its_version_is_an_input_error_and_an_unknown_version_is_named(tmp_path):
    from receipts.errors import InputError, UnsupportedVersion
    from receipts.pipeline import parse_log

    log = tmp_path / "run.log"
    log.write_text('RECEIPT {"kind": "step", "step": 1, "rank": 0, "step_ms": 10.0}\n')
    with pytest.raises(InputError, match=r"run.log:1: RECEIPT record has no 'v'"):
        parse_log(log)
    log.write_text('RECEIPT {"v": 7, "kind": "step", "step": 1, "rank": 0, "step_ms": 10.0}\n')
    with pytest.raises(UnsupportedVersion, match=r"run.log:1.*'7'"):
        parse_log(log)


def test_a_code_dump_longer_than_the_sniff_head_is_still_read(tmp_path):
    """modded-nanogpt prints its whole source before step 0; a longer script (the real dump, tripled: 3,531
    lines of code) must not make the log an 'unknown format' (sniffing read the first 2,000 lines)."""
    from receipts.ingest.textlog import read_log
    from receipts.ingest import sniff
    from receipts.pipeline import parse_log

    lines = log_path(YARN).read_text().splitlines(keepends=True)
    first_step = next(i for i, line in enumerate(lines) if line.startswith("step:0/"))
    long_dump = tmp_path / "yarn_long_dump.txt"
    long_dump.write_text("".join(lines[:first_step] * 3 + lines[first_step:]))
    log = read_log(long_dump)
    assert 3 * first_step > sniff.SNIFF_CHUNK
    assert sniff.detect_log_format(log) == "modded_nanogpt"
    assert parse_log(long_dump).steps.height == STEP_COUNT[YARN]
