"""A log's bytes: opened plain or through its decompressor (gzip, xz, bzip2, told by magic bytes, not names),
read in blocks of whole lines, hashed as the text it holds, and refused when binary. What the lines mean is
ingest/textlog.py's."""

from __future__ import annotations

import bz2
import hashlib
import io
import lzma
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from receipts.errors import InputError

SNIFF_BYTES = 8192
# A long log is often kept compressed; these are read as the text they hold, streamed (magic bytes, not names).
# Each is read through a fresh decompressor per stream (a log compressed in pieces and appended holds several).
_COMPRESSED: dict[bytes, tuple[str, Callable[[], Any]]] = {
    b"\x1f\x8b": ("gzip", lambda: zlib.decompressobj(wbits=31)),  # 31: the gzip header and trailer, checked
    b"\xfd7zXZ\x00": ("xz", lzma.LZMADecompressor)}
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
COMPRESSED_SUFFIXES = (".gz", ".xz", ".bz2", ".zst")  # how such a log is usually named (a run's name leaves it out)
# What each decompressor raises on damage inside its stream (bz2's is an OSError).
_DECOMPRESS_ERRORS = (zlib.error, lzma.LZMAError, OSError, EOFError)


_Block = tuple[bytes, bool, "int | None"]  # whole lines, whether more follow, bytes of the file read (compressed)


def raw_blocks(f, block_bytes: int) -> Iterator[_Block]:
    data = f.read(block_bytes)
    while data:
        more = bool(f.peek(1))
        if more:
            cut = data.rfind(b"\n") + 1
            if cut == 0:  # no newline yet: one line longer than a block, read on
                data += f.read(block_bytes)
                continue
            # the cut line is read again with the next block: carrying it over instead (carry + next block,
            # then the cut) copied every block twice, 3x the CPU time of the read itself
            f.seek(cut - len(data), io.SEEK_CUR)
            data = data[:cut]
        yield data, more, None
        data = f.read(block_bytes)


def decompressed_blocks(path: Path, f, how: str, block_bytes: int) -> Iterator[_Block]:
    """As _raw_blocks, over a decompressing stream (which cannot seek back cheaply: the cut line is carried)."""
    pending = read_bytes(path, f, how, block_bytes)
    while pending:
        following = read_bytes(path, f, how, block_bytes)
        if following:
            cut = pending.rfind(b"\n") + 1
            if cut == 0:  # no newline yet: one line longer than a block, read on
                pending += following
                continue
            data, pending = pending[:cut], pending[cut:] + following
        else:
            data, pending = pending, b""
        yield data, bool(pending), f.fileobj_position()


class _Decompressed:
    """The text of a compressed log as its decompressor gives it, and how far into the file (the compressed bytes)
    it has read: what a progress bar, sized by the file, follows.

    A stream that stops before its end marker is not an error: a training job writing `train.log.gz` when it was
    killed leaves one, and its text ends where its data does, as a plain log's does; `cut_short` says so, and the
    receipt's 'ended early' note with it. Streams one after another (a log compressed in pieces and appended) are
    read one after another, as gzip -d reads them; NUL padding between them is skipped, and bytes after a complete
    stream that begin no stream are ignored, as Python's bz2 and lzma readers ignore them. Damage inside a stream
    raises StreamDamaged."""

    _INPUT = 1 << 16  # compressed bytes per step: its text is a few hundred KiB

    def __init__(self, raw, new_decompressor: Callable[[], Any]) -> None:
        self._raw, self._new = raw, new_decompressor
        self._decompressor = new_decompressor()
        self._text = bytearray()
        self._done = False
        self.cut_short = False

    def read(self, size: int = -1) -> bytes:
        while not self._done and (size < 0 or len(self._text) < size):
            self._decompress_some()
        size = len(self._text) if size < 0 else min(size, len(self._text))
        out = bytes(self._text[:size])
        del self._text[:size]
        return out

    def fileobj_position(self) -> int:
        return self._raw.tell()

    def _decompress_some(self) -> None:
        if self._decompressor.eof:  # a stream ended: what follows is another one, or the end of the file
            data = self._decompressor.unused_data.lstrip(b"\0")  # NUL padding between streams (xz's, a tape's)
            while not data:
                more = self._raw.read(self._INPUT)
                if not more:
                    self._done = True
                    return
                data = more.lstrip(b"\0")
            self._decompressor = self._new()
            try:
                self._text += self._decompress(data)
            except StreamDamaged:
                self._done = True  # trailing bytes that begin no stream
            return
        data = self._raw.read(self._INPUT)
        if not data:  # the file ends inside a stream
            self._done = self.cut_short = True
            return
        self._text += self._decompress(data)

    def _decompress(self, data: bytes) -> bytes:
        try:
            return self._decompressor.decompress(data)
        except _DECOMPRESS_ERRORS as exc:
            raise StreamDamaged(str(exc)) from exc


class StreamDamaged(Exception):
    """A compressed log's stream is damaged where its data is (not merely cut short)."""


@contextmanager
def open_log(path: Path) -> Iterator[tuple]:
    """(a binary reader of the log's text, the compression it was read through or None)."""
    try:
        raw = open(path, "rb")
    except IsADirectoryError as exc:
        raise InputError(path, "is a directory; expected a training log file") from exc
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from exc
    with raw:
        magic = raw.peek(8)[:8]
        if magic.startswith(_ZSTD_MAGIC):
            raise InputError(path, "is zstd-compressed, which this build does not read; decompress it first "
                                   "(`zstd -d FILE`), or keep the log as gzip, xz or bzip2, which are read as is")
        how = _compression(magic)
        if how is None:
            yield raw, None
            return
        name, new_decompressor = how
        yield _Decompressed(raw, new_decompressor), name


def _compression(magic: bytes) -> tuple[str, Callable[[], Any]] | None:
    """(name, a new decompressor) of the compression these first bytes announce, or None (plain text)."""
    found = next((how for m, how in _COMPRESSED.items() if magic.startswith(m)), None)
    # bzip2: 'BZh', the block size digit, then a block's or the end's magic (a text line may open with 'BZh')
    if found is None and magic[:3] == b"BZh" and magic[3:4].isdigit() and magic[4:8] in (b"1AY&", b"\x17rE8"):
        found = ("bzip2", bz2.BZ2Decompressor)
    return found


def read_bytes(path: Path, f, how: str | None, size: int = -1) -> bytes:
    try:
        return f.read(size)
    except StreamDamaged as exc:
        raise InputError(path, f"the {how} stream is corrupt ({exc}); expected a {how}-compressed training log") from exc
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from exc


def decompressed_head(path: Path, size: int) -> bytes:
    """The first `size` bytes a file holds, through its decompressor when it is compressed (the caller has opened
    it once already): a stream cut short gives what it has, as a log read whole does; damage inside the stream
    raises StreamDamaged."""
    with open_log(Path(path)) as (f, _):
        return f.read(size)


def log_sha256(path: Path) -> str:
    """The sha256 of the log's text: a compressed log's is its content's, so the same log gzipped and plain is one
    receipt (the file's own digest would make it two runs of a lane, each with the other's steps)."""
    digest = hashlib.sha256()
    with open_log(Path(path)) as (f, how):
        while chunk := read_bytes(path, f, how, 1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def refuse_binary(path: Path, head: bytes) -> None:
    if b"\x00" in head:
        raise InputError(path, "looks binary (NUL bytes in the first 8 KiB); expected a text training log "
                               "(for an nsys report, export it: `nsys export --type sqlite`)")
