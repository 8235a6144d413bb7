"""Small in-memory books for tests, benchmarks and examples (no store on disk needed).

``book_from_arrays`` wraps hand-written [N, 10] tick arrays (and, optionally, the four trade
columns) as ``BookTensors``; ``random_walk_book`` makes a seeded random-walk book with numpy
alone (the benchmark script uses it on machines without the DBN decoder), with random trades
at and through the touch when asked.
"""

from __future__ import annotations

import numpy as np
import torch

from lobsurf.data.dataset import TRADE_FIELDS, TRADE_NONE_BUY, TRADE_NONE_SELL, BookTensors
from lobsurf.data.schema import LEVELS

#: chance that a row of ``random_walk_book(trades=True)`` has a print of each aggressor side
TRADE_PROB = 0.4
#: ticks beyond the previous row's touch a random print lands (0: at it) and their weights
TRADE_DEPTHS, TRADE_DEPTH_WEIGHTS = (0, 1, 2), (0.7, 0.2, 0.1)


def book_from_arrays(bid_px: np.ndarray, ask_px: np.ndarray, bid_sz: np.ndarray,
                     ask_sz: np.ndarray, segment_lengths: list[int] | None = None,
                     tick_size: float = 0.25, multiplier: float = 50.0,
                     device: torch.device | str = "cpu",
                     trades: tuple[np.ndarray, ...] | None = None) -> BookTensors:
    """[N, 10] int arrays (prices in ticks above the origin, which is price 0) -> BookTensors.

    ``segment_lengths`` splits the N rows into consecutive segments (default: one).
    ``trades``: the four [N] trade columns in ``TRADE_FIELDS`` order (sell price, sell size,
    buy price, buy size; lobsurf.data.dataset), or None for a book without trades.
    """
    n = bid_px.shape[0]
    lengths = segment_lengths or [n]
    if sum(lengths) != n:
        raise ValueError("segment lengths must add up to the number of rows")
    stops = np.cumsum(lengths)
    starts = stops - np.asarray(lengths)

    def t(a: np.ndarray, dtype: torch.dtype = torch.int32) -> torch.Tensor:
        return torch.as_tensor(np.ascontiguousarray(a)).to(device=device, dtype=dtype)

    ones = np.ones((n, LEVELS), np.int32)
    return BookTensors(
        ts_ns=t(np.arange(n) * 1_000_000, torch.int64), bid_px_ticks=t(bid_px), ask_px_ticks=t(ask_px),
        bid_sz=t(bid_sz), ask_sz=t(ask_sz), bid_ct=t(ones), ask_ct=t(ones),
        segment_start=t(starts, torch.int64), segment_stop=t(stops, torch.int64),
        segment_of_row=t(np.repeat(np.arange(len(lengths)), lengths), torch.int64),
        tick_size=tick_size, multiplier=multiplier, price_origin_fixed=0,
        tick_size_fixed=int(round(tick_size * 1e9)),
        **({} if trades is None else {"has_trades": True, **{
            name: t(np.asarray(column)) for name, column in zip(TRADE_FIELDS, trades)}}),
    )


def random_walk_book(num_rows: int, num_segments: int = 2, seed: int = 0,
                     device: torch.device | str = "cpu", max_size_lots: int = 50,
                     start_tick: int = 100_000, trades: bool = False) -> BookTensors:
    """Seeded 10-level book whose best bid walks +-1 tick; spread 1-3 ticks; sizes 0..max-1.

    Some level sizes are 0 (empty levels), so fills past them and partial fills occur.
    ``trades``: also random prints (``random_trades``); the book itself is the same.
    """
    rng = np.random.default_rng(seed)
    best_bid = start_tick + np.cumsum(rng.integers(-1, 2, num_rows))
    spread = rng.choice([1, 1, 1, 2, 3], num_rows)
    levels = np.arange(LEVELS)
    bid_px = best_bid[:, None] - levels
    ask_px = best_bid[:, None] + spread[:, None] + levels
    sizes = rng.integers(0, max_size_lots, (2, num_rows, LEVELS))
    sizes[:, :, 0] = np.maximum(sizes[:, :, 0], 1)  # level 0 is always real
    base, rest = divmod(num_rows, num_segments)
    lengths = [base + (i < rest) for i in range(num_segments)]
    columns = random_trades(bid_px[:, 0], ask_px[:, 0], lengths, max_size_lots, seed) if (
        trades) else None
    return book_from_arrays(bid_px, ask_px, sizes[0], sizes[1], lengths, device=device,
                            trades=columns)


def random_trades(best_bid: np.ndarray, best_ask: np.ndarray, segment_lengths: list[int],
                  max_size_lots: int, seed: int) -> tuple[np.ndarray, ...]:
    """Seeded random prints for a book with these [N] best prices: in each row, with chance
    ``TRADE_PROB`` per side, sellers print at the previous row's best bid or 1-2 ticks
    below it (through it) and buyers likewise above the best ask, 1..max lots; the first row
    of a segment has none. Not tied to the book's size changes: the simulator must cope with
    any prints (a print larger than the level, at a price the book never showed)."""
    rng = np.random.default_rng([seed, 1])  # apart from the book's own draws
    n = len(best_bid)
    first = np.zeros(n, bool)
    first[np.cumsum([0] + list(segment_lengths[:-1]))] = True
    sides = []
    for sign, touch, none in ((-1, best_bid, TRADE_NONE_SELL), (1, best_ask, TRADE_NONE_BUY)):
        printed = (rng.random(n) < TRADE_PROB) & ~first
        depth = rng.choice(TRADE_DEPTHS, n, p=TRADE_DEPTH_WEIGHTS)
        price = np.roll(touch, 1) + sign * depth
        size = rng.integers(1, max_size_lots, n)
        sides += [np.where(printed, price, none), np.where(printed, size, 0)]
    return tuple(sides)
