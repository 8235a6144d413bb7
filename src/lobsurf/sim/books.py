"""Small in-memory books for tests, benchmarks and examples (no store on disk needed).

``book_from_arrays`` wraps hand-written [N, 10] tick arrays as ``BookTensors``;
``random_walk_book`` makes a seeded random-walk book with numpy alone (the benchmark
script uses it on machines without the DBN decoder).
"""

from __future__ import annotations

import numpy as np
import torch

from lobsurf.data.dataset import BookTensors
from lobsurf.data.schema import LEVELS


def book_from_arrays(bid_px: np.ndarray, ask_px: np.ndarray, bid_sz: np.ndarray,
                     ask_sz: np.ndarray, segment_lengths: list[int] | None = None,
                     tick_size: float = 0.25, multiplier: float = 50.0,
                     device: torch.device | str = "cpu") -> BookTensors:
    """[N, 10] int arrays (prices in ticks above the origin, which is price 0) -> BookTensors.

    ``segment_lengths`` splits the N rows into consecutive segments (default: one).
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
    )


def random_walk_book(num_rows: int, num_segments: int = 2, seed: int = 0,
                     device: torch.device | str = "cpu", max_size_lots: int = 50,
                     start_tick: int = 100_000) -> BookTensors:
    """Seeded 10-level book whose best bid walks +-1 tick; spread 1-3 ticks; sizes 0..max-1.

    Some level sizes are 0 (empty levels), so fills past them and partial fills occur.
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
    return book_from_arrays(bid_px, ask_px, sizes[0], sizes[1], lengths, device=device)
