"""Canonical market-data schema: field names, dtypes and units, written once.

Everything that crosses a module boundary in the data layer is one of these:

* ``MBP10_DTYPE`` / ``MBO_DTYPE``: the byte layout of Databento's DBN MBP-10 and MBO
  records (identical in DBN versions 1, 2 and 3). Used to view decoded bytes as numpy
  structured arrays without a Python object per record, and to write genuine DBN files.
* ``SnapshotChunk``: a batch of 10-level book snapshots in store units (below). Every
  input format (DBN MBP-10, DBN MBO replayed into a book, LOBSTER) produces these, and
  the store writer consumes them.
* ``TRADE_COLUMNS``: the store's trade table, what traded in the interval ending at each
  snapshot row (``lobsurf.data.trades`` holds the in-memory ``TradeChunk``).

Units (store units):
    prices   int64 fixed point, 1 unit = 1e-9 of the instrument's currency
             (Databento's ``FIXED_PRICE_SCALE``). Exact: never floats.
    sizes    lots (contracts or shares) at the level; uint32 on disk, as in DBN.
    counts   orders at the level (0 where the source does not say); uint32 on disk.
    times    int64 UNIX nanoseconds, UTC.
In memory a ``SnapshotChunk`` may hold any integer dtype of the same values (readers keep
DBN's native uint32 sizes to avoid a copy); the store writer checks the range.
Empty book levels carry price ``UNDEF_PRICE`` (2**63 - 1) and size/count 0, as in DBN.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

#: Book depth of every snapshot.
LEVELS = 10
#: Fixed-point price units per currency unit.
FIXED_PRICE_SCALE = 1_000_000_000
#: Sentinel price of an empty level (DBN's UNDEF_PRICE).
UNDEF_PRICE = np.iinfo(np.int64).max
#: Largest level size (lots) the store holds: uint32 on disk, as in DBN.
MAX_SIZE = int(np.iinfo(np.uint32).max)
#: DBN record types (``RType``) of the schemas we read.
RTYPE_MBP10 = 0x0A
RTYPE_MBO = 0xA0
#: DBN flag: last record of an event packet for an instrument.
F_LAST = 1 << 7
#: DBN flag: record is part of a book snapshot (replay), not a live event.
F_SNAPSHOT = 1 << 5

_HEADER_FIELDS = [
    ("length", "u1"),  # record length in 4-byte words
    ("rtype", "u1"),
    ("publisher_id", "<u2"),
    ("instrument_id", "<u4"),
    ("ts_event", "<u8"),
]

#: DBN MBP-10 record, 368 bytes. Level fields are [10]-arrays, level 0 is the top of book.
MBP10_DTYPE = np.dtype(
    _HEADER_FIELDS
    + [
        ("price", "<i8"),
        ("size", "<u4"),
        ("action", "S1"),
        ("side", "S1"),
        ("flags", "u1"),
        ("depth", "u1"),
        ("ts_recv", "<u8"),
        ("ts_in_delta", "<i4"),
        ("sequence", "<u4"),
        (
            "levels",
            np.dtype(
                [
                    ("bid_px", "<i8"),
                    ("ask_px", "<i8"),
                    ("bid_sz", "<u4"),
                    ("ask_sz", "<u4"),
                    ("bid_ct", "<u4"),
                    ("ask_ct", "<u4"),
                ]
            ),
            (LEVELS,),
        ),
    ]
)
assert MBP10_DTYPE.itemsize == 368

#: DBN MBO record, 56 bytes.
MBO_DTYPE = np.dtype(
    _HEADER_FIELDS
    + [
        ("order_id", "<u8"),
        ("price", "<i8"),
        ("size", "<u4"),
        ("flags", "u1"),
        ("channel_id", "u1"),
        ("action", "S1"),
        ("side", "S1"),
        ("ts_recv", "<u8"),
        ("ts_in_delta", "<i4"),
        ("sequence", "<u4"),
    ]
)
assert MBO_DTYPE.itemsize == 56


@dataclass
class SnapshotChunk:
    """A batch of N book snapshots in store units (see module docstring).

    Attributes:
        ts_event_ns: [N] int64, exchange event time.
        ts_recv_ns: [N] int64, capture time; the store's time axis (what a trader sees).
        instrument_id: [N] int64, the venue's numeric instrument id.
        bid_px, ask_px: [N, 10] int64 fixed-point prices; UNDEF_PRICE where empty.
        bid_sz, ask_sz: [N, 10] int64 lots.
        bid_ct, ask_ct: [N, 10] int64 order counts.
    """

    ts_event_ns: np.ndarray
    ts_recv_ns: np.ndarray
    instrument_id: np.ndarray
    bid_px: np.ndarray
    ask_px: np.ndarray
    bid_sz: np.ndarray
    ask_sz: np.ndarray
    bid_ct: np.ndarray
    ask_ct: np.ndarray

    def __len__(self) -> int:
        return int(self.ts_recv_ns.shape[0])

    def take(self, rows: np.ndarray) -> SnapshotChunk:
        """Rows selected by a boolean mask or an index array."""
        return SnapshotChunk(**{f.name: getattr(self, f.name)[rows] for f in fields(self)})

    @staticmethod
    def concat(chunks: list[SnapshotChunk]) -> SnapshotChunk:
        if not chunks:
            return SnapshotChunk.empty()
        return SnapshotChunk(
            **{f.name: np.concatenate([getattr(c, f.name) for c in chunks]) for f in fields(SnapshotChunk)}
        )

    @staticmethod
    def empty() -> SnapshotChunk:
        flat = np.zeros(0, np.int64)
        book = np.zeros((0, LEVELS), np.int64)
        return SnapshotChunk(flat, flat, flat, book, book, book, book, book, book)

    @staticmethod
    def from_mbp10(records: np.ndarray, rows: np.ndarray | None = None) -> SnapshotChunk:
        """Columns of MBP-10 records (structured array of ``MBP10_DTYPE``), in store units.

        Sizes and counts keep DBN's uint32; timestamps (uint64 in DBN, always < 2**63) are
        reinterpreted as int64 without a conversion pass. ``rows``: a mask or index array of
        the records to take (each column is gathered once, without copying the records).
        """
        levels = records["levels"]

        def column(values: np.ndarray) -> np.ndarray:
            return np.ascontiguousarray(values if rows is None else values[rows])
        return SnapshotChunk(
            ts_event_ns=column(records["ts_event"]).view(np.int64),
            ts_recv_ns=column(records["ts_recv"]).view(np.int64),
            instrument_id=column(records["instrument_id"]),
            bid_px=column(levels["bid_px"]),
            ask_px=column(levels["ask_px"]),
            bid_sz=column(levels["bid_sz"]),
            ask_sz=column(levels["ask_sz"]),
            bid_ct=column(levels["bid_ct"]),
            ask_ct=column(levels["ask_ct"]),
        )


#: Column name → (dtype on disk, per-row shape) of the snapshot store.
#: 340 bytes a snapshot: disk bandwidth, not decoding, bounds ingest speed (bench_ingest.py).
STORE_COLUMNS: dict[str, tuple[str, tuple[int, ...]]] = {
    "ts_event_ns": ("<i8", ()),
    "ts_recv_ns": ("<i8", ()),
    "instrument_id": ("<u4", ()),
    "bid_px": ("<i8", (LEVELS,)),
    "ask_px": ("<i8", (LEVELS,)),
    "bid_sz": ("<u4", (LEVELS,)),
    "ask_sz": ("<u4", (LEVELS,)),
    "bid_ct": ("<u4", (LEVELS,)),
    "ask_ct": ("<u4", (LEVELS,)),
}


#: Column name → dtype on disk of the store's trade table: one entry per (row, price,
#: aggressor side) with the volume traded there in the interval (previous row, row], sorted
#: by row, then side, then price. ``trade_side``: +1 a buyer was the aggressor (lifted the
#: ask), -1 a seller (hit the bid), 0 the source does not say.
TRADE_COLUMNS: dict[str, str] = {
    "trade_row": "<i8",
    "trade_px": "<i8",
    "trade_sz": "<u4",
    "trade_side": "i1",
}
#: Device sentinels of ``BookTensors``' trade columns for a row where nothing traded: the
#: lowest seller price is "above everything" and the highest buyer price "below everything",
#: so comparisons against a resting order's price need no special case.
TRADE_NONE_SELL = 2**31 - 1
TRADE_NONE_BUY = -(2**31)
