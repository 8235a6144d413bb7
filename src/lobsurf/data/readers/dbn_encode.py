"""Streaming writer of genuine DBN version-3 MBP-10 files (``.dbn`` or ``.dbn.zst``).

A DBN file is the metadata header (encoded by ``databento_dbn.Metadata.encode``, so the
official library owns that format) followed by fixed-size records. MBP-10 records are
368 bytes each with the layout ``lobsurf.data.schema.MBP10_DTYPE``; we fill a numpy
structured array per chunk and write its raw bytes, so memory is bounded by one chunk
(plus the zstd window) whatever the file size.

Each snapshot is one record carrying the 10-level book *after* its event, plus the event
itself (``action``/``side``/``price``/``size``/``depth``), flagged ``F_LAST``.
``EventFields`` describes the events of a chunk; when a caller has none (e.g. re-encoding
snapshots), the writer marks every record as a level update ('A') at the best bid, which
keeps the file valid.

Trades (a ``TradeChunk`` beside the snapshots) are written as Databento writes them in its
MBP schemas: a record of action ``T`` per trade, side = the aggressor ('B' buyer, 'A'
seller, 'N' not given), the levels of the book *before* the trade (the previous snapshot;
the snapshot itself for a file's first row), no ``F_LAST``, just before the record of the
snapshot whose interval holds it (same timestamps: one event packet). ``lobsurf ingest``
reads them back as trades, not as snapshots.

Reference: Databento DBN encoding spec, https://databento.com/docs/standards-and-conventions/
databento-binary-encoding (record header, MBP-10 layout, metadata v3).
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from lobsurf.data.schema import F_LAST, MBP10_DTYPE, RTYPE_MBP10, SnapshotChunk
from lobsurf.data.trades import SIDE_BUY, SIDE_SELL, TradeChunk

#: Record length field of the DBN header: record size in 4-byte words.
MBP10_LENGTH_WORDS = MBP10_DTYPE.itemsize // 4
#: zstd level of written ``.zst`` files (Databento ships level 3 too).
ZSTD_LEVEL = 3
#: DBN version this module writes.
DBN_VERSION = 3


@dataclass
class EventFields:
    """The event that produced each snapshot of a chunk (one entry per row).

    Attributes:
        action: [N] bytes 'A' add, 'C' cancel, 'M' modify, 'T' trade, 'F' fill, 'R' clear.
        side: [N] bytes 'B' bid, 'A' ask, 'N' none (for trades: the aggressor's side).
        price: [N] int64 fixed-point price of the event.
        size: [N] int64 lots of the event.
        depth: [N] int64 book level (0 = top) the event touched.
        ts_in_delta: [N] int64 ns between the venue's send time and ts_recv.
    """

    action: np.ndarray
    side: np.ndarray
    price: np.ndarray
    size: np.ndarray
    depth: np.ndarray
    ts_in_delta: np.ndarray


@dataclass(frozen=True)
class DbnHeader:
    """What goes into the DBN metadata of one file.

    Attributes:
        dataset: Databento-style dataset code (at most 16 characters).
        symbol: raw symbol of the single instrument in the file.
        instrument_id: numeric id used in every record and in the symbol mapping.
        publisher_id: DBN publisher id written in every record header.
        start_ns: inclusive start of the data, UNIX ns.
        end_ns: exclusive end of the data, UNIX ns (None = unknown).
    """

    dataset: str
    symbol: str
    instrument_id: int
    publisher_id: int
    start_ns: int
    end_ns: int | None


def encode_metadata(header: DbnHeader) -> bytes:
    """The DBN v3 metadata bytes for an MBP-10 file of one instrument."""
    import databento_dbn as dbn

    start_date = _utc_date(header.start_ns)
    end_date = _utc_date(header.end_ns if header.end_ns is not None else header.start_ns)
    if end_date <= start_date:
        end_date = start_date + dt.timedelta(days=1)
    # Metadata.mappings takes any objects with these attributes (the package types them as
    # protocols, which cannot be instantiated).
    interval = SimpleNamespace(start_date=start_date, end_date=end_date,
                               symbol=str(header.instrument_id))
    mapping = SimpleNamespace(raw_symbol=header.symbol, intervals=[interval])
    metadata = dbn.Metadata(
        dataset=header.dataset,
        start=int(header.start_ns),
        end=None if header.end_ns is None else int(header.end_ns),
        stype_in=dbn.SType.RAW_SYMBOL,
        stype_out=dbn.SType.INSTRUMENT_ID,
        schema=dbn.Schema.MBP_10,
        symbols=[header.symbol],
        mappings=[mapping],
        version=DBN_VERSION,
    )
    return bytes(metadata.encode())


def _utc_date(ts_ns: int) -> dt.date:
    return dt.datetime.fromtimestamp(ts_ns / 1e9, tz=dt.UTC).date()


def mbp10_records(chunk: SnapshotChunk, events: EventFields | None, *, publisher_id: int,
                  first_sequence: int) -> np.ndarray:
    """MBP-10 records (structured array of ``MBP10_DTYPE``) for one chunk of snapshots.

    Args:
        chunk: N snapshots in store units.
        events: the event behind each snapshot, or None (then each is an 'A' at the best bid).
        publisher_id: record header publisher id.
        first_sequence: venue sequence number of the first record; increments by one.
    Returns:
        [N] structured array ready to be written as raw bytes.
    """
    n = len(chunk)
    rec = np.zeros(n, MBP10_DTYPE)
    rec["length"] = MBP10_LENGTH_WORDS
    rec["rtype"] = RTYPE_MBP10
    rec["publisher_id"] = publisher_id
    rec["instrument_id"] = chunk.instrument_id
    rec["ts_event"] = chunk.ts_event_ns
    rec["ts_recv"] = chunk.ts_recv_ns
    rec["flags"] = F_LAST  # every snapshot is its own event packet
    rec["sequence"] = (first_sequence + np.arange(n, dtype=np.int64)) & 0xFFFF_FFFF
    if events is None:
        rec["action"] = b"A"
        rec["side"] = b"B"
        rec["price"] = chunk.bid_px[:, 0]
        rec["size"] = chunk.bid_sz[:, 0]
    else:
        rec["action"] = events.action
        rec["side"] = events.side
        rec["price"] = events.price
        rec["size"] = events.size
        rec["depth"] = events.depth
        rec["ts_in_delta"] = events.ts_in_delta
    levels = rec["levels"]
    levels["bid_px"] = chunk.bid_px
    levels["ask_px"] = chunk.ask_px
    levels["bid_sz"] = chunk.bid_sz
    levels["ask_sz"] = chunk.ask_sz
    levels["bid_ct"] = chunk.bid_ct
    levels["ask_ct"] = chunk.ask_ct
    return rec


def with_trade_records(book: np.ndarray, trades: TradeChunk, before_first: np.ndarray
                       ) -> np.ndarray:
    """Insert a ``T`` record per trade before the book record of its row (module docstring).

    Args:
        book: [N] MBP-10 book records of a chunk (``mbp10_records``).
        trades: trades with ``row`` indexing the N book records.
        before_first: one MBP-10 record whose levels are the book before the chunk's first row.

    Returns:
        [N + M] records; ``sequence`` is left to the caller.
    """
    if len(trades) == 0:
        return book
    order = np.argsort(trades.row, kind="stable")
    rows = trades.row[order]
    per_row = np.bincount(rows, minlength=len(book))
    # Whole records move as raw bytes (a fancy index of the nested structured dtype is
    # several times slower).
    raw = book.view(np.dtype((np.void, book.dtype.itemsize)))
    out = np.empty(len(book) + len(trades), raw.dtype)
    out[np.arange(len(book)) + np.cumsum(per_row)] = raw  # after its row's trades
    records = raw[np.maximum(rows - 1, 0)].view(book.dtype)  # the book before: previous row
    records[rows == 0] = before_first
    for name in ("ts_event", "ts_recv", "ts_in_delta"):  # the event's own times
        records[name] = book[name][rows]
    records["action"] = b"T"
    side = trades.side[order]
    records["side"] = np.where(side == SIDE_BUY, b"B", np.where(side == SIDE_SELL, b"A", b"N"))
    records["price"] = trades.price[order]
    records["size"] = trades.size[order]
    records["depth"] = 0
    records["flags"] = 0  # the packet ends with the snapshot's record
    out[rows + np.arange(len(trades))] = records.view(raw.dtype)
    return out.view(book.dtype)


ChunkOrPair = (SnapshotChunk | tuple[SnapshotChunk, EventFields]
               | tuple[SnapshotChunk, EventFields, TradeChunk])


def write_mbp10_dbn(path: str | os.PathLike, chunks: Iterable[ChunkOrPair], *, dataset: str,
                    symbol: str, instrument_id: int, start_ns: int, end_ns: int | None,
                    publisher_id: int = 0) -> int:
    """Stream snapshot chunks into a genuine DBN v3 MBP-10 file; zstd if the name ends in .zst.

    Args:
        path: output file; written under a temporary name and renamed at the end, so an
            interrupted write never leaves a truncated file under the final name.
        chunks: SnapshotChunk, or (SnapshotChunk, EventFields) pairs, or (SnapshotChunk,
            EventFields, TradeChunk) triples (``row`` indexes the chunk's snapshots), in
            time order.
        dataset, symbol, instrument_id, start_ns, end_ns, publisher_id: see ``DbnHeader``.
    Returns:
        Number of records written (snapshots plus trades).
    """
    import zstandard

    path = Path(path)
    header = DbnHeader(dataset, symbol, int(instrument_id), int(publisher_id), int(start_ns), end_ns)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    written = 0
    try:
        with open(tmp, "wb") as raw:
            if path.name.endswith(".zst"):
                # Content checksum (as Databento's own files carry): without it a corrupted
                # file can decode to wrong sizes and prices that pass validation.
                zstd = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True)
                sink = zstd.stream_writer(raw, closefd=False)
            else:
                sink = raw
            sink.write(encode_metadata(header))
            last = None  # the previous chunk's last book record
            for item in chunks:
                chunk, events, trades = (tuple(item) + (None,))[:3] if isinstance(item, tuple) \
                    else (item, None, None)
                _check_chunk(chunk, path, written)
                rec = mbp10_records(chunk, events, publisher_id=publisher_id,
                                    first_sequence=written + 1)
                if trades is not None and len(chunk):
                    first = rec[0] if last is None else last
                    last = rec[-1].copy()
                    rec = with_trade_records(rec, trades, first)
                    rec["sequence"] = (written + 1 + np.arange(len(rec), dtype=np.int64)) & 0xFFFF_FFFF
                sink.write(rec.view(np.uint8))  # the raw bytes, without a copy
                written += len(rec)
            if sink is not raw:
                sink.close()  # writes the zstd frame epilogue
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return written


def _check_chunk(chunk: SnapshotChunk, path: Path, written: int) -> None:
    # Values that do not fit the record's unsigned fields would be silently wrapped by numpy.
    for name in ("bid_sz", "ask_sz", "bid_ct", "ask_ct"):
        col = getattr(chunk, name)
        if col.size and (col.min() < 0 or col.max() > 0xFFFF_FFFF):
            raise ValueError(f"{path}: {name} outside uint32 near record {written}")
    if len(chunk) and (chunk.ts_recv_ns.min() < 0 or chunk.ts_event_ns.min() < 0):
        raise ValueError(f"{path}: negative timestamp near record {written}")
