"""A price-level (L2) book rebuilt from level updates, and the rows a crypto reader emits.

``L2Book``: per side a dict price -> size (atoms, ``decimals``) plus the sorted list of
its prices, so a level update is a dict write plus, for a price never seen, one bisect; the
top 10 levels are the first nonzero ones from the best end of the list. Updates carry
absolute sizes (the venue's "quantity at this price now", Binance and Tardis alike); size 0
empties the level, which stays as a zero entry (see ``L2Book``) until the top passes it or
the side is compacted.

``BookRows``: the 10-level rows and trades a reader emits, gathered as Python ints and
turned into store units at ``flush``. A trade belongs to the next row emitted after it (the
interval (previous row, row] of the store's trade table: ``lobsurf.data.trades``), as the
recording ordered them. Sizes are converted sizes divided exactly by the instrument's size unit
(``decimals.SizeUnit``, refined first when the chunk holds a finer size), each one checked
against the store's uint32, an offending size named by its file and line.
"""

from __future__ import annotations

import math
from bisect import insort
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice

import numpy as np

from lobsurf.data.readers.decimals import SizeUnit, decimal_text, price_fixed, size_atoms
from lobsurf.data.schema import LEVELS, MAX_SIZE, UNDEF_PRICE, SnapshotChunk
from lobsurf.data.trades import TradeChunk
from lobsurf.errors import UserError

#: padding of a row's missing levels: bid prices, ask keys (minus the price), sizes
_EMPTY_BID = [UNDEF_PRICE] * LEVELS
_EMPTY_ASK = [-UNDEF_PRICE] * LEVELS
_EMPTY_SZ = [0] * LEVELS
#: parsed price and size texts kept per book (each), a bound on the caches' memory
TEXT_CACHE = 1 << 16
#: a side is compacted (its emptied levels dropped) once it holds more entries than twice
#: its levels at the last compaction plus this many
COMPACT_SLACK = 4096
#: keys a top scans per level it returns, at most (beyond: the emptied ones are dropped)
SCAN_WINDOW = 4

Top = tuple[list[int], list[int], list[int], list[int]]


def cached(cache: dict, text, parse: Callable[[str], int]) -> int:
    """``parse(text)``, kept in ``cache`` (restarted when it holds ``TEXT_CACHE``); only
    strings are read (venues send decimal strings, never numbers): ValueError otherwise,
    as for bad text."""
    value = cache.get(text)
    if value is None:
        if not isinstance(text, str):
            raise ValueError(f"{text!r} is not a decimal string")
        value = parse(text)
        if len(cache) >= TEXT_CACHE:
            cache.clear()
        cache[text] = value
    return value


def _negated_price(text: str) -> int:
    return -price_fixed(text)


class _Side:
    """One side of a book: ``sizes`` key -> size (0: an emptied level, kept), ``keys`` its
    keys ascending (the best last), ``key_of`` the cache price text -> key (the price, or
    minus the price for asks), ``limit`` the entries beyond which it is compacted."""

    __slots__ = ("sizes", "keys", "key_of", "parse_key", "limit")

    def __init__(self, parse_key: Callable[[str], int]) -> None:
        self.sizes: dict[int, int] = {}
        self.keys: list[int] = []
        self.key_of: dict[str, int] = {}
        self.parse_key = parse_key
        self.limit = COMPACT_SLACK

    def clear(self) -> None:
        self.sizes.clear()
        self.keys.clear()
        self.limit = COMPACT_SLACK

    def compact(self) -> None:
        """Drop the emptied levels (memory, and the length of a scan of the top)."""
        sizes = self.sizes
        for key in [k for k, size in sizes.items() if not size]:
            del sizes[key]
        self.keys[:] = [k for k in self.keys if k in sizes]
        self.limit = 2 * len(sizes) + COMPACT_SLACK

    def top(self, levels: int) -> tuple[list[int], list[int]]:
        """The best ``levels`` keys whose size is not 0 and their sizes, best first.

        Emptied levels at the best end are dropped first (every later top would skip them
        again); the scan below them runs in C (``filter`` with the dict's ``get``) over the
        best ``SCAN_WINDOW * levels`` keys. A window with too few live levels (a sparse top
        whose levels empty and stay empty) has its emptied levels dropped, and the scan
        runs again: it stays short, and each emptied level is dropped once."""
        sizes, keys = self.sizes, self.keys
        while keys and not sizes[keys[-1]]:
            del sizes[keys.pop()]
        window = SCAN_WINDOW * levels
        while True:
            best = list(islice(filter(sizes.get, islice(reversed(keys), window)), levels))
            if len(best) == levels or len(keys) <= window:
                return best, [sizes[k] for k in best]
            self._drop_emptied(len(keys) - window)

    def _drop_emptied(self, start: int) -> None:
        """Drop the emptied levels among ``keys[start:]``."""
        sizes, keys = self.sizes, self.keys
        emptied = [k for k in keys[start:] if not sizes[k]]
        for key in emptied:
            del sizes[key]
        keys[start:] = [k for k in keys[start:] if k in sizes]


class L2Book:
    """Both sides of one instrument's book (prices fixed point, sizes in atoms).

    Each side (``_Side``) is a dict key -> size and the ascending list of its keys, the key
    being the price for bids and minus the price for asks: the best level of either side is
    the last key, so the inserts near the top (most of them) move few list entries.

    An emptied level (size 0) is not deleted: it stays in the dict and the list with size
    0, because levels near the top empty and refill again and again, and a refill of a kept
    key is then a plain dict write, not a list insert (and the emptying not a list delete).
    Readers of the book skip the zeros (``top``); zeros at the best end of the list are
    dropped when the top is read, and a side is compacted when its zeros pile up (more than
    twice its live levels at the last compaction, plus ``COMPACT_SLACK``).

    The texts of prices and sizes repeat (the same levels change again and again), so their
    parsed values are cached in plain dicts (a dict subclass with ``__missing__`` is slower
    to index), at most ``TEXT_CACHE`` of each (then the cache restarts).
    """

    __slots__ = ("bids", "asks", "_size_of")

    def __init__(self) -> None:
        self.bids = _Side(price_fixed)
        self.asks = _Side(_negated_price)
        self._size_of: dict[str, int] = {}

    def clear(self) -> None:
        self.bids.clear()
        self.asks.clear()

    def __bool__(self) -> bool:
        return any(self.bids.sizes.values()) or any(self.asks.sizes.values())

    def load(self, bids: list, asks: list) -> None:
        """Replace the book by a snapshot's levels ([[price text, size text], ...])."""
        self.clear()
        self.apply(True, bids)
        self.apply(False, asks)

    def apply(self, is_bid: bool, levels: list) -> None:
        """Apply [[price text, size text], ...] of one side (ValueError on bad text).

        The loop does the least per level: two cache lookups (a text not cached raises
        KeyError, and is parsed), then for a known price (live or emptied) one dict write;
        only a price not in the side with a size inserts into the sorted keys."""
        side = self.bids if is_bid else self.asks
        book, keys, key_of, size_of = side.sizes, side.keys, side.key_of, self._size_of
        for price_text, size_text in levels:
            try:
                key = key_of[price_text]
                size = size_of[size_text]
            except KeyError:  # a text not seen yet (or before the cache restarted)
                key = cached(key_of, price_text, side.parse_key)
                size = cached(size_of, size_text, size_atoms)
            if key in book:
                book[key] = size
            elif size:  # removing an absent level changes nothing
                insort(keys, key)
                book[key] = size
        if len(book) > side.limit:
            side.compact()

    def best(self) -> tuple[int | None, int, int | None, int]:
        """(best bid price, its size, best ask price, its size); None price: side empty."""
        return best_of(self.top_keys(1))

    def top(self, levels: int) -> Top:
        """Best ``levels`` of each side, best first: bid prices, sizes, ask prices, sizes."""
        bid_px, bid_sz, ask_keys, ask_sz = self.top_keys(levels)
        return bid_px, bid_sz, [-k for k in ask_keys], ask_sz

    def top_keys(self, levels: int) -> Top:
        """``top`` with the asks' keys (minus the prices): rows negate them in bulk."""
        return (*self.bids.top(levels), *self.asks.top(levels))

    def all_sizes(self) -> list[int]:
        """The sizes of the levels (not the emptied ones)."""
        return [s for s in (*self.bids.sizes.values(), *self.asks.sizes.values()) if s]


def best_of(top: Top) -> tuple[int | None, int, int | None, int]:
    """(best bid price, its size, best ask price, its size) of ``L2Book.top_keys``'s lists
    (the asks as keys: minus the prices); None price: the side is empty."""
    bid_px, bid_sz, ask_keys, ask_sz = top
    return (bid_px[0] if bid_px else None, bid_sz[0] if bid_sz else 0,
            -ask_keys[0] if ask_keys else None, ask_sz[0] if ask_sz else 0)


@dataclass
class CryptoChunk:
    """What a crypto reader yields: snapshot rows, their segment breaks, the trades of their
    intervals (None: the source does not say what traded), and the factor by which sizes
    stored earlier must be multiplied (the unit was refined)."""

    rows: SnapshotChunk
    breaks: np.ndarray
    trades: TradeChunk | None
    size_rescale: int = 1


class BookRows:
    """Rows and trades gathered between flushes (see module doc)."""

    def __init__(self, instrument_id: int, unit: SizeUnit, gives_trades: bool):
        self.instrument_id = instrument_id
        self.unit = unit
        self.gives_trades = gives_trades  # False: chunks carry trades None
        self.pending_rescale = 1  # unit refinements not yet passed on with a chunk
        self._reset()

    def _reset(self) -> None:
        self.ts_recv: list[int] = []
        self.ts_event: list[int] = []
        self.px: list[int] = []  # per row: 10 bid prices, then 10 ask keys (-price)
        self.sz: list[int] = []  # per row: 10 bid sizes, then 10 ask sizes (atoms)
        self.breaks: list[bool] = []
        self.row_file: list[str] = []  # file and line of each row
        self.row_line: list[int] = []
        self.trade_where: list[tuple[str, int]] = []  # and of each trade
        self.trades: list[tuple[int, int, int, int]] = []  # (row, price, atoms, side)

    def __len__(self) -> int:
        return len(self.ts_recv) + len(self.trades)

    def add(self, book: L2Book, ts_recv: int, ts_event: int, file: str, line: int,
            brk: bool) -> None:
        """The book's top 10 levels as one row."""
        self.add_top(book.top_keys(LEVELS), ts_recv, ts_event, file, line, brk)

    def add_top(self, top: Top, ts_recv: int, ts_event: int, file: str, line: int,
                brk: bool) -> None:
        """One row from ``L2Book.top_keys`` (the asks as keys, minus the prices: ``flush``
        negates them all at once)."""
        bid_px, bid_sz, ask_keys, ask_sz = top
        px, sz = self.px, self.sz
        px += bid_px
        sz += bid_sz
        if len(bid_px) < LEVELS:
            px += _EMPTY_BID[len(bid_px):]
            sz += _EMPTY_SZ[len(bid_px):]
        px += ask_keys
        sz += ask_sz
        if len(ask_keys) < LEVELS:
            px += _EMPTY_ASK[len(ask_keys):]
            sz += _EMPTY_SZ[len(ask_keys):]
        self.ts_recv.append(ts_recv)
        self.ts_event.append(ts_event)
        self.breaks.append(brk)
        self.row_file.append(file)
        self.row_line.append(line)

    def add_levels(self, bids: list[tuple[int, int]], asks: list[tuple[int, int]],
                   ts_recv: int, ts_event: int, where: tuple[str, int]) -> None:
        """A row given as (price, atoms) levels, best first (a venue's own snapshot)."""
        self.px += [p for p, _ in bids[:LEVELS]] + _EMPTY_BID[len(bids):]
        self.px += [-p for p, _ in asks[:LEVELS]] + _EMPTY_ASK[len(asks):]
        for levels in (bids, asks):
            self.sz += [s for _, s in levels[:LEVELS]] + _EMPTY_SZ[len(levels):]
        self.ts_recv.append(ts_recv)
        self.ts_event.append(ts_event)
        self.breaks.append(False)
        self.row_file.append(where[0])
        self.row_line.append(where[1])

    def add_trade(self, price: int, size: int, side: int, where: tuple[str, int]) -> None:
        """A trade before the next row (price fixed point, size atoms, aggressor side)."""
        self.trades.append((len(self.ts_recv), price, size, side))
        self.trade_where.append(where)

    def observe_sizes(self, sizes: list[int], where: tuple[str, int]) -> None:
        """Fold sizes that are not stored (a snapshot's deep levels) into the unit: the more
        sizes the unit's gcd sees, the closer it is to the venue's quantity step."""
        try:
            self.pending_rescale *= self.unit.observe(_gcd(sizes))
        except ValueError as exc:
            raise UserError(f"{where[0]}:{where[1]}: {exc}") from None

    def flush(self) -> CryptoChunk:
        """The gathered rows and trades in store units; the buffers start empty again."""
        n, m = len(self.ts_recv), len(self.trades)
        trade_cols = list(zip(*self.trades)) if m else [[]] * 4
        sizes = self.sz + list(trade_cols[2])
        rescale, units = self._in_units(sizes)
        px = np.fromiter(self.px, np.int64, len(self.px)).reshape(n, 2, LEVELS)
        np.negative(px[:, 1], out=px[:, 1])  # ask keys -> ask prices
        book_units = units[:n * 2 * LEVELS].reshape(n, 2, LEVELS)
        rows = SnapshotChunk(
            ts_event_ns=np.array(self.ts_event, np.int64),
            ts_recv_ns=np.array(self.ts_recv, np.int64),
            instrument_id=np.full(n, self.instrument_id, np.int64),
            bid_px=px[:, 0], ask_px=px[:, 1], bid_sz=book_units[:, 0], ask_sz=book_units[:, 1],
            bid_ct=np.zeros((n, LEVELS), np.int64), ask_ct=np.zeros((n, LEVELS), np.int64))
        trades = None
        if self.gives_trades:
            trades = TradeChunk(row=np.array(trade_cols[0], np.int64),
                                price=np.array(trade_cols[1], np.int64),
                                size=units[n * 2 * LEVELS:],
                                side=np.array(trade_cols[3], np.int8))
        chunk = CryptoChunk(rows, np.array(self.breaks, bool), trades,
                            rescale * self.pending_rescale)
        self.pending_rescale = 1
        self._reset()
        return chunk

    def _in_units(self, sizes: list[int]) -> tuple[int, np.ndarray]:
        # Atoms -> units: refine the unit by the gcd of these sizes, divide exactly, check
        # the uint32 range. Sizes beyond int64 atoms (9.2 million base units) go through
        # Python ints.
        try:
            atoms = np.fromiter(sizes, np.int64, len(sizes))
        except OverflowError:  # beyond 9.2 million base units: exact Python ints
            atoms = np.array(sizes, object)
        try:
            rescale = self.unit.observe(_gcd(atoms))
        except ValueError as exc:
            bad = int(np.flatnonzero(atoms % self.unit.atoms != 0)[0])
            raise UserError(f"{self._where(bad)}: {exc}") from None
        unit = self.unit.atoms or 1
        units = atoms // unit
        too_big = units > MAX_SIZE
        if too_big.any():
            bad = int(np.flatnonzero(too_big)[0])
            raise UserError(
                f"{self._where(bad)}: size {decimal_text(int(atoms[bad]))} is "
                f"{int(units[bad]):,} units of {decimal_text(unit)}, more than the store "
                f"holds ({MAX_SIZE:,}: uint32)")
        return rescale, units.astype(np.int64)

    def _where(self, flat: int) -> str:
        # flat index into the sizes list: 20 per row, then one per trade
        book_sizes = 2 * LEVELS * len(self.ts_recv)
        if flat < book_sizes:
            row = flat // (2 * LEVELS)
            return f"{self.row_file[row]}:{self.row_line[row]}"
        file, line = self.trade_where[flat - book_sizes]
        return f"{file}:{line}"


def _gcd(sizes) -> int:
    """gcd of non-negative ints (0 for none), through int64 when they fit."""
    if len(sizes) == 0:
        return 0
    try:
        return int(np.gcd.reduce(np.asarray(sizes, np.int64)))
    except OverflowError:
        return math.gcd(*(int(s) for s in sizes))
