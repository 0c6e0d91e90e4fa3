"""Compressed training logs (gzip, xz, bzip2) are read as the text they hold, streamed through the decompressor:
the same lines, the same receipt (its id is the text's digest, so a log gzipped after its first ingest is
'unchanged'). A stream cut short (a job killed while writing train.log.gz) keeps the lines it holds, as a plain
log cut short does, and says it ended early; a damaged stream is one error naming the file. Streams one after
another read as one text. zstd is refused with its remedy."""

from __future__ import annotations

import bz2
import gzip
import lzma
import zlib
from pathlib import Path

import polars as pl
import pytest

from cli_helpers import cli, cli_json
from conftest import realdata
from receipts.errors import InputError
from receipts.ingest.logbytes import log_sha256
from receipts.ingest.textlog import read_chunks, read_log
from receipts.pipeline import parse_log

COMPRESS = {"gz": gzip.compress, "xz": lzma.compress, "bz2": bz2.compress}
LOGS = ("sft_run_gtx1660.log", "megatron-deepspeed__gpt3-0.125B-tokendropping-graduallyIncrease-lr-3.0e-4-baseline.log",
        "track_1_short_2024-10-09_SOAP__5bdc3988-496c-4232-b4ef-53764cb81c92.txt",
        "torchtitan_pr1287_dcp_zoc_steps200-250.txt", "v4.0__Dell_results_XE9680x8H100-SXM-80GB_bert_result_0.txt")


def _packed(tmp_path: Path, plain: Path, suffix: str) -> Path:
    path = tmp_path / f"{plain.name}.{suffix}"
    path.write_bytes(COMPRESS[suffix](plain.read_bytes()))
    return path


@pytest.mark.parametrize("suffix", sorted(COMPRESS))
@pytest.mark.parametrize("name", LOGS)
def test_a_compressed_log_is_its_text(tmp_path, name, suffix):
    plain = realdata("logs", name)
    packed = _packed(tmp_path, plain, suffix)
    assert log_sha256(packed) == log_sha256(plain)
    assert read_log(packed).lines.equals(read_log(plain).lines)
    # Streamed in blocks small enough that lines cross them (the decompressed reader carries the cut line).
    small = list(read_chunks(packed, block_bytes=4096))
    reference = list(read_chunks(plain, block_bytes=4096))
    assert len(small) >= min(3, len(reference)) and [c.last for c in small].count(True) == 1 and small[-1].last
    assert pl.concat([c.frame for c in small]).equals(pl.concat([c.frame for c in reference]))
    a, b = parse_log(packed), parse_log(plain)
    assert a.steps.equals(b.steps) and a.source_format == b.source_format and a.ended_early == b.ended_early


def test_a_line_longer_than_a_block_and_no_final_newline(tmp_path):
    text = b"first\n" + b"x" * 10_000 + b"\nlast without newline"
    plain = tmp_path / "long.log"
    plain.write_bytes(text)
    packed = _packed(tmp_path, plain, "gz")
    chunks = list(read_chunks(packed, block_bytes=1024))
    assert [line for c in chunks for line in c.frame["text"]] == ["first", "x" * 10_000, "last without newline"]
    assert chunks[-1].last and chunks[-1].unterminated_last and not any(c.last for c in chunks[:-1])


def test_progress_follows_the_compressed_bytes(tmp_path):
    packed = _packed(tmp_path, realdata("logs", "megatron-deepspeed__gpt3-0.125B-tokendropping-graduallyIncrease-"
                                                "lr-3.0e-4-baseline.log"), "gz")
    seen: list[tuple[int, int]] = []
    for _ in read_chunks(packed, lambda done, lines: seen.append((done, lines)), block_bytes=16_384):
        pass
    assert len(seen) > 2 and [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert seen[-1][0] == packed.stat().st_size  # the bar, sized by the file, ends full


def test_gzipping_a_stored_log_is_the_same_receipt_named_without_the_suffix(tmp_path, db):
    plain = tmp_path / "train.log"
    plain.write_bytes(realdata("logs", "sft_run_gtx1660.log").read_bytes())
    packed = _packed(tmp_path, plain, "gz")
    first = cli(db, "ingest", str(packed))
    assert first.exit_code == 0 and "(train)" in first.stdout, first.stdout  # train.log.gz is the run `train`
    again = cli(db, "ingest", str(plain))
    assert again.exit_code == 0 and again.stdout.startswith("unchanged: "), again.stdout
    code, listed = cli_json(db, "list")
    assert code == 0 and [r["run_name"] for r in listed] == ["train"]


MEGATRON = "megatron-deepspeed__gpt3-0.125B-tokendropping-graduallyIncrease-lr-3.0e-4-baseline.log"
PARTIAL = {"gz": lambda data: zlib.decompressobj(wbits=31).decompress(data), "xz": lzma.LZMADecompressor().decompress}


@pytest.mark.parametrize("suffix", sorted(PARTIAL))
def test_a_stream_cut_short_keeps_the_lines_it_holds(tmp_path, db, suffix):
    """Cut at 85% of its compressed bytes (inside its iteration lines), the log reads as the text a decompressor gets from those bytes, written
    plain: the same steps, and an 'ended early' note saying the stream stopped (even where the cut falls at the
    end of a line, since the run may have gone on)."""
    packed = bytearray(COMPRESS[suffix](realdata("logs", MEGATRON).read_bytes()))
    del packed[len(packed) * 85 // 100:]
    path = tmp_path / f"train.log.{suffix}"
    path.write_bytes(bytes(packed))
    text = PARTIAL[suffix](bytes(packed))
    plain = tmp_path / "plain.log"
    plain.write_bytes(text)
    cut, reference = parse_log(path), parse_log(plain)
    assert 0 < cut.steps.height < parse_log(realdata("logs", MEGATRON)).steps.height
    assert cut.steps.equals(reference.steps)
    assert "the compressed stream stops before its end marker" in cut.ended_early
    whole_lines = text.count(b"\n") if text.endswith(b"\n") else text.count(b"\n") + 1
    assert read_log(path).n_lines == whole_lines and read_log(path).stream_cut
    result = cli(db, "ingest", str(path))
    assert result.exit_code == 0 and "Traceback" not in result.stderr + result.stdout, result.stderr
    assert [r["run_name"] for r in cli_json(db, "list")[1]] == ["train"]


def test_a_short_log_cut_short_is_sniffed_and_read_as_the_lines_it_holds(tmp_path, db):
    """The kind of a gzipped file is told from its first 4 KiB of text: a short log cut short has fewer, and
    is still a log (it was refused there for the end marker it lacks)."""
    text = realdata("logs", "torchtitan_pr1287_dcp_zoc_steps200-250.txt").read_bytes()
    packed = gzip.compress(text)
    path = tmp_path / "short.log.gz"
    path.write_bytes(packed[: len(packed) * 8 // 10])
    assert len(PARTIAL["gz"](path.read_bytes())) < 4096
    result = cli(db, "ingest", str(path))
    assert result.exit_code == 0 and "the compressed stream stops before its end marker" in result.stderr, result.stderr
    assert [r["run_name"] for r in cli_json(db, "list")[1]] == ["short"]


def _cut_before_any_text(tmp_path: Path) -> tuple[Path, str]:
    # bzip2 decodes a block (up to 900 kB of text) at a time: cut inside the first, nothing is left to read.
    packed = bz2.compress(realdata("logs", MEGATRON).read_bytes())
    path = tmp_path / "run.log.bz2"
    path.write_bytes(packed[: len(packed) // 2])
    return path, "the bzip2 stream is cut short before any text"


def _flipped_byte(tmp_path: Path) -> tuple[Path, str]:
    packed = bytearray(gzip.compress(realdata("logs", "sft_run_gtx1660.log").read_bytes()))
    packed[len(packed) // 2] ^= 0xFF
    path = tmp_path / "run.log.gz"
    path.write_bytes(bytes(packed))
    return path, "the gzip stream is corrupt"


@pytest.mark.parametrize("damage", [_cut_before_any_text, _flipped_byte], ids=["cut before any text", "flipped byte"])
def test_a_stream_without_text_to_keep_is_one_error_naming_the_file_and_nothing_is_stored(tmp_path, db, damage):
    path, message = damage(tmp_path)
    with pytest.raises(InputError) as info:
        parse_log(path)
    assert info.value.path == path and message in str(info.value)
    result = cli(db, "ingest", str(path))
    assert result.exit_code == 2 and "Traceback" not in result.stderr + result.stdout
    assert cli_json(db, "list")[1] == []


@pytest.mark.parametrize("suffix", sorted(COMPRESS))
def test_streams_one_after_another_read_as_one_text_and_trailing_bytes_are_left(tmp_path, suffix):
    text = realdata("logs", MEGATRON).read_bytes()
    half = text.index(b"\n", len(text) // 2) + 1
    path = tmp_path / f"appended.log.{suffix}"
    path.write_bytes(COMPRESS[suffix](text[:half]) + COMPRESS[suffix](text[half:]) + b"\x00" * 512)
    plain = tmp_path / "plain.log"
    plain.write_bytes(text)
    assert read_log(path).lines.equals(read_log(plain).lines) and not read_log(path).stream_cut
    assert log_sha256(path) == log_sha256(plain)


def test_zstd_is_refused_with_its_remedy(tmp_path):
    path = tmp_path / "run.log.zst"
    path.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 64)
    with pytest.raises(InputError, match=r"is zstd-compressed.*zstd -d FILE"):
        parse_log(path)
