"""Numbered lines of a text recording, gzip or plain, with the bytes read for progress.

Crypto recordings are large line files, usually gzip (``.gz``, magic 1f 8b). The file is
read and decompressed in blocks by a background thread, and the blocks are split into lines
here. zlib releases the GIL while it inflates, so the decompression overlaps the parsing on
a second core, provided the thread rarely needs the GIL: a gzip file is inflated by one
``zlib.decompressobj`` fed 256 KB reads (a few GIL hand-overs a megabyte; ``GzipFile`` takes
the GIL for every 8 KB it reads, and each time waits up to the interpreter's 5 ms switch
interval for the parser to let go, which starved the parser of blocks). At most
``QUEUED_BLOCKS`` blocks wait.

That fast path covers the usual file, one gzip member read to its end, and a stream cut off
inside it: it delivers what ``GzipFile`` delivers (the same inflate, fed all the data) and
then ``GzipFile``'s ``EOFError``. Anything else (corrupt data, a second member, bytes after
the member) hands over to ``GzipFile``, which reads the file again from the start, skips the
bytes already delivered and goes on: the lines and the errors are exactly ``GzipFile``'s. A
recording killed while writing leaves a gzip stream without its end: the lines before the
cut are read and ``truncated`` is set (ingest counts it), never an exception. Corrupt
compressed data is a one-line ``UserError`` naming the file and the last good line.
"""

from __future__ import annotations

import gzip
import os
import queue
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

from lobsurf.errors import UserError

GZIP_MAGIC = b"\x1f\x8b"
#: decompressed bytes per block at most, and blocks the reading thread may run ahead
BLOCK_BYTES = 1 << 20
QUEUED_BLOCKS = 16
#: compressed bytes read at a time by the zlib fast path
READ_BYTES = 1 << 18
#: GzipFile's error for a stream that ends inside its member
_CUT_OFF = "Compressed file ended before the end-of-stream marker was reached"


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


class NumberedLines:
    """Iterate ``(line number, bytes without the newline)`` over one file."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.size = self.path.stat().st_size
        self.truncated = False
        self._position = 0
        self._done = False

    def position(self) -> int:
        """Bytes of the file (compressed, if gzip) read so far."""
        return self.size if self._done else self._position

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        blocks: queue.Queue = queue.Queue(QUEUED_BLOCKS)
        stop = threading.Event()
        thread = threading.Thread(target=self._read, args=(blocks, stop), daemon=True,
                                  name="lines-reader")
        thread.start()
        line_no, tail = 0, b""
        try:
            while True:
                item = blocks.get()
                if isinstance(item, BaseException):
                    self._raise(item, line_no)
                    break  # truncated: keep what came before the cut
                if item is None:
                    break
                block, self._position = item
                lines = (tail + block).split(b"\n")
                tail = lines.pop()
                for line in lines:
                    line_no += 1
                    yield line_no, line[:-1] if line[-1:] == b"\r" else line
            if tail and not self.truncated:
                yield line_no + 1, tail[:-1] if tail[-1:] == b"\r" else tail
        finally:
            stop.set()
            while thread.is_alive():  # unblock a reader waiting on a full queue
                try:
                    blocks.get_nowait()
                except queue.Empty:
                    thread.join(0.01)
            self._done = True

    def _read(self, blocks: queue.Queue, stop: threading.Event) -> None:
        try:
            with open(self.path, "rb") as raw:
                if not is_gzip(self.path):
                    self._copy(raw, raw, blocks, stop)
                else:
                    delivered = self._inflate(raw, blocks, stop)
                    if delivered is not None:  # not the usual file: GzipFile goes on
                        raw.seek(0)
                        source = gzip.GzipFile(fileobj=raw)
                        _skip(source, delivered)
                        self._copy(source, raw, blocks, stop)
            blocks.put(None)
        except BaseException as exc:  # handed to the consumer, which names the line
            blocks.put(exc)

    def _inflate(self, raw, blocks: queue.Queue, stop: threading.Event) -> int | None:
        """Decompress a gzip file of one member with zlib directly (module doc). None: done
        (read to the member's end, or stopped); EOFError: the file ended inside the member.
        Else the number of bytes delivered before something unusual (a zlib error, bytes
        after the member), for ``GzipFile`` to go on from."""
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)  # 16: a gzip header and trailer
        delivered = 0
        while not stop.is_set():
            data = inflater.unconsumed_tail or raw.read(READ_BYTES)
            if not data:  # cut off: all that inflates was delivered, as GzipFile does
                raise EOFError(_CUT_OFF)
            try:
                block = inflater.decompress(data, BLOCK_BYTES)
            except zlib.error:
                return delivered
            if block:
                blocks.put((block, raw.tell()))
                delivered += len(block)
            if inflater.eof:  # the member's end: the file must end there too
                return None if not inflater.unused_data and not raw.read(1) else delivered
        return None

    def _copy(self, source, raw, blocks: queue.Queue, stop: threading.Event) -> None:
        """Blocks of ``source`` (the plain file, or ``GzipFile``) to the queue, until its end."""
        while not stop.is_set():
            # read1: at most one read of the file a call, so a stream cut off
            # mid-write loses no line decompressed before the cut
            block = source.read1(BLOCK_BYTES)
            if not block:
                break
            blocks.put((block, raw.tell()))

    def _raise(self, exc: BaseException, line_no: int) -> None:
        if isinstance(exc, EOFError):
            self.truncated = True  # a recording cut off mid-write
            return
        if isinstance(exc, (OSError, zlib.error)):
            raise UserError(f"{self.path}: corrupt compressed data after line {line_no} "
                            f"({exc})") from None
        raise exc


def _skip(source: gzip.GzipFile, count: int) -> None:
    """Read and drop the first ``count`` decompressed bytes of ``source``."""
    while count > 0:
        dropped = len(source.read1(min(count, BLOCK_BYTES)))
        if not dropped:
            return
        count -= dropped


def first_lines(path: str | os.PathLike, limit: int) -> Iterator[tuple[int, bytes]]:
    """Up to ``limit`` numbered lines from the start of the file (for format detection)."""
    lines = iter(NumberedLines(path))
    try:
        for number, line in lines:
            yield number, line
            if number >= limit:
                return
    finally:
        lines.close()
