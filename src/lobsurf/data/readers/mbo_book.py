"""Replay Databento MBO (market-by-order) records into 10-level book snapshots.

Role: the DBN MBO input path of ``lobsurf ingest``. The reader hands over chunks of MBO
records (numpy structured arrays of ``schema.MBO_DTYPE``); ``MboBookBuilder.feed`` applies
them to one order book per (publisher, instrument) and returns the snapshots they produce
as a ``SnapshotChunk`` in store units. Book state carries across calls, so a file streams
through in bounded chunks.

Semantics (Databento's MBO schema and its "order tracking" / "limit order book" examples,
https://databento.com/docs/schemas/mbo and /docs/examples/order-book/):

* ``A`` add: a new resting order (``order_id``, side, price, size).
* ``C`` cancel: take ``size`` off a resting order; the order leaves the book at size 0.
  A cancel larger than the order removes it and is counted (``cancel_oversize``).
* ``M`` modify: the order's new price and/or size. A price change or a size increase loses
  queue priority; a 10-level snapshot carries no queue positions, so only the level
  aggregates change. A modify of an unknown order is treated as an add, as in Databento's
  example (counted: ``modify_unknown``). Databento defines M only as "change an order's
  price and/or size" (order-tracking example); a modify to size 0 leaves nothing resting,
  so it removes the order like a full cancel (counted: ``modify_to_zero``; of an unknown
  order it changes nothing). Without this a level of size 0 and count 1 would be emitted.
* An add of size 0 would rest an order with nothing to trade: skipped (``add_zero_size``).
* ``R`` clear: remove every resting order of that instrument's book.
* ``T`` trade, ``F`` fill, ``N`` none: no book change (fills come with their own cancels).

Trades (``MboFeed.trades``): one per live ``T`` record, with its price, size and side (the
aggressor's: Databento's side of a trade; ``N`` not given), in the interval of the next
snapshot emitted (the end of its event packet). ``F`` records are not counted: they report
the resting orders' side of the same trades, and on CME Globex an aggressor that was itself
a resting order (a modify that crosses) gets ``F`` records too, so summing fills counts such
volume twice (docs/data.md has the measurement on the ES session). ``T`` records inside the
initial ``F_SNAPSHOT`` replay are history, not trades of the session: skipped.
* Cancels of unknown orders are skipped and counted (``cancel_unknown``); an add that
  reuses a live order id replaces the old order (counted: ``add_duplicate``).

``F_MAYBE_BAD_BOOK`` (Databento sets it after an unrecoverable gap in the channel): the
book may no longer match the venue's, so it is not one series with the book before. Such
records are counted (``maybe_bad_book``) and the next snapshot of that book is marked as a
segment break (``MboFeed.breaks``); the ingest starts a new store segment there.

When snapshots are emitted: after every record that ends an event packet (``F_LAST`` set)
and is *not* flagged ``F_SNAPSHOT``. Records flagged ``F_SNAPSHOT`` are the initial book
replay (a clear followed by adds): they build the book but emit nothing, so the first
snapshot is the book after the replay plus the first live packet. The snapshot is the book
of the record's instrument; ``ts_recv_ns`` and ``ts_event_ns`` are the record's. Empty levels
carry ``UNDEF_PRICE``, size 0, count 0. Crossed or one-sided books are emitted as they are:
the ingest validator counts and skips them.

Not handled: top-of-book feeds (``F_TOB`` adds that replace a whole side, e.g. IEX); such
records are applied as plain orders and counted (``top_of_book_records``) so the caller can
refuse the file. Records from several publishers for one instrument build separate books
whose snapshots share the instrument id (``MboFeed.publisher`` tells them apart; the ingest
keeps one publisher per file).

Data structures (why it is fast in plain Python): per side a dict key -> [size, count] and
a sorted list of keys maintained with ``bisect``. Keys are ``-price`` for bids and ``price``
for asks, so both lists start at the best level and the top 10 is ``keys[:10]``. Each side
caches its 10-level rows and rebuilds them only when a change touched its top 10 levels.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import asdict, dataclass

import numpy as np

from lobsurf.data.schema import F_LAST, F_SNAPSHOT, LEVELS, MBO_DTYPE, UNDEF_PRICE, SnapshotChunk
from lobsurf.data.trades import TradeChunk, dbn_sides

#: DBN action and side characters as the byte values the loop compares against.
ACTION_ADD, ACTION_CANCEL, ACTION_MODIFY, ACTION_CLEAR = (ord(c) for c in "ACMR")
ACTION_TRADE = ord("T")
NO_BOOK_CHANGE_ACTIONS = frozenset(ord(c) for c in "TFN")
SIDE_BID, SIDE_ASK = ord("B"), ord("A")
#: DBN flag: top-of-book record (whole-side replacement); see module docstring.
F_TOB = 1 << 6
#: DBN flag: an unrecoverable gap was detected in the channel; the book may be wrong.
F_MAYBE_BAD_BOOK = 1 << 2

_EMPTY_PX = [UNDEF_PRICE] * LEVELS
_ZEROS = [0] * LEVELS


@dataclass
class MboStats:
    """Counts of what the replay met (records, emitted snapshots, anomalies)."""

    records: int = 0
    snapshots: int = 0
    snapshot_records: int = 0  # records flagged F_SNAPSHOT (initial replay)
    clears: int = 0
    cancel_unknown: int = 0  # cancel of an order id not in the book: skipped
    cancel_oversize: int = 0  # cancel larger than the order: order removed
    modify_unknown: int = 0  # modify of an unknown order id: applied as an add
    modify_to_zero: int = 0  # modify to size 0: the order removed
    add_zero_size: int = 0  # add of size 0: skipped
    add_duplicate: int = 0  # add of a live order id: old order replaced
    bad_side: int = 0  # add/cancel/modify with side not B/A: skipped
    unknown_action: int = 0  # action outside A C M R T F N: skipped
    top_of_book_records: int = 0  # F_TOB records (unsupported feed type)
    maybe_bad_book: int = 0  # F_MAYBE_BAD_BOOK records: the next snapshot starts a segment

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class _Side:
    """One side of one book: levels keyed by signed price, best level first."""

    __slots__ = ("sign", "keys", "levels", "dirty", "row_id", "row_owner")

    def __init__(self, sign: int):
        self.sign = sign  # -1 for bids (key = -price), +1 for asks (key = price)
        self.keys: list[int] = []
        self.levels: dict[int, list[int]] = {}  # key -> [size, order count]
        self.dirty = True
        # Index of this side's current row in row_owner.unique (valid while not dirty).
        self.row_id = -1
        self.row_owner: _Rows | None = None

    def _touches_top(self, key: int) -> bool:
        keys = self.keys
        return len(keys) <= LEVELS or key <= keys[LEVELS - 1]

    def add_order(self, price: int, size: int) -> None:
        key = self.sign * price
        level = self.levels.get(key)
        if level is None:
            insort(self.keys, key)
            self.levels[key] = [size, 1]
        else:
            level[0] += size
            level[1] += 1
        if not self.dirty and self._touches_top(key):
            self.dirty = True

    def change_size(self, price: int, delta: int) -> None:
        key = self.sign * price
        self.levels[key][0] += delta
        if not self.dirty and self._touches_top(key):
            self.dirty = True

    def remove_order(self, price: int, size: int) -> None:
        key = self.sign * price
        level = self.levels[key]
        if not self.dirty and self._touches_top(key):
            self.dirty = True
        if level[1] == 1:
            del self.levels[key]
            del self.keys[bisect_left(self.keys, key)]
        else:
            level[0] -= size
            level[1] -= 1

    def clear(self) -> None:
        self.keys.clear()
        self.levels.clear()
        self.dirty = True

    def row_id_in(self, out: _Rows) -> int:
        # Index in out.unique of the [30] row (10 prices, 10 sizes, 10 counts) of the top
        # levels; a new row is built only after a change to the top 10 (or a new chunk).
        if self.dirty or self.row_owner is not out:
            top = self.keys[:LEVELS]
            pad = LEVELS - len(top)
            levels = [self.levels[k] for k in top]
            out.unique.append([self.sign * k for k in top] + _EMPTY_PX[:pad]
                              + [lv[0] for lv in levels] + _ZEROS[:pad]
                              + [lv[1] for lv in levels] + _ZEROS[:pad])
            self.row_id, self.row_owner, self.dirty = len(out.unique) - 1, out, False
        return self.row_id


class _Book:
    """Resting orders and both sides of one (publisher, instrument) book."""

    __slots__ = ("orders", "bids", "asks", "gap")

    def __init__(self) -> None:
        self.orders: dict[int, tuple[_Side, int, int]] = {}  # order_id -> (side, price, size)
        self.bids = _Side(-1)
        self.asks = _Side(1)
        self.gap = False  # an F_MAYBE_BAD_BOOK record since this book's last snapshot

    def clear(self) -> None:
        self.orders.clear()
        self.bids.clear()
        self.asks.clear()


@dataclass
class MboFeed:
    """What one ``feed_detailed`` call emitted: M snapshots and, per snapshot, where it came
    from and whether it starts a new series."""

    chunk: SnapshotChunk
    source: np.ndarray  # [M] int64 positions in the records of the emitting records
    publisher: np.ndarray  # [M] int64 publisher id of each snapshot's book
    breaks: np.ndarray  # [M] bool: an F_MAYBE_BAD_BOOK record of its book came before it
    #: the live T records; row = the first snapshot emitted at or after each (M: none yet)
    trades: TradeChunk


class MboBookBuilder:
    """Streams MBO records into per-instrument books and emits 10-level snapshots.

    Usage::

        builder = MboBookBuilder()
        for records in reader:            # structured arrays of MBO_DTYPE, any chunk size
            chunk = builder.feed(records) # snapshots ended by F_LAST in this chunk
        builder.stats                     # MboStats counts

    Memory: the resting orders and price levels of the live books (independent of file
    length) plus the snapshots emitted for the current chunk (at most one per record).
    """

    def __init__(self) -> None:
        self._books: dict[int, _Book] = {}  # publisher_id << 32 | instrument_id -> book
        self.stats = MboStats()

    def feed(self, records: np.ndarray) -> SnapshotChunk:
        """Apply a chunk of MBO records; return the snapshots it emits (see module docs).

        Args:
            records: [N] structured array of ``MBO_DTYPE``.

        Returns:
            SnapshotChunk with one row per emitted snapshot, in record order.
        """
        return self.feed_indexed(records)[0]

    def feed_indexed(self, records: np.ndarray) -> tuple[SnapshotChunk, np.ndarray]:
        """Like ``feed``, plus [M] int64 positions in ``records`` of the emitting records."""
        fed = self.feed_detailed(records)
        return fed.chunk, fed.source

    def feed_detailed(self, records: np.ndarray) -> MboFeed:
        """Like ``feed``, plus each snapshot's source record, publisher and segment break."""
        if not _has_mbo_fields(records.dtype):
            raise ValueError(f"expected records of MBO_DTYPE, got {records.dtype}")
        out = _Rows()
        self._replay(records, out)
        source = np.asarray(out.source, np.int64)
        return MboFeed(out.to_chunk(records), source,
                       records["publisher_id"][source].astype(np.int64),
                       np.asarray(out.breaks, bool), mbo_trades(records, source))

    def _book(self, book_id: int) -> _Book:
        book = self._books.get(book_id)
        if book is None:
            book = self._books[book_id] = _Book()
        return book

    def _replay(self, records: np.ndarray, out: _Rows) -> None:
        # Columns as Python lists: one C-level conversion, then cheap iteration in the loop.
        # A book is looked up by one int, publisher << 32 | instrument.
        book_ids = ((records["publisher_id"].astype(np.int64) << 32)
                    | records["instrument_id"].astype(np.int64)).tolist()
        columns = zip(range(len(records)), book_ids,
                      records["action"].view(np.uint8).tolist(),
                      records["side"].view(np.uint8).tolist(), records["flags"].tolist(),
                      records["order_id"].tolist(), records["price"].tolist(),
                      records["size"].tolist())
        stats = self.stats
        current_id, book = None, None
        for i, book_id, action, side, flag, order_id, price, size in columns:
            if book_id != current_id:
                current_id, book = book_id, self._book(book_id)
            if action in NO_BOOK_CHANGE_ACTIONS:
                pass
            elif action == ACTION_CLEAR:
                book.clear()
                stats.clears += 1
            elif action == ACTION_ADD or action == ACTION_CANCEL or action == ACTION_MODIFY:
                if side == SIDE_BID:
                    _apply_order(book, stats, action, book.bids, order_id, price, size)
                elif side == SIDE_ASK:
                    _apply_order(book, stats, action, book.asks, order_id, price, size)
                else:
                    stats.bad_side += 1
            else:
                stats.unknown_action += 1
            if flag & F_TOB:
                stats.top_of_book_records += 1
            if flag & F_MAYBE_BAD_BOOK:
                stats.maybe_bad_book += 1
                book.gap = True
            if flag & F_SNAPSHOT:
                stats.snapshot_records += 1
            elif flag & F_LAST:
                out.source.append(i)
                out.breaks.append(book.gap)
                book.gap = False
                out.bid_ids.append(book.bids.row_id_in(out))
                out.ask_ids.append(book.asks.row_id_in(out))
        stats.records += len(records)
        stats.snapshots += len(out.source)


def mbo_trades(records: np.ndarray, source: np.ndarray) -> TradeChunk:
    """The live T records of a chunk, each on the first snapshot emitted at or after it.

    Args:
        records: [N] MBO records.
        source: [M] increasing positions of the records that emitted snapshots.
    """
    live = (records["flags"] & F_SNAPSHOT) == 0
    at = np.flatnonzero((records["action"].view(np.uint8) == ACTION_TRADE) & live)
    return TradeChunk(
        row=np.searchsorted(source, at, side="left").astype(np.int64),
        price=records["price"][at].astype(np.int64),
        size=records["size"][at].astype(np.int64),
        side=dbn_sides(records["side"][at]),
        instrument_id=records["instrument_id"][at].astype(np.int64),
        publisher=records["publisher_id"][at].astype(np.int64),
    )


def _has_mbo_fields(dtype: np.dtype) -> bool:
    # MBO_DTYPE itself, or it plus trailing fields (live files append ``ts_out``).
    fields = dtype.fields or {}
    return all(name in fields and fields[name] == MBO_DTYPE.fields[name]
               for name in MBO_DTYPE.names)


def _apply_order(book: _Book, stats: MboStats, action: int, side: _Side,
                 order_id: int, price: int, size: int) -> None:
    orders = book.orders
    old = orders.get(order_id)
    if action == ACTION_CANCEL:
        if old is None:
            stats.cancel_unknown += 1
            return
        old_side, old_price, old_size = old
        if size >= old_size:
            stats.cancel_oversize += size > old_size
            old_side.remove_order(old_price, old_size)
            del orders[order_id]
        else:
            old_side.change_size(old_price, -size)
            orders[order_id] = (old_side, old_price, old_size - size)
        return
    if size == 0:
        # Nothing would rest: a modify to 0 removes the order, an add of 0 is skipped.
        if action == ACTION_ADD:
            stats.add_zero_size += 1
            return
        stats.modify_to_zero += 1
        if old is not None:
            old_side, old_price, old_size = old
            old_side.remove_order(old_price, old_size)
            del orders[order_id]
        return
    if old is None:
        stats.modify_unknown += action == ACTION_MODIFY
    else:
        old_side, old_price, old_size = old
        stats.add_duplicate += action == ACTION_ADD
        if old_side is side and old_price == price:
            # Same level: only the size moves (a size increase loses priority, which the
            # level aggregates do not show).
            side.change_size(price, size - old_size)
            orders[order_id] = (side, price, size)
            return
        old_side.remove_order(old_price, old_size)
    side.add_order(price, size)
    orders[order_id] = (side, price, size)


class _Rows:
    """Emitted snapshots of one chunk: per snapshot the source record and one row id per
    side into ``unique`` (rows shared by consecutive snapshots are stored once)."""

    def __init__(self) -> None:
        self.source: list[int] = []
        self.breaks: list[bool] = []
        self.bid_ids: list[int] = []
        self.ask_ids: list[int] = []
        self.unique: list[list[int]] = []

    def to_chunk(self, records: np.ndarray) -> SnapshotChunk:
        emitted = records[np.asarray(self.source, np.int64)]
        table = np.asarray(self.unique, np.int64).reshape(len(self.unique), 3, LEVELS)
        bids = table[np.asarray(self.bid_ids, np.int64)]  # [N, (px, sz, ct), 10]
        asks = table[np.asarray(self.ask_ids, np.int64)]
        return SnapshotChunk(
            ts_event_ns=emitted["ts_event"].astype(np.int64),
            ts_recv_ns=emitted["ts_recv"].astype(np.int64),
            instrument_id=emitted["instrument_id"].astype(np.int64),
            bid_px=bids[:, 0], bid_sz=bids[:, 1], bid_ct=bids[:, 2],
            ask_px=asks[:, 0], ask_sz=asks[:, 1], ask_ct=asks[:, 2],
        )
