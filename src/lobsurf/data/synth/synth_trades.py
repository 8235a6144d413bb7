"""The trades of the synthetic market, read off its books plus a trade process of its own.

Used by ``lobsurf.data.synth``; the rules are written out in docs/synth.md ("Trades"). The
books come from the book streams (``synth_book``) and are never changed here: the trades are
made consistent with them.

* **Level-clearing trades**: an event whose mid moves up and whose best ask rises means a
  buyer took the whole best ask: a trade of its displayed size (the previous row's) at the
  old best ask, aggressor +1; likewise a seller for a mid move down that lowers the best
  bid. A spread that widens on both sides at once (mid unchanged) is liquidity withdrawn:
  cancellations, no trade.
* **Partial trades** (their own random streams, ``TRADE_STREAM``): at each event, with
  probability ``partial_trade_prob``, an aggressor takes the front of a best queue without
  clearing it: a buyer with probability clip(0.5 + 0.5 * partial_trade_lean * I_{t-1}, 0, 1)
  (I_{t-1}: the previous snapshot's top-of-book imbalance, as in the mid-move law), else a
  seller; the size is geometric with mean ``partial_trade_mean_lots``, at most the displayed
  size before the event. Only where the hit side's best price does not move in that event
  (the level stands); the displayed size after it is the book's, the difference being adds
  and cancellations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lobsurf.data.synth.synth_processes import SpawnedStreams
from lobsurf.data.trades import SIDE_BUY, SIDE_SELL, TradeChunk


@dataclass
class TradeStreams(SpawnedStreams):
    """One generator per process of the partial trades (whether, which side, how large), so
    a day's trades do not depend on ``chunk_rows``; all draw one value per event."""

    occurrence: np.random.Generator
    side: np.random.Generator
    size: np.random.Generator


@dataclass(frozen=True)
class PartialTrades:
    """The partial-trade settings of ``SynthConfig`` (``partial_trade_*``) and its tick."""

    prob: float
    mean_lots: float
    lean: float
    tick_size_fixed: int


@dataclass(frozen=True)
class TopBefore:
    """The best prices (ticks) and sizes (lots) just before a chunk's first event."""

    bid_ticks: int
    ask_ticks: int
    bid_size: int
    ask_size: int


def chunk_trades(streams: TradeStreams, partial: PartialTrades, before: TopBefore,
                 book: dict[str, np.ndarray]) -> TradeChunk:
    """The trades of one chunk of n events (module docstring), ``row`` = the event's row.

    Args:
        streams: the partial trades' generators (each draws n values here).
        partial: the partial trades' settings.
        before: the book just before the chunk's first event.
        book: the chunk's ``SnapshotChunk`` book fields (``book_chunk``), store units.
    """
    tick = partial.tick_size_fixed
    bid, ask = book["bid_px"][:, 0] // tick, book["ask_px"][:, 0] // tick
    n = bid.shape[0]
    bid_before = np.concatenate([[before.bid_ticks], bid[:-1]])
    ask_before = np.concatenate([[before.ask_ticks], ask[:-1]])
    bid_size_before = np.concatenate([[before.bid_size], book["bid_sz"][:-1, 0]])
    ask_size_before = np.concatenate([[before.ask_size], book["ask_sz"][:-1, 0]])
    mid_step = (bid + ask) - (bid_before + ask_before)
    buyer_clears = (ask > ask_before) & (mid_step > 0)
    seller_clears = (bid < bid_before) & (mid_step < 0)

    happens = streams.occurrence.random(n) < partial.prob
    imbalance = ((bid_size_before - ask_size_before)
                 / (bid_size_before + ask_size_before).astype(np.float64))
    p_buy = np.clip(0.5 + 0.5 * partial.lean * imbalance, 0.0, 1.0)
    buyer = streams.side.random(n) < p_buy
    wanted = streams.size.geometric(1.0 / partial.mean_lots, n).astype(np.int64)
    standing = np.where(buyer, ask == ask_before, bid == bid_before)
    partial = np.flatnonzero(happens & standing)
    partial_buyer = buyer[partial]
    displayed = np.where(partial_buyer, ask_size_before[partial], bid_size_before[partial])

    buys, sells = np.flatnonzero(buyer_clears), np.flatnonzero(seller_clears)
    row = np.concatenate([buys, sells, partial])
    price = np.concatenate([ask_before[buys], bid_before[sells],
                            np.where(partial_buyer, ask_before[partial], bid_before[partial])])
    size = np.concatenate([ask_size_before[buys], bid_size_before[sells],
                           np.minimum(wanted[partial], displayed)])
    side = np.concatenate([np.full(len(buys), SIDE_BUY), np.full(len(sells), SIDE_SELL),
                           np.where(partial_buyer, SIDE_BUY, SIDE_SELL)])
    order = np.argsort(row, kind="stable")
    return TradeChunk(row[order].astype(np.int64), price[order] * tick,
                      size[order].astype(np.int64), side[order].astype(np.int8))
