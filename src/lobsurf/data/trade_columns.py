"""The device trade columns of ``BookTensors``, derived from the store's trade table.

Per snapshot row, what a resting order needs to know of the trades in (row - 1, row]:

* ``sell_trade_px_ticks``: the lowest price a seller-initiated trade printed at
  (``TRADE_NONE_SELL`` when none); ``sell_trade_sz``: the sellers' volume at that price.
* ``buy_trade_px_ticks``: the highest price a buyer-initiated trade printed at
  (``TRADE_NONE_BUY`` when none); ``buy_trade_sz``: the buyers' volume at that price.

A resting bid at p is touched by sellers only: a lowest seller price below p traded through
it, equal to p ate the queue from the front by ``sell_trade_sz``, above p did not reach it
(asks and buyers alike). Prices are int32 ticks on the book's origin.

Trades whose aggressor the source does not give (side 0) are classified against the quotes
of the previous row: at or above its best ask a buyer, at or below its best bid a seller,
strictly inside its spread left out (it says nothing about which queue it took). Trades
off the tick grid (LOBSTER's midpoint executions) or beyond int32 ticks are left out too:
they cannot be compared with an order's price. ``require_trades`` is the one-line refusal
for data without trades.
"""

from __future__ import annotations

import numpy as np

from lobsurf.data.schema import TRADE_NONE_BUY, TRADE_NONE_SELL
from lobsurf.data.trades import SIDE_BUY, SIDE_SELL, SIDE_UNKNOWN, TradeChunk
from lobsurf.errors import UserError

INT32, INT64 = np.iinfo(np.int32), np.iinfo(np.int64)
#: the four per-row columns, in the order ``row_trade_columns`` returns them
TRADE_FIELDS = ("sell_trade_px_ticks", "sell_trade_sz", "buy_trade_px_ticks", "buy_trade_sz")


def classify_unknown(trades: TradeChunk, bid_before: np.ndarray, ask_before: np.ndarray
                     ) -> np.ndarray:
    """[M] int8 sides with the unknown ones classified by the previous row's quotes.

    Args:
        trades: the trades.
        bid_before, ask_before: [M] fixed-point best bid and ask of the row before each
            trade's row.
    Returns:
        sides in {+1, -1, 0}; 0 is left: strictly inside the previous spread.
    """
    side = trades.side.copy()
    unknown = side == SIDE_UNKNOWN
    side[unknown & (trades.price >= ask_before)] = SIDE_BUY
    side[unknown & (trades.price <= bid_before)] = SIDE_SELL
    return side


def _extreme_per_row(row: np.ndarray, ticks: np.ndarray, size: np.ndarray, n: int,
                     lowest: bool) -> tuple[np.ndarray, np.ndarray]:
    # [n] int64 price (lowest or highest per row) and the summed size at it; rows without a
    # trade keep price 0 and size 0 (the caller puts the sentinel there).
    price_out = np.zeros(n, np.int64)
    size_out = np.zeros(n, np.int64)
    if len(row) == 0:
        return price_out, size_out
    key = ticks if lowest else -ticks
    order = np.lexsort((key, row))
    row, ticks, size = row[order], ticks[order], size[order]
    # Runs of equal (row, price): the first run of each row is its extreme price.
    new_run = np.ones(len(row), bool)
    new_run[1:] = (row[1:] != row[:-1]) | (ticks[1:] != ticks[:-1])
    starts = np.flatnonzero(new_run)
    run_size = np.add.reduceat(size, starts)
    first_of_row = np.ones(len(starts), bool)
    first_of_row[1:] = row[starts[1:]] != row[starts[:-1]]
    rows = row[starts[first_of_row]]
    price_out[rows] = ticks[starts[first_of_row]]
    size_out[rows] = run_size[first_of_row]
    return price_out, size_out


def row_trade_columns(trades: TradeChunk, n: int, bid_before: np.ndarray,
                      ask_before: np.ndarray, origin_fixed: int, tick_fixed: int
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The four [n] int32 columns (``TRADE_FIELDS``) of n rows.

    Args:
        trades: the trade table's entries of these rows, ``row`` in 0..n-1.
        n: rows.
        bid_before, ask_before: [M] fixed-point best quotes of the row before each trade's.
        origin_fixed, tick_fixed: the book's price origin and tick (fixed point).
    """
    side = classify_unknown(trades, bid_before, ask_before)
    # Range first, bounds in Python ints: price - origin can overflow int64 for absurd prices.
    price = np.asarray(trades.price, np.int64)
    low = max(origin_fixed + INT32.min * tick_fixed, INT64.min)
    high = min(origin_fixed + INT32.max * tick_fixed, INT64.max)
    in_range = (price >= low) & (price <= high)
    ticks, off_grid = np.divmod(np.where(in_range, price, origin_fixed) - origin_fixed,
                                tick_fixed)
    usable = in_range & (off_grid == 0)
    columns = []
    for who, lowest, none in ((SIDE_SELL, True, TRADE_NONE_SELL), (SIDE_BUY, False, TRADE_NONE_BUY)):
        mine = usable & (side == who)
        price, size = _extreme_per_row(trades.row[mine], ticks[mine],
                                       np.asarray(trades.size, np.int64)[mine], n, lowest)
        if size.size and size.max() > INT32.max:
            raise ValueError(f"trade volume {int(size.max())} at one row is more than the "
                             f"device dataset holds (int32, {INT32.max})")
        columns += [np.where(size > 0, price, none).astype(np.int32), size.astype(np.int32)]
    return tuple(columns)


def require_trades(data: object, what: str = "passive orders", store_path: object = None) -> None:
    """Refuse, in one line, data that holds no trades.

    Args:
        data: a ``BookTensors`` or a ``Store`` (anything with ``has_trades``).
        what: what needs the trades (named in the message).
        store_path: the store to name, when ``data`` does not know it.

    Raises:
        UserError: when ``data.has_trades`` is False.
    """
    if getattr(data, "has_trades", False):
        return
    where = store_path if store_path is not None else getattr(data, "path", None)
    prefix = f"{where}: " if where is not None else ""
    raise UserError(f"{prefix}the store holds no trades (written before lobsurf recorded them, or "
                    f"from a source without them), and {what} need them: re-ingest the source "
                    "files with `lobsurf ingest` (or regenerate it with `lobsurf synth`)")
