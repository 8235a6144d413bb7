"""Slow, obviously-correct MBO replay: the reference ``MboBookBuilder`` is tested against.

Role: tests only. It keeps nothing but the resting orders (order_id -> side, price, size)
per (publisher, instrument) and, at every emitting record, recomputes the 10 levels of
each side from scratch by grouping all resting orders by price, and gives each live T
record to the next snapshot it emits. Same rules as ``mbo_book`` (see its module
docstring), written record by record with no caching.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from lobsurf.data.readers.mbo_book import F_MAYBE_BAD_BOOK, F_TOB, MboFeed, MboStats
from lobsurf.data.schema import F_LAST, F_SNAPSHOT, LEVELS, UNDEF_PRICE, SnapshotChunk
from lobsurf.data.trades import TradeChunk


def book_rows(orders: dict[int, tuple[str, int, int]]) -> dict[str, list[int]]:
    """The 10-level rows (store units) of the book made of ``orders``."""
    size_at: dict[tuple[str, int], int] = defaultdict(int)
    count_at: dict[tuple[str, int], int] = defaultdict(int)
    for side, price, size in orders.values():
        size_at[side, price] += size
        count_at[side, price] += 1
    rows: dict[str, list[int]] = {}
    for side, name in (("B", "bid"), ("A", "ask")):
        prices = sorted((p for s, p in size_at if s == side), reverse=(side == "B"))[:LEVELS]
        pad = LEVELS - len(prices)
        rows[f"{name}_px"] = prices + [UNDEF_PRICE] * pad
        rows[f"{name}_sz"] = [size_at[side, p] for p in prices] + [0] * pad
        rows[f"{name}_ct"] = [count_at[side, p] for p in prices] + [0] * pad
    return rows


class ReferenceMboBuilder:
    """Same API as ``MboBookBuilder.feed_indexed``; recomputes every book from its orders."""

    def __init__(self) -> None:
        self.orders: dict[tuple[int, int], dict[int, tuple[str, int, int]]] = defaultdict(dict)
        self.stats = MboStats()
        self.gap: set[tuple[int, int]] = set()  # books with an F_MAYBE_BAD_BOOK since emitting

    def apply(self, record: np.void) -> None:
        """Apply one record to the resting orders."""
        orders = self.orders[(int(record["publisher_id"]), int(record["instrument_id"]))]
        action = record["action"].decode("latin-1")  # any byte: odd ones are counted
        side = record["side"].decode("latin-1")
        oid, price, size = int(record["order_id"]), int(record["price"]), int(record["size"])
        if action in ("T", "F", "N"):
            return
        if action == "R":
            orders.clear()
            self.stats.clears += 1
            return
        if action not in ("A", "C", "M"):
            self.stats.unknown_action += 1
            return
        if side not in ("B", "A"):
            self.stats.bad_side += 1
            return
        if action == "C":
            if oid not in orders:
                self.stats.cancel_unknown += 1
                return
            old_side, old_price, old_size = orders[oid]
            if size > old_size:
                self.stats.cancel_oversize += 1
            if size >= old_size:
                del orders[oid]
            else:
                orders[oid] = (old_side, old_price, old_size - size)
            return
        if size == 0 and action == "A":
            self.stats.add_zero_size += 1
            return
        if size == 0:
            self.stats.modify_to_zero += 1
            orders.pop(oid, None)
            return
        if action == "M" and oid not in orders:
            self.stats.modify_unknown += 1
        if action == "A" and oid in orders:
            self.stats.add_duplicate += 1
        orders[oid] = (side, price, size)

    def feed_indexed(self, records: np.ndarray,
                     emit_at: np.ndarray | None = None) -> tuple[SnapshotChunk, np.ndarray]:
        """``feed_detailed`` without the publishers and breaks."""
        fed = self.feed_detailed(records, emit_at)
        return fed.chunk, fed.source

    def feed_detailed(self, records: np.ndarray, emit_at: np.ndarray | None = None) -> MboFeed:
        """Apply ``records``; emit where ``MboBookBuilder`` does.

        Args:
            records: [N] structured array of ``MBO_DTYPE``.
            emit_at: if given, only records at these positions emit (when they would emit
                at all): lets tests sample a long file at bounded cost.

        Returns:
            MboFeed: snapshots, their source positions, publishers and segment breaks.
        """
        wanted = None if emit_at is None else set(np.asarray(emit_at).tolist())
        source: list[int] = []
        breaks: list[bool] = []
        rows: dict[str, list[list[int]]] = defaultdict(list)
        trades: list[list[int]] = []  # [row, price, size, side, instrument, publisher]
        waiting: list[list[int]] = []  # trades before the next emitted snapshot
        for i, record in enumerate(records):
            self.apply(record)
            flags = int(record["flags"])
            if record["action"] == b"T" and not flags & F_SNAPSHOT:
                side = {b"B": 1, b"A": -1}.get(bytes(record["side"]), 0)
                waiting.append([int(record["price"]), int(record["size"]), side,
                                int(record["instrument_id"]), int(record["publisher_id"])])
            key = (int(record["publisher_id"]), int(record["instrument_id"]))
            if flags & F_MAYBE_BAD_BOOK:
                self.gap.add(key)
            if flags & F_SNAPSHOT or not flags & F_LAST:
                continue
            starts_segment = key in self.gap  # every emission ends the gap, sampled or not
            self.gap.discard(key)
            if wanted is not None and i not in wanted:
                continue
            breaks.append(starts_segment)
            for name, values in book_rows(self.orders[key]).items():
                rows[name].append(values)
            trades += [[len(source), *trade] for trade in waiting]
            waiting.clear()
            source.append(i)
        trades += [[len(source), *trade] for trade in waiting]
        self.stats.records += len(records)
        self.stats.snapshot_records += int(np.count_nonzero(records["flags"] & F_SNAPSHOT))
        self.stats.snapshots += len(source)
        self.stats.top_of_book_records += int(np.count_nonzero(records["flags"] & F_TOB))
        self.stats.maybe_bad_book += int(np.count_nonzero(records["flags"] & F_MAYBE_BAD_BOOK))
        idx = np.asarray(source, np.int64)
        emitted = records[idx]
        empty_book = np.zeros((0, LEVELS), np.int64)
        books = {name: (np.asarray(rows[name], np.int64) if source else empty_book)
                 for name in ("bid_px", "bid_sz", "bid_ct", "ask_px", "ask_sz", "ask_ct")}
        chunk = SnapshotChunk(
            ts_event_ns=emitted["ts_event"].astype(np.int64),
            ts_recv_ns=emitted["ts_recv"].astype(np.int64),
            instrument_id=emitted["instrument_id"].astype(np.int64),
            **books,
        )
        table = np.asarray(trades, np.int64).reshape(-1, 6)
        return MboFeed(chunk, idx, emitted["publisher_id"].astype(np.int64),
                       np.asarray(breaks, bool),
                       TradeChunk(table[:, 0], table[:, 1], table[:, 2], table[:, 3].astype(np.int8),
                                  table[:, 4], table[:, 5]))
