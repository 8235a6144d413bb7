"""Books with trades for the resting-order tests: hand-written rows, and a seeded market
whose levels persist from row to row (so queues form, shrink by prints and cancels, and
grow by adds) with prints consistent with the sizes."""

from __future__ import annotations

import numpy as np

from lobsurf.data.dataset import TRADE_NONE_BUY, TRADE_NONE_SELL, BookTensors
from lobsurf.data.schema import LEVELS
from lobsurf.sim.books import book_from_arrays

NO_SELL = (TRADE_NONE_SELL, 0)
NO_BUY = (TRADE_NONE_BUY, 0)


def hand_book(best_bids: list[int], bid_sizes: list[list[int]], ask_sizes: list[list[int]],
              sells: list[tuple[int, int]], buys: list[tuple[int, int]],
              spreads: list[int] | None = None, **kwargs) -> BookTensors:
    """Rows of a one-tick-apart book: row r's best bid ``best_bids[r]``, its ask one tick
    above (or ``spreads[r]``); level sizes as given (missing levels: 10 lots); ``sells`` /
    ``buys``: each row's (price, lots) extreme print of sellers / buyers (``NO_SELL`` /
    ``NO_BUY``: none)."""
    n = len(best_bids)
    spreads = spreads or [1] * n
    levels = np.arange(LEVELS)
    bid_px = np.array(best_bids)[:, None] - levels
    ask_px = (np.array(best_bids) + np.array(spreads))[:, None] + levels

    def sizes(rows: list[list[int]]) -> np.ndarray:
        return np.array([list(r) + [10] * (LEVELS - len(r)) for r in rows])

    trades = (np.array([p for p, _ in sells]), np.array([s for _, s in sells]),
              np.array([p for p, _ in buys]), np.array([s for _, s in buys]))
    return book_from_arrays(bid_px, ask_px, sizes(bid_sizes), sizes(ask_sizes), trades=trades,
                            **kwargs)


def queue_market(num_rows: int, seed: int, segments: int = 2, move_prob: float = 0.04,
                 print_prob: float = 0.35, cancel_prob: float = 0.35, add_prob: float = 0.4,
                 max_lots: int = 20, max_print: int = 6, sweep_prob: float = 0.1,
                 gap_prob: float = 0.0, jump_prob: float = 0.0) -> BookTensors:
    """A seeded market of persistent levels: each row, per side, the touch may print (a
    buyer or seller takes 1..max_print lots from the front, or with ``sweep_prob`` up to
    max_lots + max_print; a print larger than the level takes it and prints through to the
    next), a random level among the first four may lose 1-4 lots to cancels and one may
    gain 1-4; a spread wider than a tick closes by a level inside it, and with
    ``move_prob`` a one-tick spread jumps: one side's best level goes, the other side
    steps onto its price.
    ``gap_prob``: chance a new deep level leaves an empty price between levels;
    ``jump_prob``: chance the whole book shifts 12 ticks (beyond the 10 levels) up or down,
    so resting and arriving orders fall out of view and come back."""
    rng = np.random.default_rng(seed)
    bid = {100_000 - i: int(rng.integers(1, max_lots)) for i in range(LEVELS)}
    ask = {100_001 + i: int(rng.integers(1, max_lots)) for i in range(LEVELS)}
    rows = {k: [] for k in ("bpx", "bsz", "apx", "asz", "sp", "ss", "bp", "bs")}
    first_rows = set(np.linspace(0, num_rows, segments, endpoint=False).astype(int).tolist())
    for r in range(num_rows):
        sell, buy = NO_SELL, NO_BUY
        if r not in first_rows:
            for book, sign in ((bid, -1), (ask, 1)):
                if rng.random() < print_prob:
                    most = max_lots + max_print if rng.random() < sweep_prob else max_print
                    price, left = _take(book, sign, int(rng.integers(1, most + 1)))
                    if sign < 0:
                        sell = (price, left)
                    else:
                        buy = (price, left)
                for chance, delta in ((cancel_prob, -1), (add_prob, 1)):
                    if rng.random() < chance:
                        price = sorted(book, key=lambda p: sign * p)[int(rng.integers(0, 4))]
                        book[price] = max(1, book[price] + delta * int(rng.integers(1, 5)))
            spread = min(ask) - max(bid)
            if spread > 1 and rng.random() < 0.6:  # the spread closes: a level inside it
                if rng.random() < 0.5:
                    bid[max(bid) + 1] = int(rng.integers(1, max_lots))
                else:
                    ask[min(ask) - 1] = int(rng.integers(1, max_lots))
            elif spread == 1 and rng.random() < move_prob:  # the mid jumps a tick
                if rng.random() < 0.5:  # bids step up onto the ask's price
                    del ask[min(ask)]
                    bid[max(bid) + 1] = int(rng.integers(1, max_lots))
                else:
                    del bid[max(bid)]
                    ask[min(ask) - 1] = int(rng.integers(1, max_lots))
            for book, sign in ((bid, -1), (ask, 1)):
                _refill(book, sign, rng, max_lots, gap_prob)
        if rng.random() < jump_prob:
            shift = 12 * (1 if rng.random() < 0.5 else -1)
            bid = {p + shift: v for p, v in bid.items()}
            ask = {p + shift: v for p, v in ask.items()}
        for book, sign, px_key, sz_key in ((bid, -1, "bpx", "bsz"), (ask, 1, "apx", "asz")):
            prices = sorted(book, key=lambda p: sign * p)[:LEVELS]
            rows[px_key].append(prices)
            rows[sz_key].append([book[p] for p in prices])
        rows["sp"].append(sell[0]), rows["ss"].append(sell[1])
        rows["bp"].append(buy[0]), rows["bs"].append(buy[1])
    lengths = np.diff(sorted(first_rows) + [num_rows]).tolist()
    arr = {k: np.array(v) for k, v in rows.items()}
    return book_from_arrays(arr["bpx"], arr["apx"], arr["bsz"], arr["asz"], lengths,
                            trades=(arr["sp"], arr["ss"], arr["bp"], arr["bs"]))


def _take(book: dict[int, int], sign: int, lots: int) -> tuple[int, int]:
    """An aggressor takes ``lots`` from the best level of ``book`` (sign -1: bids, whose
    best is the highest) and on through; returns (extreme price, lots printed there)."""
    while True:
        best = max(book) if sign < 0 else min(book)
        if lots < book[best] or len(book) == 1:
            book[best] = max(1, book[best] - lots)
            return best, lots
        lots -= book[best]
        if lots == 0:
            taken = book.pop(best)
            return best, taken
        book.pop(best)


def _refill(book: dict[int, int], sign: int, rng: np.random.Generator, max_lots: int,
            gap_prob: float) -> None:
    """Keep ``LEVELS`` levels, adding fresh deep ones (with an empty price now and then)."""
    while len(book) < LEVELS:
        deepest = min(book) if sign < 0 else max(book)
        step = 2 if rng.random() < gap_prob else 1
        book[deepest + sign * step] = int(rng.integers(1, max_lots))
