"""Resting (passive) orders in the batched simulator: their tables and their step.

With ``SimConfig.passive_orders`` each env may keep one resting order a side besides
trading at market (the action table: lobsurf.sim.config; their state: ``PassiveState`` in
lobsurf.sim.state). ``passive_step_values`` replaces the market-order step
(``lobsurf.sim.env.step_values`` calls it); ``lobsurf.sim.reference_passive`` is the slow
reference it is tested against, and docs/sim_assumptions.md, "Passive orders", lists the
rules with their tests.

A step decided at row c with latency L <= stride S, for every env at once:
1. rows c+1 .. c+L: the orders resting before the decision meet each row's prints and size
   changes (``lobsurf.sim.queue``: the rows read at the orders' prices at once, then
   walked elementwise), bid then ask within a row;
2. at row c+L the action arrives: a Cancel removes that side's order (its fills stand);
   a market order walks row c+L's book as in the market-order step, clipped so that
   position + resting bid <= limit and position - resting ask >= -limit; a Post joins
   the queue at the best price of row c (what the agent saw) behind the size row c+L
   shows there, if that side rests nothing (a Post on a side that rests an order keeps
   it and its place: repeat Post to keep quoting, Cancel to move it), sized to the limit,
   and is refused if its price would cross row c+L's book (post-only). On the episode's
   last step both orders are cancelled and the position is closed at market instead;
3. rows c+L+1 .. c+S: the orders resting now meet each row, as in 1.
Each fill is booked at once (``lobsurf.sim.episode.book_fill``): a step may close several
trades; its reward is their summed net PnL. Resting fills pay the maker fee.

The recorded book never sees our orders (no impact): a fill takes nothing from the level,
and the prints that fill us would, in the market, have gone partly to our order instead of
to orders behind it.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from lobsurf.data.dataset import TRADE_NONE_BUY, TRADE_NONE_SELL, BookTensors
from lobsurf.errors import UserError
from lobsurf.sim.config import SimConfig
from lobsurf.sim.episode import (StepValues, TradeBooks, book_fill, episode_ends, next_state,
                                 next_stats)
from lobsurf.sim.matching import closing_lots, walk_levels
from lobsurf.sim.passive_triton import walk_kernel_runs, walk_rows_triton
from lobsurf.sim.queue import UNSEEN_QUEUE, Row, RowReads, crossing, fill_known, read_rows
from lobsurf.sim.reward import fees
from lobsurf.sim.state import PassiveState, PassiveStats, SimState, SimStats, StepResult
from lobsurf.sim.tables import EnvTables, PassiveTables

#: the sides of the [B, 2] tensors: 0 the bid (a resting buy), 1 the ask (a resting sell)
BID, ASK = 0, 1


def passive_tables(book: BookTensors, cfg: SimConfig, side_px: torch.Tensor,
                   side_sz: torch.Tensor, maker_fee_per_lot: torch.Tensor,
                   maker_fee_per_value_tick: torch.Tensor | None) -> PassiveTables:
    """The tables of ``passive_step_values`` over ``book`` (``side_px`` / ``side_sz``: the
    env's [2N, 10] interleaved sides); refuses a book without trades in one line."""
    if not book.has_trades:
        raise UserError("passive orders need the trades of each snapshot and this store has "
                        "none (written before lobsurf recorded them): re-ingest it with "
                        "lobsurf ingest, or set sim.passive_orders = false")
    device = book.device
    sell_px = book.sell_trade_px_ticks
    buy_px = book.buy_trade_px_ticks.long()
    against_ask = torch.where(buy_px == TRADE_NONE_BUY, TRADE_NONE_SELL, -buy_px).int()
    return PassiveTables(
        book_px=side_px.view(-1, 2, side_px.shape[1]), book_sz=side_sz.view(-1, 2, side_sz.shape[1]),
        trade_px=torch.stack((sell_px, against_ask), 1),
        trade_sz=torch.stack((book.sell_trade_sz, book.buy_trade_sz), 1),
        side_sign=torch.tensor([[1], [-1]], dtype=torch.int32, device=device),
        window=torch.arange(cfg.stride + 1, device=device),
        post_lots=torch.tensor(cfg.post_lots, dtype=torch.int64, device=device),
        cancel=torch.tensor(cfg.cancel_sides, dtype=torch.bool, device=device),
        maker_fee_per_lot=maker_fee_per_lot, maker_fee_per_value_tick=maker_fee_per_value_tick,
        last_row=len(book) - 1, walk_kernel=walk_kernel_runs(device))


class _Resting(NamedTuple):
    """The resting orders inside a step, [B, 2]: lots, normalized price, queue ahead, age,
    lots filled this step, and the last row's size at the price and whether seen."""

    remaining: torch.Tensor
    price: torch.Tensor
    queue: torch.Tensor
    age: torch.Tensor
    filled: torch.Tensor
    size: torch.Tensor
    seen: torch.Tensor


def _walk_rows(o: _Resting, joins: torch.Tensor, b: TradeBooks, maker_fees: torch.Tensor,
               raw_price: torch.Tensor, rows: torch.Tensor, first: int, count: int,
               pt: PassiveTables, tables: EnvTables, cfg: SimConfig
               ) -> tuple[_Resting, TradeBooks, torch.Tensor]:
    """The window's rows ``first + 1 .. first + count`` (``rows`` [B, S + 1] each env's book
    rows) for the resting orders at ``raw_price`` [B, 2], in order; row ``first`` gives each
    order's start size, and a joining order (``joins`` [B, 2]) its queue: behind that size,
    or behind everything where the price is not seen. Each row's bid fill then ask fill is
    booked. Returns the orders (their size and seen flag: the last row's), the books and the
    maker fees paid this step so far (``maker_fees`` plus these rows'). On CUDA one kernel
    reads and walks the rows (``lobsurf.sim.passive_triton``), equal to this loop."""
    if pt.walk_kernel:
        w = walk_rows_triton(o.remaining, o.queue, joins, o.filled, tuple(b), maker_fees,
                             raw_price, rows, first, count, pt, tables.tick_value,
                             cfg.queue_model, cfg.queue_power)
        return (o._replace(remaining=w.remaining, queue=w.queue, size=w.size, seen=w.seen,
                           filled=w.filled), TradeBooks(*w.books), w.maker_fees)
    window = rows[:, first:first + count + 1]
    reads = read_rows(raw_price * pt.side_sign[:, 0],
                      Row(pt.book_px[window] * pt.side_sign, pt.book_sz[window],
                          pt.trade_px[window], pt.trade_sz[window]))
    start_size, start_seen = reads.size[:, 0], reads.seen[:, 0]
    o = o._replace(size=start_size, seen=start_seen, queue=torch.where(
        joins, torch.where(start_seen, start_size.double(), UNSEEN_QUEUE), o.queue))
    for k in range(1, count + 1):
        f = fill_known(o.remaining, o.queue, o.size, o.seen,
                       RowReads(*(x[:, k] for x in reads)), cfg.queue_model, cfg.queue_power)
        o = o._replace(remaining=f.remaining, queue=f.queue, size=f.size, seen=f.seen,
                       filled=o.filled + f.filled)
        for side, sign in ((BID, 1), (ASK, -1)):
            lots = f.filled[:, side]
            close = closing_lots(b.position.abs(), lots, (b.position + sign * lots).abs())
            price = raw_price[:, side]
            value, close_value = lots * price, close * price
            fee, close_fee = fees(torch.stack((lots, close)), torch.stack((value, close_value)),
                                  pt.maker_fee_per_lot, pt.maker_fee_per_value_tick).unbind(0)
            b = book_fill(b, sign, lots, close, value, close_value, fee, close_fee,
                          tables.tick_value)
            maker_fees = maker_fees + fee
    return o, b, maker_fees


def passive_step_values(s: SimState, st: SimStats, ps: PassiveState, pst: PassiveStats,
                        action: torch.Tensor, cursor_draw: tuple[torch.Tensor, torch.Tensor],
                        tables: EnvTables, cfg: SimConfig,
                        force_end: torch.Tensor | None = None) -> StepValues:
    """One step of every env with resting orders (module docstring), pure.

    Args:
        s, st, ps, pst: the state, stats, resting orders and their stats before the step.
        action: [B] int64 action index in [0, num_actions).
        cursor_draw: (cursor, stop) [B] int64 of the next episode where this one ends.
        tables: the env's tables (``tables.passive`` set).
        force_end: optional [B] bool: make this step the episode's last.
    """
    pt, limit, lat = tables.passive, cfg.position_limit_lots, cfg.latency_rows
    last = episode_ends(s, cfg, force_end)
    # the decision row (0) and the stride's rows after it; rows past the book's end (only
    # on an episode's last step, after both orders are cancelled) read its last row
    rows = (s.cursor[:, None] + pt.window).clamp_(max=pt.last_row)
    sign = pt.side_sign[:, 0]
    # the size at each order's price and whether seen are not known yet: each walk reads
    # them at its start row
    no_order = torch.zeros_like(ps.remaining, dtype=torch.bool)
    o = _Resting(ps.remaining, ps.price_ticks * sign, ps.queue_ahead, ps.age,
                 torch.zeros_like(ps.filled), torch.zeros_like(ps.remaining), no_order)
    b = TradeBooks.start(s)
    maker_fees = torch.zeros_like(b.fees)
    # 1. the rows before the action arrives (the start size: row c's; nothing joins here)
    if lat > 0:
        o, b, maker_fees = _walk_rows(o, no_order, b, maker_fees, ps.price_ticks, rows, 0,
                                      lat, pt, tables, cfg)
    # 2. the action arrives at row c + L: cancels (all on the last step), then the market
    # order, then a post
    remaining = o.remaining.masked_fill(pt.cancel[action] | last[:, None], 0)
    target = torch.minimum(b.position + tables.order_table[action], limit - remaining[:, BID])
    target = torch.maximum(target, remaining[:, ASK] - limit).masked_fill_(last, 0)
    order = target - b.position
    n, buy = order.abs(), order > 0
    close = closing_lots(b.position.abs(), n, target.abs())
    arrival = rows[:, lat]  # the book row the action meets
    side = buy.long()[:, None, None].expand(-1, 1, pt.book_px.shape[-1])
    px = pt.book_px[arrival].gather(1, side).squeeze(1)  # [B, 10] the side the order takes
    sz = pt.book_sz[arrival].gather(1, side).squeeze(1)
    sz[:, -1].add_(last, alpha=limit)  # a forced close always fills (as step_values)
    filled, value = walk_levels(px, sz, torch.stack((n, close), 1), tables.strictly_upper)
    fee = fees(filled, value, tables.fee_per_lot, tables.fee_per_value_tick)
    b = book_fill(b, order.sign(), filled[:, 0], filled[:, 1], value[:, 0], value[:, 1],
                  fee[:, 0], fee[:, 1], tables.tick_value)
    unfilled = n - filled[:, 0]
    room = torch.stack((limit - b.position, limit + b.position), 1)
    want = torch.minimum(pt.post_lots[action], room).clamp_(min=0)
    want = want.masked_fill_(last[:, None] | (remaining > 0), 0)
    # the best prices the agent saw (row c), normalized; a post there may not cross row c + L
    best = (pt.book_px[rows[:, 0], :, 0] * sign).long()
    refused = (want > 0) & crossing(best, pt.book_px[arrival] * pt.side_sign)
    joins = (want > 0) & ~refused
    # 3. rows c + L .. c + S at the prices after the post: row c + L's size is where a post
    # joins (and, at an unchanged price, what the resting order saw there already)
    o = o._replace(remaining=torch.where(joins, want, remaining),
                   price=torch.where(joins, best, o.price), age=torch.where(joins, 0, o.age))
    o, b, maker_fees = _walk_rows(o, joins, b, maker_fees, o.price * sign, rows, lat,
                                  cfg.stride - lat, pt, tables, cfg)
    # the state the agent sees at the new cursor (the window's last row)
    resting = o.remaining > 0
    fraction = torch.where(o.seen, torch.where(o.size > 0, o.queue / o.size.clamp(min=1), 0.0),
                           1.0)
    passive_state = PassiveState(
        remaining=o.remaining, price_ticks=torch.where(resting, o.price * sign, 0),
        queue_ahead=torch.where(resting, o.queue, 0.0),
        queue_fraction=torch.where(resting, fraction, 0.0),
        age=torch.where(resting, o.age + 1, 0), filled=o.filled)
    passive_stats = PassiveStats(
        posted_lots=pst.posted_lots + torch.where(joins, want, 0).sum(1),
        maker_lots=pst.maker_lots + o.filled.sum(1),
        maker_fees=pst.maker_fees + maker_fees,
        rejected_posts=pst.rejected_posts + refused.sum(1))
    closed = b.closes > 0
    time_in_trade = torch.where(b.position == 0, 0,
                                torch.where(closed, 0, s.time_in_trade) + 1)
    stats = next_stats(st, action, b.closes, b.wins, b.gross_ticks, b.closed_fees, b.reward,
                       b.turnover, unfilled)
    state = next_state(s, last, cursor_draw, cfg, tables.mid2_ticks, tables.half_tick_value,
                       b.position, b.cash, b.fees, time_in_trade)
    result = StepResult(reward=b.reward, trade_closed=closed, episode_end=last,
                        filled_lots=b.filled, cash_flow_ticks=b.flow, fees=b.fees_paid)
    return StepValues(state, stats, result, passive_state, passive_stats)
