"""The step-log parsers' one-pass reading of the usual layout gives what reading each field by its own pattern gives.

nanochat's step lines and Megatron's iteration lines are read in one regex pass where they have the usual layout
(nanochat._USUAL_LINE; megatron._USUAL_START, with the loss read from the whole match of its pattern); every
other line is read field by field. Here every line is read both ways: each real log and run.log under tests/data,
and edge lines made to sit on the border of the usual layout (nan/inf losses, a missing, moved or repeated
field, `\\r`, a timestamp or rank prefix, Unicode spaces, a step past Int64). Megatron's tokens/s, extracted only in
a chunk that prints it, is checked chunk by chunk.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from conftest import REPO, realdata
from receipts.ingest import megatron, nanochat
from receipts.ingest.textlog import read_chunks, read_log

RUN_LOGS = sorted((REPO / "tests" / "data").rglob("run.log"))

NANOCHAT_EDGES = [
    "step 00100/21400 (0.47%) | loss: 3.140000 | lrm: 1.00 | dt: 456.78ms | tok/sec: 1,148,000 | mfu: 48.52 | total time: 0.76m",
    "step 00001 (0.00%) | loss: 5.471677 | lrm: 1.00 | dt: 1142.98ms | tok/sec: 111 | mfu: 0.00 | epoch: 1 | total time: 0.00m",
    "step 00002 (0.00%)| loss: 5.4 | lrm: 1.00 | dt: 5.71ms | tok/sec: 22,429 | mfu: 0.00",
    "step 00003/00010 | loss: 5.4 | lrm: 1.00 | dt: 5.71ms | tok/sec: 22,429 | mfu: 0.00",
    "step 00004 | loss: 5.4 | lrm: 1.00 | dt: 5.71ms | tok/sec: 22,429 | mfu: 0.00",
    "step 00005|loss: 5.4 | lrm: 1.00 | dt: 5.71ms | tok/sec: 22,429 | mfu: 0.00",
    "step 00006 (0.00%)  | loss: 5.4 | lrm: 1.00 | dt: 5.71ms | tok/sec: 22,429 | mfu: 0.00",
    "step 00007 (0.00%) | loss: nan | lrm: 1.00 | dt: 5.71ms | tok/sec: 22,429 | mfu: 0.00",
    "step 00008 (0.00%) | loss: inf | lrm: 1.00 | dt: 5.71ms | tok/sec: 22,429 | mfu: 0.00",
    "step 00009 (0.00%) | loss: -inf | lrm: 1.00 | dt: 5.71ms | tok/sec: 22,429 | mfu: 0.00",
    "step 00010 (0.00%) | loss: NaN | lrm: 1.00 | dt: 5.71ms | tok/sec: 22,429 | mfu: 0.00",
    "step 00011 (0.00%) | loss: 1,234.5 | lrm: 1.00 | dt: 5.71ms | tok/sec: 1,2,3 | mfu: 0.00",
    "step 00012 (0.00%) | loss: 5.4 | lrm: 1.00 | dt: 5.71ms | mfu: 0.00 | tok/sec: 22,429",
    "step 00013 (0.00%) | loss: 5.4 | lrm: 1.00 | dt: 5.71ms | tok/sec: 22,429",
    "step 00014 (0.00%) | loss: 5.4 | dt: 5.71ms | tok/sec: 22,429 | mfu: 0.00",
    "step 00015 (0.00%) | lrm: 1.00 | dt: 5.71ms | tok/sec: 22,429 | mfu: 0.00",
    "step 00016 (0.00%) | loss: 5.4 | lrm: 1.00 | dt: ms | tok/sec: 22,429 | mfu: 0.00",
    "step 00017 (0.00%) | loss: 5.4 | lrm: 1.00 | dt: 5.71ms | tok/sec: 22,429 | mfu: 0.00\r",
    "step 00018 (0.00%) | loss: 5.4\r | lrm: 1.00 | dt: 5.71ms | tok/sec: 22,429 | mfu: 0.00",
    "step 00019 (0.00%) | loss: 5.4 | lrm: 1.00 | dt: 5.71ms | tok/sec: 22,429 | mfu: 0.00 | loss: 9.9 | dt: 1.0ms",
    "[rank0]: step 00020/00100 (0.00%) | loss: 5.4 | lrm: 1.00 | dt: 5.71ms | tok/sec: 22,429 | mfu: 0.00",
    "2026-03-16 22:57:30,775 - step 00021 | loss: 5.4 | dt: 5.71ms",
    "Step 00022/00500 | Training loss: 1.23| lrm: 1.000000| num_tokens: 12,345",
    "Step 00000 | Validation bpb: 3.3",
    "step 99999999999999999999 (0.00%) | loss: 5.4 | lrm: 1.00 | dt: 5.71ms | tok/sec: 22,429 | mfu: 0.00",
    "step 00023 (0.00%) | loss: 5.4 | lrm: 1.00 | dt: 5.7.1ms | tok/sec: 22,429 | mfu: 0.0.0",
    "step 00024 (0.00%) | loss: 5.4 | lrm: 1.00 | dt: 5.71ms | tok/sec: 22,429 | mfu:  0.00",
    "step\u00a000025 (0.00%) | loss: 5.4 | lrm: 1.00 | dt: 5.71ms | tok/sec: 22,429 | mfu: 0.00",
    "",
]

_DS = (" iteration       10/  171661 | consumed samples:         2560 | consumed tokens:      5242880 | elapsed time "
       "per iteration (ms): 1001.5 | learning rate: 9.339E-08 | global batch size:   256 |reserve_length:   256 "
       "| lm loss: {loss} | loss scale: 2048.0 | number of skipped iterations:   0 | number of nan iterations:   0 |")
_LM = (" [2024-04-06 02:55:45] iteration        2/     100 | consumed samples:          256 | elapsed time per "
       "iteration (ms): 5630.1 | throughput per GPU (TFLOP/s/GPU): 231.9 | learning rate: 4.000000E-07 | global "
       "batch size:   128 | lm loss: {loss} | loss scale: 1.0 | grad norm: 6.895 |")
MEGATRON_EDGES = [
    *(layout.format(loss=loss) for layout in (_DS, _LM)
      for loss in ("1.078335E+01", "nan", "inf", "-inf", "NaN", "+1.5e-3", "-", "infinity", "1.0|", "")),
    _DS.replace("| lm loss: {loss} ", ""),
    _DS.format(loss="abc") + " lm loss: 2.5 | lm loss: 3.5 |",
    _LM.format(loss="2.0") + " tokens per sec: 1,234.5 |",
    _LM.format(loss="2.0").replace("| throughput", "| tokens per second: 99 | throughput"),
    _LM.format(loss="2.0") + " consumed tokens:      512 |",
    _DS.format(loss="2.0").replace("consumed tokens:      5242880 | ", ""),
    _DS.format(loss="2.0").replace("| consumed tokens:      5242880 ", "| consumed tokens: x "),
    _DS.format(loss="2.0").replace("| elapsed time per iteration (ms): 1001.5 ", ""),
    _DS.format(loss="2.0").replace("iteration       10", "iteration       99999999999999999999"),
    _DS.format(loss="2.0").replace("(ms): 1001.5", "(ms): 1.0.0.5"),
    _DS.format(loss="2.0").replace(" iteration ", "\u00a0iteration\u00a0"),
    _DS.format(loss="2.0").replace("iteration       10/", "iteration\r10/"),
    _DS.format(loss="2.0") + "\r",
    "[rank0]: " + _DS.format(loss="2.0"),
    "2024-04-06 02:55:45 " + _DS.format(loss="2.0"),
    " [2024-04-06 02:55:45] [2024-04-06 02:55:46] iteration 3/ 10 | consumed samples: 1 | elapsed time per "
    "iteration (ms): 1.0 | lm loss: 1.0 |",
    "setting training iterations to 171661",
    " iteration 5/ 10 | consumed samples: 5 | lm loss: 1.0 |",
    "foo iteration 1/ 2 | consumed samples: 1 | elapsed time per iteration (ms): 1.0 | iteration 3/ 4 |",
    _DS.format(loss="2.0") + "[Rank 0] (after 10 iterations) memory (MB) | allocated: 1.0 | max allocated: 2.0 "
    "| reserved: 3.0 | max reserved: 4.0",
    "",
]


def _frame(lines: list[str]) -> pl.DataFrame:
    return pl.DataFrame({"text": pl.Series(lines, dtype=pl.Utf8)}).with_row_index("line", offset=1).with_columns(
        pl.col("line").cast(pl.Int64))


def _nanochat_general(frame: pl.DataFrame) -> pl.DataFrame:
    rows = nanochat._step_rows_field_by_field(frame)
    return rows.filter(pl.col("step").is_not_null() & (pl.col("loss").is_not_null() | pl.col("step_ms").is_not_null()))


def _both_ways(module_name: str, frame: pl.DataFrame) -> int:
    """Asserts the one-pass and the field-by-field readings of `frame` agree; the lines read in one pass."""
    if module_name == "nanochat":
        assert_frame_equal(nanochat._step_rows(frame), _nanochat_general(frame), check_exact=True)
        return int(frame["text"].str.contains(nanochat._USUAL_LINE).sum())
    assert_frame_equal(megatron._iteration_rows(frame), megatron._iteration_rows_field_by_field(frame),
                       check_exact=True)
    return int(frame["text"].str.contains(megatron._USUAL_START).sum())


@pytest.mark.parametrize("module_name", ["nanochat", "megatron"])
def test_usual_layout_reads_as_field_by_field_on_every_real_log(module_name: str) -> None:
    logs = [p for p in sorted(realdata("logs").glob("*")) if p.is_file()] + RUN_LOGS
    fast_lines = 0
    for path in logs:
        fast_lines += _both_ways(module_name, read_log(path).frame())
    assert fast_lines > 40  # the real logs of the format do take the one-pass reading


@pytest.mark.parametrize("module_name, lines", [("nanochat", NANOCHAT_EDGES), ("megatron", MEGATRON_EDGES)])
def test_usual_layout_reads_as_field_by_field_on_edge_lines(module_name: str, lines: list[str]) -> None:
    assert _both_ways(module_name, _frame(lines)) >= 2
    for line in lines:  # alone too: a frame with no line of the usual layout, or only one
        _both_ways(module_name, _frame([line]))


def test_edge_lines_survive_the_reader(tmp_path: Path) -> None:
    """The same lines written to a log and read back (\\r cleaned as a log's lines are) agree both ways too."""
    for module_name, lines in (("nanochat", NANOCHAT_EDGES), ("megatron", MEGATRON_EDGES)):
        log = tmp_path / f"{module_name}.log"
        log.write_text("\n".join(lines) + "\n", encoding="utf-8", newline="")
        _both_ways(module_name, read_log(log).frame())


def test_tokens_per_second_is_read_in_each_chunk_that_prints_it(tmp_path: Path) -> None:
    """Megatron reads tokens/s only in a chunk with a `tokens per` line (else it is null there, then derived)."""
    row = (" iteration {:8d}/      10 | consumed samples: {:12d} | consumed tokens: {:12d} | elapsed time per "
           "iteration (ms): {} |{} lm loss: 1.0 |")
    log = tmp_path / "tps.log"
    log.write_text("\n".join([row.format(1, 256, 524288, "1000.0", " tokens per sec: 1,234.5 |"),
                              row.format(2, 512, 1048576, "500.0", ""),
                              "[Rank 0] (after 2 iterations) memory (MB) | allocated: 1.0 | max allocated: 2.0 | "
                              "reserved: 3.0 | max reserved: 4.0",
                              row.format(3, 768, 1572864, "250.0", " tokens per second: 99 |")]) + "\n")
    for block in (64, 1 << 20):  # a chunk per line, and one chunk
        steps = megatron.parse_chunks(log, read_chunks(log, block_bytes=block)).steps
        assert steps["tokens_per_s"].to_list() == [1234.5, 1048576.0, 99.0]
        assert steps["allocated_bytes"].to_list() == [None, 1 << 20, None]
