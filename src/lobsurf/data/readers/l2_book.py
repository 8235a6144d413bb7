"""A price-level (L2) book rebuilt from level updates, and the rows a crypto reader emits.

``L2Book``: per side a dict price -> size (atoms, ``decimals``) plus the sorted list of
its prices, so a level update is a dict write plus, for a new or vanished price, one bisect;
the top 10 levels are a slice. Updates carry absolute sizes (the venue's "quantity at this
price now", Binance and Tardis alike); size 0 removes the level.

``BookRows``: the 10-level rows and trades a reader emits, gathered as Python ints and
turned into store units at ``flush``. A trade belongs to the next row emitted after it (the
interval (previous row, row] of the store's trade table: ``lobsurf.data.trades``), as the
recording ordered them. Sizes are converted sizes divided exactly by the instrument's size unit
(``decimals.SizeUnit``, refined first when the chunk holds a finer size), each one checked
against the store's uint32, an offending size named by its file and line.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from dataclasses import dataclass

import numpy as np

from lobsurf.data.readers.decimals import SizeUnit, decimal_text, price_fixed, size_atoms
from lobsurf.data.schema import LEVELS, MAX_SIZE, UNDEF_PRICE, SnapshotChunk
from lobsurf.data.trades import TradeChunk
from lobsurf.errors import UserError

_EMPTY_PX = [UNDEF_PRICE] * LEVELS
_EMPTY_SZ = [0] * LEVELS
#: parsed price and size texts kept per book (each), a bound on the caches' memory
TEXT_CACHE = 1 << 16


class TextValues(dict):
    """Decimal text -> its parsed value, parsed on first sight (``parse`` raises ValueError
    on bad text; anything but a string is refused). At most ``TEXT_CACHE`` kept."""

    def __init__(self, parse):
        super().__init__()
        self.parse = parse

    def __missing__(self, text) -> int:
        if not isinstance(text, str):  # venues send decimal strings, never numbers
            raise ValueError(f"{text!r} is not a decimal string")
        value = self.parse(text)
        if len(self) >= TEXT_CACHE:
            self.clear()
        self[text] = value
        return value


def _negated_price(text: str) -> int:
    return -price_fixed(text)


class L2Book:
    """Both sides of one instrument's book (prices fixed point, sizes in atoms).

    Each side is a dict key -> size and the ascending list of its keys, the key being the
    price for bids and minus the price for asks: the best level of either side is the last
    key, so the inserts and removals near the top (most of them) move few list entries.
    The texts of prices and sizes repeat (the same levels change again and again), so their
    parsed values are cached, at most ``TEXT_CACHE`` of each (then the cache restarts).
    """

    __slots__ = ("bid_sizes", "ask_sizes", "bid_keys", "ask_keys", "_bid_key", "_ask_key",
                 "_sizes")

    def __init__(self) -> None:
        self.bid_sizes: dict[int, int] = {}  # price -> size
        self.ask_sizes: dict[int, int] = {}  # -price -> size
        self.bid_keys: list[int] = []  # ascending: the best bid is last
        self.ask_keys: list[int] = []  # ascending -price: the best ask is last
        self._bid_key = TextValues(price_fixed)
        self._ask_key = TextValues(_negated_price)
        self._sizes = TextValues(size_atoms)

    def clear(self) -> None:
        self.bid_sizes.clear(), self.ask_sizes.clear()
        self.bid_keys.clear(), self.ask_keys.clear()

    def __bool__(self) -> bool:
        return bool(self.bid_sizes or self.ask_sizes)

    def load(self, bids: list, asks: list) -> None:
        """Replace the book by a snapshot's levels ([[price text, size text], ...])."""
        self.clear()
        self.apply(True, bids)
        self.apply(False, asks)

    def apply(self, is_bid: bool, levels: list) -> None:
        """Apply [[price text, size text], ...] of one side (ValueError on bad text)."""
        if is_bid:
            book, keys, key_of = self.bid_sizes, self.bid_keys, self._bid_key
        else:
            book, keys, key_of = self.ask_sizes, self.ask_keys, self._ask_key
        size_of = self._sizes
        for price_text, size_text in levels:
            key = key_of[price_text]
            size = size_of[size_text]
            if size:
                if key not in book:
                    insort(keys, key)
                book[key] = size
            elif book.pop(key, None) is not None:
                del keys[bisect_left(keys, key)]

    def best(self) -> tuple[int | None, int, int | None, int]:
        """(best bid price, its size, best ask price, its size); None price: side empty."""
        bid = self.bid_keys[-1] if self.bid_keys else None
        ask = self.ask_keys[-1] if self.ask_keys else None
        return (bid, self.bid_sizes[bid] if bid is not None else 0,
                None if ask is None else -ask, self.ask_sizes[ask] if ask is not None else 0)

    def top(self, levels: int) -> tuple[list[int], list[int], list[int], list[int]]:
        """Best ``levels`` of each side, best first: bid prices, sizes, ask prices, sizes."""
        bid_keys = self.bid_keys[:-levels - 1:-1]
        ask_keys = self.ask_keys[:-levels - 1:-1]
        bid_book, ask_book = self.bid_sizes, self.ask_sizes
        return (bid_keys, [bid_book[k] for k in bid_keys],
                [-k for k in ask_keys], [ask_book[k] for k in ask_keys])

    def all_sizes(self) -> list[int]:
        return [*self.bid_sizes.values(), *self.ask_sizes.values()]


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
        self.px: list[int] = []  # per row: 10 bid prices, then 10 ask prices
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
        bid_px, bid_sz, ask_px, ask_sz = book.top(LEVELS)
        nb, na = len(bid_px), len(ask_px)
        px, sz = self.px, self.sz
        px += bid_px
        px += _EMPTY_PX[nb:]
        px += ask_px
        px += _EMPTY_PX[na:]
        sz += bid_sz
        sz += _EMPTY_SZ[nb:]
        sz += ask_sz
        sz += _EMPTY_SZ[na:]
        self.ts_recv.append(ts_recv)
        self.ts_event.append(ts_event)
        self.breaks.append(brk)
        self.row_file.append(file)
        self.row_line.append(line)

    def add_levels(self, bids: list[tuple[int, int]], asks: list[tuple[int, int]],
                   ts_recv: int, ts_event: int, where: tuple[str, int]) -> None:
        """A row given as (price, atoms) levels, best first (a venue's own snapshot)."""
        for levels in (bids, asks):
            self.px += [p for p, _ in levels[:LEVELS]] + _EMPTY_PX[len(levels):]
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
