"""Trades in memory: what traded in the interval ending at each snapshot row.

A reader reports its source's trades as a ``TradeChunk`` beside the snapshots of the same
chunk (``lobsurf.data.store.ingest.SourceChunk``): each trade names the row whose interval
(previous row, row] holds it, its price (fixed point), size (store size units) and the
aggressor side. The ingest moves each trade onto the next row that survives validation
(``attach_to_kept``), and the store writer aggregates them per (row, price, side) into the
store's trade table (``schema.TRADE_COLUMNS``; rules in docs/data.md).

Aggressor side: ``SIDE_BUY`` (+1) a buyer lifted the ask, ``SIDE_SELL`` (-1) a seller hit
the bid, ``SIDE_UNKNOWN`` (0) the source does not say.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

SIDE_BUY, SIDE_SELL, SIDE_UNKNOWN = 1, -1, 0


@dataclass
class TradeChunk:
    """M trades, each in the interval that ends at row ``row`` of the chunk it travels with.

    Attributes:
        row: [M] int64 row index in the accompanying snapshot chunk, 0..N; N means "after the
            chunk's last row" (the trade belongs to the next chunk's first row).
        price: [M] int64 fixed-point price (1e-9 currency units).
        size: [M] int64 store size units (lots).
        side: [M] int8 aggressor side, +1 buyer, -1 seller, 0 unknown.
        instrument_id: [M] int64 instrument of each trade, or None (all the chunk's book).
        publisher: [M] int64 publisher of each trade (DBN), or None.
    """

    row: np.ndarray
    price: np.ndarray
    size: np.ndarray
    side: np.ndarray
    instrument_id: np.ndarray | None = None
    publisher: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.row.shape[0])

    @property
    def volume(self) -> int:
        return int(self.size.sum(dtype=np.int64))

    def take(self, rows: np.ndarray) -> TradeChunk:
        """Trades selected by a boolean mask or an index array."""
        return TradeChunk(**{f.name: None if getattr(self, f.name) is None
                             else getattr(self, f.name)[rows] for f in fields(self)})

    def with_rows(self, row: np.ndarray) -> TradeChunk:
        """The same trades placed on other rows."""
        return TradeChunk(np.asarray(row, np.int64), self.price, self.size, self.side,
                          self.instrument_id, self.publisher)

    @staticmethod
    def empty() -> TradeChunk:
        zero = np.zeros(0, np.int64)
        return TradeChunk(zero, zero, zero, np.zeros(0, np.int8))

    @staticmethod
    def concat(chunks: list[TradeChunk]) -> TradeChunk:
        """The trades of several chunks (book ids kept only where every non-empty chunk has
        them)."""
        chunks = [c for c in chunks if len(c)]
        if not chunks:
            return TradeChunk.empty()
        if len(chunks) == 1:
            return chunks[0]
        out = {}
        for f in fields(TradeChunk):
            parts = [getattr(c, f.name) for c in chunks]
            out[f.name] = None if any(p is None for p in parts) else np.concatenate(parts)
        return TradeChunk(**out)


def dbn_sides(side: np.ndarray) -> np.ndarray:
    """[M] DBN side bytes of trade records -> int8 aggressor sides.

    Databento: the side of a trade is the aggressor's, 'B' a buyer, 'A' a seller (an ask
    side order), 'N' none given; any other byte is treated as not given.
    """
    code = np.asarray(side).view(np.uint8)
    return np.where(code == ord("B"), SIDE_BUY,
                    np.where(code == ord("A"), SIDE_SELL, SIDE_UNKNOWN)).astype(np.int8)


def aggregate(trades: TradeChunk) -> TradeChunk:
    """Sum sizes per (row, side, price); the result is sorted by row, then side, then price.

    Book ids are dropped (the caller has already selected one book).
    """
    if len(trades) == 0:
        return TradeChunk.empty()
    order = np.lexsort((trades.price, trades.side, trades.row))
    row, side, price = trades.row[order], trades.side[order], trades.price[order]
    size = np.asarray(trades.size, np.int64)[order]
    new = np.ones(len(row), bool)
    new[1:] = (row[1:] != row[:-1]) | (side[1:] != side[:-1]) | (price[1:] != price[:-1])
    starts = np.flatnonzero(new)
    return TradeChunk(row[starts], price[starts], np.add.reduceat(size, starts),
                      side[starts].astype(np.int8))


def attach_to_kept(trades: TradeChunk, kept: np.ndarray) -> tuple[TradeChunk, TradeChunk]:
    """Place trades on the rows that are written.

    A trade in the interval ending at a skipped row happened before the next written row,
    so it belongs to that row's interval.

    Args:
        trades: ``row`` in the source chunk's rows (0..N).
        kept: [K] increasing positions of the rows that are written.

    Returns:
        (trades with ``row`` an index into ``kept``, trades after the last kept row: they
        belong to a later chunk's rows).
    """
    target = np.searchsorted(kept, trades.row, side="left")
    here = target < len(kept)
    return trades.take(here).with_rows(target[here]), trades.take(~here)


def merge_waiting(trades: TradeChunk) -> TradeChunk:
    """Trades that all wait for the same next row, merged per (side, price, book): their
    volume exactly, in as many entries as distinct keys (bounds the memory of a long run of
    skipped rows). ``row`` becomes 0."""
    if len(trades) == 0:
        return trades
    keys = [trades.side, trades.price]
    keys += [ids for ids in (trades.instrument_id, trades.publisher) if ids is not None]
    order = np.lexsort(keys[::-1])
    change = np.zeros(len(order), bool)
    change[0] = True
    for key in keys:
        ordered = key[order]
        change[1:] |= ordered[1:] != ordered[:-1]
    starts = np.flatnonzero(change)
    merged = trades.take(order[starts]).with_rows(np.zeros(len(starts), np.int64))
    merged.size = np.add.reduceat(np.asarray(trades.size, np.int64)[order], starts)
    return merged
