"""Megatron's rows, pinned: the real logs (whole, with \\r\\n line ends, cut, with damaged bytes), the edge lines
of tests/test_log_fast_paths.py, and, under hypothesis, generated and mutated logs that must parse without a crash
to the same rows however the log is cut into chunks.

The real logs' numbers are counted outside the code, by awk over the file (the command is beside each number);
the edge lines' rows are read off the lines by eye (the reason is beside each row).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conftest import examples, realdata
from receipts.errors import InputError
from receipts.ingest import megatron
from receipts.ingest.textlog import read_chunks
from test_log_fast_paths import MEGATRON_EDGES
from test_log_stream import _assert_same

MDS = "megatron-deepspeed__gpt3-0.125B-tokendropping-graduallyIncrease-lr-3.0e-4-baseline.log"
ISSUE756 = "megatron-lm_issue756_mixtral_16xH100.txt"
MB = 1 << 20
BLOCKS = (997, 1 << 20, 8 << 20)  # a chunk of a few lines, of a few thousand, the whole log


def _parse(path: Path, block: int = 8 << 20):
    try:
        return megatron.parse_chunks(path, read_chunks(path, block_bytes=block))
    except InputError as exc:
        return f"InputError: {exc}"


def _written(tmp_path: Path, data: bytes, name: str = "cut.log") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


# awk over the Megatron-DeepSpeed log, each iteration line with its \r stripped:
#   awk '/ iteration +[0-9]+\/ *[0-9]+ \|/ { sub(/\r$/, ""); n++; lines += NR;
#        match($0, /iteration +[0-9]+/) ... step; match($0, /elapsed time per iteration \(ms\): [0-9.]+/) ... ms;
#        match($0, /lm loss: [-+0-9.eE]+/) ... loss; match($0, /consumed tokens: +[0-9]+/) ... tok;
#        if (n > 1) tps += (tok - ptok) / (step - pstep) * 1000.0 / ms; ... }'
MDS_ROWS = 47
MDS_STEPS = list(range(10, 471, 10))
MDS_LINE_SUM = 133368
MDS_STEP_MS_SUM = 24710.0
MDS_LOSS_SUM = 429.74716699999993
MDS_TOKENS_PER_S_SUM = 47756239.631370239  # derived from consumed tokens: the log prints no tokens per second


def _assert_mds_rows(run) -> None:
    steps = run.steps
    assert steps.height == MDS_ROWS
    assert steps["step"].to_list() == MDS_STEPS
    assert steps["line"].sum() == MDS_LINE_SUM
    assert (steps["line"][0], steps["line"][-1]) == (2740, 2936)
    assert steps["step_ms"].sum() == pytest.approx(MDS_STEP_MS_SUM, rel=1e-12)
    assert steps["loss"].sum() == pytest.approx(MDS_LOSS_SUM, rel=1e-12)
    assert steps["tokens_per_s"][0] is None and steps["tokens_per_s"].null_count() == 1
    assert steps["tokens_per_s"].sum() == pytest.approx(MDS_TOKENS_PER_S_SUM, rel=1e-12)
    # grep -c 'memory (MB)': one report, line 2739, after iteration 10
    assert steps["allocated_bytes"].drop_nulls().to_list() == [int(1674.31005859375 * MB)]
    assert [(m.rank, m.peak_allocated_bytes, m.peak_reserved_bytes) for m in run.memory] == \
        [(0, int(7176.13916015625 * MB), 8774 * MB)]
    assert run.provenance == {"train_iters": 171661}  # `train_iters ..... 171661` in the arguments dump


@pytest.mark.parametrize("block", BLOCKS)
def test_the_megatron_deepspeed_log_reads_to_its_awk_counts(block: int) -> None:
    run = _parse(realdata("logs", MDS), block)
    _assert_mds_rows(run)
    # grep -n Traceback: the first after the last iteration line is line 2938
    assert "line 2938" in run.ended_early and "iteration 470 of 171661" in run.ended_early


def test_line_ends_do_not_change_the_rows(tmp_path: Path) -> None:
    """The log mixes \\n and \\r\\n line ends (file(1): `with CRLF, LF line terminators`): all \\r\\n, or all
    \\n, it is the same rows."""
    data = realdata("logs", MDS).read_bytes()
    for name, variant in (("crlf.log", data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")),
                          ("lf.log", data.replace(b"\r\n", b"\n"))):
        for block in (997, 8 << 20):
            _assert_mds_rows(_parse(_written(tmp_path, variant, name), block))


def test_a_cut_log_keeps_the_whole_lines_before_the_cut(tmp_path: Path) -> None:
    data = realdata("logs", MDS).read_bytes()
    # grep -b: line 2936, the last iteration line (iteration 470, 326 bytes), starts at byte 271030
    assert data[271030:271030 + 20] == b" iteration      470/"
    for block in (997, 8 << 20):
        mid_line = _parse(_written(tmp_path, data[:271030 + 200]), block)
        assert mid_line.steps["step"].to_list() == MDS_STEPS[:-1]
        assert mid_line.ended_early == "line 2936 is cut short (no newline at end of file); ingested up to line 2935"
        after = _parse(_written(tmp_path, data[:-5]), block)  # in the last line of the traceback: every row is there
        assert after.steps["step"].to_list() == MDS_STEPS
        assert after.ended_early == "line 3225 is cut short (no newline at end of file); ingested up to line 3224"
        before = _parse(_written(tmp_path, data[:len(data) // 3]), block)  # byte 99058: inside the config dump
        assert before.startswith("InputError: ") and "no Megatron iteration lines found" in before


def test_damaged_bytes_cost_only_what_they_touch(tmp_path: Path) -> None:
    """A byte that is not UTF-8 reads as U+FFFD: a number stops where it begins, a word it breaks no longer
    matches; every other row is as it was."""
    data = realdata("logs", MDS).read_bytes()
    line_20 = data.index(b" iteration       20/")  # line 2744: ... (ms): 484.7 | ... lm loss: 1.074999E+01 | ...

    def damaged(at: bytes, offset: int) -> pl.DataFrame:
        copy = bytearray(data)
        copy[data.index(at, line_20) + offset] = 0xFF
        return _parse(_written(tmp_path, bytes(copy))).steps

    rows = damaged(b"(ms): 484.7", 7)  # 4\xff4.7: `[0-9.]+` reads `4`
    assert rows.height == MDS_ROWS and rows.filter(pl.col("step") == 20)["step_ms"].to_list() == [4.0]
    rows = damaged(b"lm loss: 1.074999E+01", 12)  # 1.0\xff4999E+01: the loss reads `1.0`
    assert rows.height == MDS_ROWS and rows.filter(pl.col("step") == 20)["loss"].to_list() == [1.0]
    assert rows.filter(pl.col("step") == 20)["step_ms"].to_list() == [484.7]
    rows = damaged(b"iteration       20/", 3)  # it\xffration: not an iteration line
    assert rows["step"].to_list() == [s for s in MDS_STEPS if s != 20]
    # the row after it differences its tokens against iteration 10: (15728640 - 5242880) / 20 / 0.4845 s
    assert rows.filter(pl.col("step") == 30)["tokens_per_s"][0] == pytest.approx(10485760 / 20 / 0.4845, rel=1e-12)


@pytest.mark.parametrize("line_end", [b"\n", b"\r\n"])
def test_the_megatron_lm_excerpt_reads_to_its_two_rows(tmp_path: Path, line_end: bytes) -> None:
    """Three lines: a memory report after iteration 1, iterations 2 and 3 (read off the file)."""
    data = realdata("logs", ISSUE756).read_bytes().replace(b"\n", line_end)
    run = _parse(_written(tmp_path, data, "issue756.txt"))
    assert run.steps.select("step", "step_ms", "loss", "tokens_per_s", "allocated_bytes", "line").rows() == [
        (2, 5630.1, 2.02153, None, None, 2), (3, 5410.6, 2.003316, None, None, 3)]
    assert [(m.rank, m.peak_allocated_bytes, m.peak_reserved_bytes) for m in run.memory] == \
        [(1, int(54250.98583984375 * MB), 61480 * MB)]
    assert run.started_at == "2024-04-06T02:55:45" and run.provenance == {"train_iters": 100}


NAN, INF = float("nan"), float("inf")
# The edge lines, one a line in this order (line k is MEGATRON_EDGES[k - 1]): (line, step, step_ms, loss,
# tokens_per_s) of each row. Lines 1-10 are the Megatron-DeepSpeed layout (iteration 10, 1001.5 ms, consumed tokens
# 5242880) and 11-20 Megatron-LM's (iteration 2, 5630.1 ms, no tokens) with the losses 1.078335E+01, nan, inf, -inf,
# NaN, +1.5e-3, -, infinity, `1.0|`, and none. The loss is the first `| lm loss: ` followed by `[-+0-9.eE]+`, `nan`
# or `inf`, cast: `-inf` and `-` read `-` (null), `NaN` matches nothing (null), `infinity` reads `inf`. Tokens per
# second are differences of consumed tokens from the row before (line order) over the step difference: the same step
# twice is 0 / 0 (NaN); a row before it without tokens gives null; Megatron-LM's rows have none.
EDGE_ROWS = [
    (1, 10, 1001.5, 10.78335, None), (2, 10, 1001.5, NAN, NAN), (3, 10, 1001.5, INF, NAN),
    (4, 10, 1001.5, None, NAN), (5, 10, 1001.5, None, NAN), (6, 10, 1001.5, 0.0015, NAN),
    (7, 10, 1001.5, None, NAN), (8, 10, 1001.5, INF, NAN), (9, 10, 1001.5, 1.0, NAN), (10, 10, 1001.5, None, NAN),
    (11, 2, 5630.1, 10.78335, None), (12, 2, 5630.1, NAN, None), (13, 2, 5630.1, INF, None),
    (14, 2, 5630.1, None, None), (15, 2, 5630.1, None, None), (16, 2, 5630.1, 0.0015, None),
    (17, 2, 5630.1, None, None), (18, 2, 5630.1, INF, None), (19, 2, 5630.1, 1.0, None), (20, 2, 5630.1, None, None),
    (21, 10, 1001.5, None, None),       # no `| lm loss: ` at all; the row before has no tokens
    (22, 10, 1001.5, 2.5, NAN),         # `lm loss: abc`, then `| lm loss: 2.5 | lm loss: 3.5 |`: the first that reads
    (23, 2, 5630.1, 2.0, 1234.5),       # `tokens per sec: 1,234.5` printed: taken as printed
    (24, 2, 5630.1, 2.0, 99.0),         # `tokens per second: 99`
    (25, 2, 5630.1, 2.0, None),         # consumed tokens printed last; the row before has none
    (26, 10, 1001.5, 2.0, None),        # no consumed tokens
    (27, 10, 1001.5, 2.0, None),        # `consumed tokens: x`
    (28, 10, None, 2.0, None),          # no elapsed time
    # line 29: iteration 99999999999999999999, past Int64: no row
    (30, 10, None, 2.0, None),          # `(ms): 1.0.0.5` does not cast
    (31, 10, None, 2.0, None),          # U+00A0 around each ` iteration ` (also in `per iteration (ms)`)
    # line 32: `iteration\r10/`: the text after the \r (progress-bar clean-up) holds no `iteration`: no row
    (33, 10, 1001.5, 2.0, NAN),         # a trailing \r, stripped; the row before is iteration 10 with its tokens
    (34, 10, 1001.5, 2.0, NAN),         # `[rank0]: ` before it
    (35, 10, 1001.5, 2.0, NAN),         # a bare timestamp before it
    (36, 3, 1.0, 1.0, None),            # two bracketed timestamps
    # line 37: `setting training iterations to 171661`: no row
    (38, 5, None, 1.0, None),           # no elapsed time
    (39, 1, 1.0, None, None),           # `foo iteration 1/ 2 | ... | iteration 3/ 4 |`: the first iteration
    (40, 10, 1001.5, 2.0, None),        # and the memory report after it on the same line
]


def _same_value(got, expected) -> bool:
    if expected is None or got is None:
        return got is expected
    return (got != got and expected != expected) or got == expected


def test_the_edge_lines_read_to_their_rows(tmp_path: Path) -> None:
    log = tmp_path / "edges.log"
    log.write_text("\n".join(MEGATRON_EDGES) + "\n", encoding="utf-8", newline="")
    for block in (64, 1 << 20):  # a chunk per line, and one chunk
        run = _parse(log, block)
        got = sorted(run.steps.select("line", "step", "step_ms", "loss", "tokens_per_s").rows())
        assert [r[0] for r in got] == [r[0] for r in EDGE_ROWS]
        for row, expected in zip(got, EDGE_ROWS):
            assert all(_same_value(g, e) for g, e in zip(row, expected)), (row, expected)
        # line 40's report: `(after 10 iterations) ... allocated: 1.0 | max allocated: 2.0 | reserved: 3.0 | max
        # reserved: 4.0`, joined to every iteration-10 row
        assert set(run.steps.filter(pl.col("step") == 10)["allocated_bytes"]) == {MB}
        assert [(m.rank, m.peak_allocated_bytes, m.peak_reserved_bytes) for m in run.memory] == [(0, 2 * MB, 4 * MB)]
        assert run.started_at == "2024-04-06T02:55:45"  # line 11's, the first stamped iteration line
        assert run.provenance == {"train_iters": 171661} and run.ended_early is None


def _assert_stable(path: Path, blocks=(200, 1 << 20)) -> None:
    """Parses without a crash (a receipt or one InputError), to the same outcome in chunks of any size."""
    outcomes = [_parse(path, block) for block in blocks]
    for other in outcomes[1:]:
        _assert_same(outcomes[0], other)


def test_each_edge_line_alone_and_cut_is_stable(tmp_path: Path) -> None:
    for k, line in enumerate(MEGATRON_EDGES):  # after a usual line, and as a cut last line
        for end in ("\n", ""):
            one = tmp_path / f"edge{k}{'' if end else '-cut'}.log"
            one.write_text(MEGATRON_EDGES[0] + "\n" + line + end, encoding="utf-8", newline="")
            _assert_stable(one, blocks=(64, 1 << 20))


# Numbers as the patterns admit them: the spellings a cast reads, and those it refuses.
_digits = st.from_regex(r"\A[0-9]{1,25}\Z")
_decimal = st.one_of(st.floats(0, 1e9, allow_nan=False).map(lambda x: f"{x:.{len(str(x)) % 7}f}"),
                     st.from_regex(r"\A[0-9.]{1,12}\Z"))
_loss = st.one_of(st.floats(allow_nan=False, allow_infinity=False).flatmap(
                      lambda x: st.sampled_from([repr(x), f"{x:.6E}", f"{x:e}", f"{x:.3f}", f"{x:+.17g}"])),
                  st.sampled_from(["nan", "inf", "-inf", "NaN", "infinity", "-", "e5", "1e", "1e+", ".5", "5.",
                                   "1.5e-3", "-0.0", "1" * 30 + ".5", "9" * 400]),
                  st.from_regex(r"\A[-+0-9.eE]{1,10}\Z"))
# What makes another part of megatron.py read a line (tokens per second, a memory report, the banner, an argument).
_aside = st.sampled_from(["", "", "", " tokens per sec: 1,234.5 |", " tokens per second: 99 |", " consumed tokens: 512 |",
                          " memory (MB) | allocated: 1.0 |", " using world size: 8 |", " num_layers .... 24",
                          " [2024-04-06 02:55:45] |", " [2024-04-06 02:55] |", "\r", " \u00a0 |", " | lm loss: 7.5 |",
                          " é |", " .. |", " (MB) |", " kw |", " | l |"])


@st.composite
def _iteration_line(draw) -> str:
    prefix = draw(st.sampled_from(["", " ", " [2024-04-06 02:55:45] ", "[2024-04-06 02:55:45]", " [12:00] ",
                                   "\t", " [] ", "[rank0]: "]))
    tokens = draw(st.one_of(st.none(), _digits))
    line = (f"{prefix}iteration{draw(st.sampled_from([' ', '   ', chr(9)]))}{draw(_digits)}/"
            f"{draw(st.sampled_from(['', ' ', '  ']))}{draw(_digits)} | consumed samples:"
            f"{draw(st.sampled_from([' ', '     ']))}{draw(_digits)} | "
            + (f"consumed tokens: {tokens} | " if tokens is not None else "")
            + f"elapsed time per iteration (ms): {draw(_decimal)} | learning rate: 1.0E-04 |")
    middle = draw(_aside)
    loss = draw(st.one_of(st.none(), _loss))
    tail = f" lm loss: {loss} | loss scale: 1.0 |" if loss is not None else " loss scale: 1.0 |"
    return line + middle + tail + draw(_aside)


@pytest.mark.slow
@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(st.one_of(_iteration_line(), st.sampled_from(MEGATRON_EDGES)), min_size=1, max_size=12),
       terminated=st.booleans())
def test_any_iteration_lines_parse_to_stable_rows(lines: list[str], terminated: bool) -> None:
    assume("".join(lines) or terminated)  # an empty file is refused before any parser (sniff, read_log)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "generated.log"
        log.write_text("\n".join(lines) + ("\n" if terminated else ""), encoding="utf-8", newline="")
        _assert_stable(log)


# Bytes a mutation puts into a real log: line ends, field separators, parts of numbers and of the words read.
_MUTANT_BYTES = st.sampled_from([b"\n", b"\r", b"\r\n", b"|", b"| lm loss: ", b"[", b"]", b".", b"..", b" ", b"\t",
                                 b"e", b"E", b"-", b"+", b"0", b"9" * 20, b"\x00", b"\x80", b"\xff", b"\xc2\xa0",
                                 b"k", b"(", b"w", b"iteration ", b" consumed tokens: 7 |", b"nan", b"inf"])


@pytest.mark.slow
@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 40), _MUTANT_BYTES), min_size=1, max_size=25),
       cut=st.one_of(st.none(), st.floats(0.05, 1)))
def test_a_mutated_real_log_parses_to_stable_rows(edits, cut) -> None:
    """The real Megatron-DeepSpeed log's iteration lines with bytes replaced, inserted or removed anywhere (and
    the file cut anywhere): a receipt or one error, the same in chunks of any size."""
    data = bytearray(realdata("logs", MDS).read_bytes()[226_000:240_000])  # the arguments' end, ~40 iteration lines
    for where, span, put in edits:
        at = int(where * len(data))
        data[at:at + span % 3] = put  # replace 0, 1 or 2 bytes: an insertion, a change, a removal with others
    if cut is not None:
        data = data[:max(1, int(cut * len(data)))]
    assume(bytes(data).strip())
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "mutated.log"
        log.write_bytes(bytes(data))
        if b"\x00" in data[:8192]:  # the reader looks for NUL in the first 8 KiB of its first block (8 MiB)
            assert "looks binary" in _parse(log)
            return
        _assert_stable(log, blocks=(300, 1 << 20))
