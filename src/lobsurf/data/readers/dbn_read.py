"""Streaming reader for Databento DBN files (versions 1-3, plain or zstd-compressed).

The metadata header is decoded by the official ``databento_dbn`` package
(``Metadata.decode``). Records are fixed-size structs; they are read in bounded chunks
and viewed as numpy structured arrays (``schema.MBP10_DTYPE`` / ``schema.MBO_DTYPE``),
which is the same byte layout the official decoder reads (a test checks field by field
that both agree on every sample file). Viewing bytes instead of building one Python object
per record is what lets ingest run faster than the official per-record decode.

Every failure names the file and the record number: not a DBN file, unsupported schema,
a record of the wrong type, a corrupt zstd stream, a truncated last record.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import databento_dbn
import numpy as np
import zstandard

from lobsurf.data.schema import MBO_DTYPE, MBP10_DTYPE, RTYPE_MBO, RTYPE_MBP10
from lobsurf.errors import UserError

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
DBN_MAGIC = b"DBN"
#: schema name (as DBN metadata spells it) → (record dtype, rtype)
SUPPORTED_SCHEMAS = {"mbp-10": (MBP10_DTYPE, RTYPE_MBP10), "mbo": (MBO_DTYPE, RTYPE_MBO)}


@dataclass
class DbnHeader:
    version: int
    schema: str
    dataset: str
    symbols: list[str]
    start_ns: int
    ts_out: bool
    record_dtype: np.dtype
    rtype: int


class _CountingReader(io.RawIOBase):
    # Wraps the compressed file so progress can be shown in compressed bytes consumed.
    def __init__(self, raw):
        self.raw = raw
        self.consumed = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self.raw.readinto(buffer)
        self.consumed += n or 0
        return n


class DbnReader:
    """Open a DBN file and iterate its records in chunks.

    Example:
        with DbnReader(path) as reader:
            for records in reader.chunks(65536):   # numpy structured arrays
                ...
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            raise UserError(f"{self.path}: no such file")
        self._file = open(self.path, "rb")
        self._counter = _CountingReader(self._file)
        magic = self._file.read(4)
        self._file.seek(0)
        if magic == ZSTD_MAGIC:
            self._stream = zstandard.ZstdDecompressor().stream_reader(self._counter, read_across_frames=True)
        else:
            self._stream = self._counter
        self.records_read = 0
        self.header = self._read_header()

    @property
    def compressed_bytes_read(self) -> int:
        return self._counter.consumed

    @property
    def file_size(self) -> int:
        return self.path.stat().st_size

    def __enter__(self) -> DbnReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._file.close()

    def _read_exact(self, n: int) -> bytes:
        parts, got = [], 0
        while got < n:
            try:
                block = self._stream.read(n - got)
            except zstandard.ZstdError as exc:
                raise UserError(
                    f"{self.path}: corrupt zstd stream near record {self.records_read}: {exc}"
                ) from None
            if not block:
                break
            parts.append(block)
            got += len(block)
        return b"".join(parts)

    def _read_header(self) -> DbnHeader:
        prefix = self._read_exact(8)
        if len(prefix) < 8 or prefix[:3] != DBN_MAGIC:
            raise UserError(f"{self.path}: not a DBN file (no 'DBN' signature)")
        version = prefix[3]
        if version not in (1, 2, 3):
            raise UserError(f"{self.path}: DBN version {version} is not supported (1-3 are)")
        length = int.from_bytes(prefix[4:8], "little")
        body = self._read_exact(length)
        if len(body) < length:
            raise UserError(f"{self.path}: truncated DBN metadata header")
        try:
            meta = databento_dbn.Metadata.decode(prefix + body)
        except Exception as exc:  # the decoder raises its own error types
            raise UserError(f"{self.path}: unreadable DBN metadata: {exc}") from None
        schema = str(meta.schema) if meta.schema is not None else "mixed"
        if schema not in SUPPORTED_SCHEMAS:
            raise UserError(
                f"{self.path}: schema {schema!r} is not supported (ingest reads mbp-10 and mbo)"
            )
        dtype, rtype = SUPPORTED_SCHEMAS[schema]
        if meta.ts_out:
            # Live-gateway files append an 8-byte send timestamp to every record.
            dtype = np.dtype(dtype.descr + [("ts_out", "<u8")])
        return DbnHeader(
            version=version,
            schema=schema,
            dataset=str(meta.dataset),
            symbols=list(meta.symbols),
            start_ns=int(meta.start),
            ts_out=bool(meta.ts_out),
            record_dtype=dtype,
            rtype=rtype,
        )

    def chunks(self, chunk_records: int) -> Iterator[np.ndarray]:
        """Yield structured arrays of at most ``chunk_records`` records."""
        size = self.header.record_dtype.itemsize
        while True:
            data = self._read_exact(chunk_records * size)
            if not data:
                return
            whole, rest = divmod(len(data), size)
            # The whole records first: a wrong record length shows there, before the tail.
            records = np.frombuffer(data, dtype=self.header.record_dtype, count=whole)
            self._check_records(records)
            if rest:
                raise UserError(
                    f"{self.path}: truncated file: record {self.records_read + whole} has "
                    f"{rest} of {size} bytes"
                )
            self.records_read += whole
            yield records

    def _check_records(self, records: np.ndarray) -> None:
        expected_words = self.header.record_dtype.itemsize // 4
        # With ts_out the header's length counts the appended timestamp too.
        bad = (records["rtype"] != self.header.rtype) | (records["length"] != expected_words)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            with_ts_out = " with ts_out" if self.header.ts_out else ""
            raise UserError(
                f"{self.path}: record {self.records_read + i}: rtype 0x{records['rtype'][i]:02x} "
                f"length {int(records['length'][i]) * 4} B does not belong in a "
                f"{self.header.schema} file (expected {expected_words * 4} B{with_ts_out}: "
                "corrupt file, mixed schemas, or a ts_out header flag the records do not follow)"
            )
