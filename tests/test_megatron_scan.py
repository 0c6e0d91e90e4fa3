"""Megatron's native line scanner (ingest/megatron_scan.py, _megatron_lines.c) reads every log to the rows the
polars path reads it to.

Each log is parsed chunk by chunk twice, with the scanner and without it (as an install without a C compiler
parses), and the two ParsedRuns must be equal: the real Megatron logs (and every other real log, which the
scanner must leave to polars), the edge lines of tests/test_log_fast_paths.py, and, under hypothesis, logs
built from the usual layouts with their numbers spelled every way the patterns admit and the words that make
another part of megatron.py read a line put anywhere in it. The scanner must also read the usual lines itself:
a scanner that handed every line to polars would pass the equality and be of no use.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conftest import REALDATA, REPO
from receipts.errors import InputError
from receipts.ingest import megatron, megatron_scan
from receipts.ingest.textlog import numbered, read_chunks, split_lines
from test_log_fast_paths import MEGATRON_EDGES
from test_log_stream import _assert_same

MEGATRON_LOGS = [REALDATA / "logs" / "megatron-deepspeed__gpt3-0.125B-tokendropping-graduallyIncrease-lr-3.0e-4-baseline.log",
                 REALDATA / "logs" / "megatron-lm_issue756_mixtral_16xH100.txt"]
OTHER_LOGS = sorted(p for p in (REALDATA / "logs").glob("*") if p.is_file() and p not in MEGATRON_LOGS
                    and p.suffix != ".json") + sorted((REPO / "tests" / "data").rglob("run.log"))

needs_scanner = pytest.mark.skipif(not megatron_scan.available() and os.environ.get("RECEIPTS_REQUIRE_NATIVE") != "1",
                                   reason="the native scanner is not built here (no C compiler at install)")


def test_the_scanner_is_built_where_required() -> None:
    """scripts/test.sh (hence CI) installs with a compiler and sets RECEIPTS_REQUIRE_NATIVE=1: there a missing
    scanner is a failure, not a skip that would leave the polars path alone under test."""
    if os.environ.get("RECEIPTS_REQUIRE_NATIVE") == "1":
        assert megatron_scan.available()


def _parse(path: Path, block: int, *, native: bool):
    saved = megatron_scan._scanner
    if not native:
        megatron_scan._scanner = None
    try:
        return megatron.parse_chunks(path, read_chunks(path, block_bytes=block))
    except InputError as exc:
        return f"InputError: {exc}"
    finally:
        megatron_scan._scanner = saved


def _assert_same_both_ways(path: Path, blocks=(997, 1 << 20)) -> None:
    for block in blocks:
        _assert_same(_parse(path, block, native=False), _parse(path, block, native=True))


def _scanned_rows(path: Path) -> tuple[int, int]:
    """(rows the scanner read, lines the polars path reads as iteration rows) over the whole file."""
    block = path.read_bytes()
    scanned = megatron_scan.scan(block, 1)
    polars_rows = megatron._iteration_rows(numbered(split_lines(block)))
    return scanned.usual.height, polars_rows.height


@needs_scanner
@pytest.mark.parametrize("path", MEGATRON_LOGS, ids=lambda p: p.name[:40])
def test_real_megatron_logs_read_the_same_with_the_scanner(path: Path, tmp_path: Path) -> None:
    _assert_same_both_ways(path)
    data = path.read_bytes()
    for k, cut in enumerate((len(data) // 3, len(data) // 2 + 17, len(data) - 5)):  # a writer killed mid-line
        cut_log = tmp_path / f"cut{k}.log"
        cut_log.write_bytes(data[:cut])
        _assert_same_both_ways(cut_log)
    read, iteration_rows = _scanned_rows(path)
    assert read > 0.9 * iteration_rows, (read, iteration_rows)  # the usual lines are the scanner's
    crlf = tmp_path / "crlf.log"  # written with \r\n line ends: read the same, and still by the scanner
    crlf.write_bytes(data.replace(b"\n", b"\r\n"))
    _assert_same_both_ways(crlf)
    assert _scanned_rows(crlf)[0] == read


@needs_scanner
@pytest.mark.parametrize("path", OTHER_LOGS, ids=lambda p: p.name[:40] if p.name != "run.log" else p.parent.name)
def test_other_logs_read_the_same_with_the_scanner(path: Path) -> None:
    _assert_same_both_ways(path, blocks=(4096,))


@needs_scanner
def test_edge_lines_read_the_same_with_the_scanner(tmp_path: Path) -> None:
    log = tmp_path / "edges.log"
    log.write_text("\n".join(MEGATRON_EDGES) + "\n", encoding="utf-8", newline="")
    _assert_same_both_ways(log, blocks=(64, 1 << 20))
    for k, line in enumerate(MEGATRON_EDGES):  # alone, and as a cut last line
        for end in ("\n", ""):
            one = tmp_path / f"edge{k}{'' if end else '-cut'}.log"
            one.write_text(MEGATRON_EDGES[0] + "\n" + line + end, encoding="utf-8", newline="")
            _assert_same_both_ways(one, blocks=(1 << 20,))


# Numbers as the patterns admit them: the spellings a cast reads, and those it refuses.
_digits = st.from_regex(r"\A[0-9]{1,25}\Z")
_decimal = st.one_of(st.floats(0, 1e9, allow_nan=False).map(lambda x: f"{x:.{len(str(x)) % 7}f}"),
                     st.from_regex(r"\A[0-9.]{1,12}\Z"))
_loss = st.one_of(st.floats(allow_nan=False, allow_infinity=False).flatmap(
                      lambda x: st.sampled_from([repr(x), f"{x:.6E}", f"{x:e}", f"{x:.3f}", f"{x:+.17g}"])),
                  st.sampled_from(["nan", "inf", "-inf", "NaN", "infinity", "-", "e5", "1e", "1e+", ".5", "5.",
                                   "1.5e-3", "-0.0", "1" * 30 + ".5", "9" * 400]),
                  st.from_regex(r"\A[-+0-9.eE]{1,10}\Z"))
# What makes another part of megatron.py read a line, or makes it the polars path's.
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


@needs_scanner
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(st.one_of(_iteration_line(), st.sampled_from(MEGATRON_EDGES)), min_size=1, max_size=12),
       terminated=st.booleans())
def test_any_iteration_lines_read_the_same_with_the_scanner(lines: list[str], terminated: bool) -> None:
    assume("".join(lines) or terminated)  # an empty file is refused before any parser (sniff, read_log)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "generated.log"
        log.write_text("\n".join(lines) + ("\n" if terminated else ""), encoding="utf-8", newline="")
        _assert_same_both_ways(log, blocks=(200, 1 << 20))


@needs_scanner
def test_the_scanner_reads_the_usual_lines_itself(tmp_path: Path) -> None:
    """The lines it must read (and the numbers it must reach), and those it must leave to polars."""
    usual = (" iteration        3/      10 | consumed samples:          768 | consumed tokens:      1572864 | "
             "elapsed time per iteration (ms): 250.5 | lm loss: 1.078335E+01 | loss scale: 1.0 |")
    block = "\n".join([usual, usual.replace("1.078335E+01", "nan"), usual.replace("| lm loss: 1.078335E+01 ", ""),
                       usual + " tokens per sec: 5 |", usual.replace("250.5", "250.5.1"), "other"]).encode()
    scanned = megatron_scan.scan(block, 41)
    assert scanned.usual["line"].to_list() == [41, 42, 43]
    assert scanned.usual.row(0) == (41, 3, 768.0, 1572864.0, 250.5, 10.78335, None)
    assert scanned.usual["loss"].is_nan().to_list() == [False, True, None]
    assert scanned.others["line"].to_list() == [44, 45, 46]
    assert scanned.others["text"][-1] == "other" and scanned.n_lines == 6
    assert scanned.usual_text(2) == usual.replace("| lm loss: 1.078335E+01 ", "")
    cut = megatron_scan.scan(usual.encode() + b"\n" + usual.encode(), 1, last_as_text=True)  # a cut log's last line
    assert cut.usual["line"].to_list() == [1] and cut.others["line"].to_list() == [2]


@needs_scanner
def test_the_scanner_reaches_the_nearest_double_as_polars_does() -> None:
    """Its numbers are polars' casts of the same text, to the bit, over many spellings (a fast path that rounded
    twice, for a mantissa past 2^53 or a power of ten past 1e22, would differ in the last bit somewhere here)."""
    import random

    rng = random.Random(20261124)
    losses, times, samples = [], [], []
    for _ in range(40_000):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 20)))
        point = rng.randint(0, len(digits))
        mantissa = digits[:point] + ("." + digits[point:] if point < len(digits) else "")
        exponent = rng.choice(["", f"e{rng.randint(-30, 30)}", f"E+{rng.randint(0, 330):02d}", f"e-{rng.randint(0, 330)}"])
        losses.append(rng.choice(["", "-", "+"]) + mantissa.lstrip(".") + exponent)
        times.append(mantissa if not mantissa.startswith(".") else "0" + mantissa)
        samples.append(digits)
    row = (" iteration {i}/ 99 | consumed samples: {s} | elapsed time per iteration (ms): {t} | lm loss: {loss} |")
    block = "\n".join(row.format(i=i, s=s, t=t, loss=loss)
                      for i, (s, t, loss) in enumerate(zip(samples, times, losses), 1)).encode()
    scanned = megatron_scan.scan(block, 1)
    assert scanned.others.height < 0.01 * len(losses)  # the scanner read nearly every line itself
    index = (scanned.usual["line"] - 1).to_list()
    expected = pl.DataFrame({"samples": samples, "step_ms": times, "loss": losses})[index].select(
        pl.all().cast(pl.Float64, strict=False))
    got = scanned.usual.select("samples", "step_ms", "loss")
    assert got.equals(expected)


# Bytes a mutation puts into a real log: the ones the scanner decides on, and ones it must not trip over.
_MUTANT_BYTES = st.sampled_from([b"\n", b"\r", b"\r\n", b"|", b"| lm loss: ", b"[", b"]", b".", b"..", b" ", b"\t",
                                 b"e", b"E", b"-", b"+", b"0", b"9" * 20, b"\x00", b"\x80", b"\xff", b"\xc2\xa0",
                                 b"k", b"(", b"w", b"iteration ", b" consumed tokens: 7 |", b"nan", b"inf"])


@needs_scanner
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 40), _MUTANT_BYTES), min_size=1, max_size=25),
       cut=st.one_of(st.none(), st.floats(0.05, 1)))
def test_a_mutated_real_log_reads_the_same_with_the_scanner(edits, cut) -> None:
    """The real Megatron-DeepSpeed log's iteration lines with bytes replaced, inserted or removed anywhere (and
    the file cut anywhere): both paths read it to the same outcome, a receipt or one error; the scanner reads
    whatever bytes it is given without reading past them (scripts/asan_scan.sh runs this under AddressSanitizer)."""
    data = bytearray(MEGATRON_LOGS[0].read_bytes()[226_000:240_000])  # the arguments' end and ~40 iteration lines
    for where, span, put in edits:
        at = int(where * len(data))
        data[at:at + span % 3] = put  # replace 0, 1 or 2 bytes: an insertion, a change, a removal with others
    if cut is not None:
        data = data[:max(1, int(cut * len(data)))]
    assume(bytes(data).strip())
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "mutated.log"
        log.write_bytes(bytes(data))
        _assert_same_both_ways(log, blocks=(300, 1 << 20))
