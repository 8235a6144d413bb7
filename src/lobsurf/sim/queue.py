"""Resting orders against one snapshot row: their fills and the queue ahead of them.

Pure tensor functions over [B, 2] resting orders (side 0 the bid, side 1 the ask), one row
at a time; ``lobsurf.sim.passive`` calls them for every row a step passes. Prices are
*normalized* so that both sides read alike: bid prices as they are, ask prices negated. On
both sides a deeper level then has a lower price, the aggressors' extreme print (sellers'
lowest, buyers' highest, negated) trades through an order below its price, and the best
price of the other side (negated back) crosses it at or below its price.

One row of a resting order at price p with ``remaining`` lots and ``queue`` lots ahead:
1. a trade-through (the aggressors printed beyond p) or a cross (the other side's best
   reached p) fills it completely at p;
2. otherwise prints of T lots at p take the queue's front first: the order fills
   floor(T - queue) lots (at most what remains) and the queue ahead shrinks by T;
3. what the level at p lost beyond the prints was cancelled. ``risk_averse``: every
   cancel was behind the order. ``probabilistic``: each cancelled lot was ahead of it with
   probability x ** n, x the share of the level (after the prints) ahead of it, n the
   queue power (hftbacktest's PowerProbQueueFunc3; Databento's MBP-10 estimator with bias
   k is n = 1 / (1 + k));
4. the queue ahead never exceeds the size the row shows at p (so cancels that cannot have
   come from behind the order, there being too few lots behind it, came from ahead).
The queue ahead is an expected number of lots (fractional under ``probabilistic``). A price
outside the row's 10 visible levels (deeper than the 10th level of a book that shows 10)
has no known size: steps 3 and 4 are skipped there, and an order that arrives at such a
price is queued behind everything (``UNSEEN_QUEUE``) until its level comes into view.
docs/sim_assumptions.md, "Passive orders", lists each rule with its test.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

#: the queue ahead of an order whose price has not been inside the visible levels since it
#: arrived: behind everything, until the level's size is seen
UNSEEN_QUEUE = math.inf


class Row(NamedTuple):
    """One snapshot row as resting orders read it, normalized (module docstring).

    px: [B, 2, 10] int prices of the bid and ask levels (asks negated), best first.
    sz: [B, 2, 10] int sizes (0 on empty levels).
    trade_px: [B, 2] int the extreme print of the aggressors against each side in the
        interval (row - 1, row]: sellers' lowest price, minus buyers' highest; above every
        price (``TRADE_NONE_SELL``) where none printed.
    trade_sz: [B, 2] int lots printed at that price (0 where none).
    """

    px: torch.Tensor
    sz: torch.Tensor
    trade_px: torch.Tensor
    trade_sz: torch.Tensor


class RowFill(NamedTuple):
    """What ``fill_row`` returns, every field [B, 2]: the lots filled, what remains, the
    queue ahead, and the row's visible size at each order's price and whether it is seen
    (the next row's ``size_before`` / ``seen_before``)."""

    filled: torch.Tensor
    remaining: torch.Tensor
    queue: torch.Tensor
    size: torch.Tensor
    seen: torch.Tensor


def visible_size(price: torch.Tensor, px: torch.Tensor, sz: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """The row's size at each normalized ``price`` [B, 2] (0 where no level shows it) and
    whether the price lies within the visible levels: at or above the 10th level, or the
    book shows fewer than 10 (empty levels have size 0), so a price it does not show is
    empty."""
    size = ((px == price[..., None]) * sz).sum(-1)
    seen = (price >= px[..., -1]) | (sz[..., -1] == 0)
    return size, seen


def crossing(price: torch.Tensor, px: torch.Tensor) -> torch.Tensor:
    """[B, 2] bool: the other side's best price reached each order's normalized price (a
    bid at or above the best ask, an ask at or below the best bid)."""
    return -px[..., 0].flip(-1) <= price


def cancels_ahead(queue: torch.Tensor, traded: torch.Tensor, size_before: torch.Tensor,
                  seen_before: torch.Tensor, size: torch.Tensor, seen: torch.Tensor,
                  power: int) -> torch.Tensor:
    """The queue ahead after the row's cancellations under the probabilistic model (module
    docstring, step 3); unchanged where the level's size is not known in both rows or it
    did not fall beyond the prints.

    Args:
        queue: [B, 2] float64 queue ahead after the prints.
        traded: [B, 2] int lots printed at the order's price in this row.
        size_before, seen_before: the previous row's size at the price and whether seen.
        size, seen: this row's.
        power: n, an integer >= 1; x ** n by repeated products, so results are exact
            functions of their inputs.
    """
    level = (size_before - traded).clamp(min=0)  # what the prints left of the level
    front = torch.minimum(queue, level)
    cancelled = level - size
    share = front / level.clamp(min=1)
    p_ahead = share
    for _ in range(power - 1):
        p_ahead = p_ahead * share
    moved = (front - p_ahead * cancelled).clamp(min=0.0)
    return torch.where(seen_before & seen & (cancelled > 0), moved, queue)


class RowReads(NamedTuple):
    """What a row shows resting orders at their prices, [B, 2] or with rows [B, R, 2]
    (``read_rows``): the visible size at the price and whether seen, a fill-all event (a
    trade-through or a cross), and the lots printed at the price."""

    size: torch.Tensor
    seen: torch.Tensor
    through: torch.Tensor
    traded: torch.Tensor


def read_rows(price: torch.Tensor, rows: Row) -> RowReads:
    """``RowReads`` of orders at normalized ``price`` [B, 2] in ``rows``: one row ([B, 2, 10]
    levels) or several at once ([B, R, 2, 10]; the price held over them). Reading a step's
    rows in one call leaves ``fill_known``'s walk over them elementwise."""
    if rows.px.dim() == 4:
        price = price[:, None]
    size, seen = visible_size(price, rows.px, rows.sz)
    through = (rows.trade_px < price) | crossing(price, rows.px)
    traded = torch.where(rows.trade_px == price, rows.trade_sz, 0)
    return RowReads(size, seen, through, traded)


def fill_known(remaining: torch.Tensor, queue: torch.Tensor, size_before: torch.Tensor,
               seen_before: torch.Tensor, reads: RowReads, model: str, power: int) -> RowFill:
    """``fill_row`` once the row's ``reads`` at the orders' prices are known: elementwise."""
    beyond = (reads.traded - queue).clamp(min=0.0).floor().long()
    filled = torch.where(reads.through, remaining, torch.minimum(beyond, remaining))
    queue = (queue - reads.traded).clamp(min=0.0)
    if model == "probabilistic":
        queue = cancels_ahead(queue, reads.traded, size_before, seen_before, reads.size,
                              reads.seen, power)
    queue = torch.where(reads.seen, torch.minimum(queue, reads.size), queue)
    return RowFill(filled=filled, remaining=remaining - filled, queue=queue, size=reads.size,
                   seen=reads.seen)


def fill_row(remaining: torch.Tensor, queue: torch.Tensor, price: torch.Tensor,
             size_before: torch.Tensor, seen_before: torch.Tensor, row: Row,
             model: str, power: int) -> RowFill:
    """One row for resting orders [B, 2] (module docstring: the four rules).

    Args:
        remaining: int64 lots resting (0: no order on that side; it fills nothing).
        queue: float64 lots ahead of it.
        price: int64 its normalized price.
        size_before, seen_before: the previous row's visible size at ``price`` and whether
            seen (``visible_size``; for an order that just arrived, its arrival row's).
        row: this row, normalized.
        model: "risk_averse" or "probabilistic"; power: n of the probabilistic model.
    """
    return fill_known(remaining, queue, size_before, seen_before, read_rows(price, row),
                      model, power)
