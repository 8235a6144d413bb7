"""Slow, obviously-correct single-environment simulator of resting orders (plain Python).

Used only by tests: the batched passive step (``lobsurf.sim.passive`` with
``lobsurf.sim.queue``) must match it exactly. It shares none of their code: it reads the
book's rows one by one in Python loops, one side at a time, with Python ints and floats,
and follows the rules as docs/sim_assumptions.md ("Passive orders") states them. Money and
the queue's fractions are computed operation for operation as there, so results agree bit
for bit. The market order of a step walks the book with ``ReferenceEnv.walk``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from lobsurf.data.dataset import TRADE_NONE_BUY, TRADE_NONE_SELL, BookTensors
from lobsurf.sim.config import SimConfig
from lobsurf.sim.fees import resolve_fees
from lobsurf.sim.reference import ReferenceEnv, RefStep
from lobsurf.sim.reward import BPS

BID, ASK = 0, 1


@dataclass
class RefOrder:
    """One side's resting order (``lots`` 0: none)."""

    lots: int = 0
    price: int = 0
    queue: float = 0.0
    age: int = 0


@dataclass
class RefPassiveStats:
    posted_lots: int = 0
    maker_lots: int = 0
    maker_fees: float = 0.0
    rejected_posts: int = 0


@dataclass
class _StepBooks:
    """What one step has booked so far."""

    reward: float = 0.0
    closes: int = 0
    wins: int = 0
    gross: int = 0
    closed_fees: float = 0.0
    flow: int = 0
    fees: float = 0.0
    filled: int = 0
    turnover: int = 0
    maker_fees: float = 0.0


@dataclass
class PassiveReferenceEnv(ReferenceEnv):
    """``ReferenceEnv`` with one resting order a side (the actions of SimConfig's table)."""

    sell_px: np.ndarray = None
    sell_sz: np.ndarray = None
    buy_px: np.ndarray = None
    buy_sz: np.ndarray = None
    maker_fee_per_lot: float = 0.0
    maker_fee_per_value_tick: float = 0.0
    orders: list[RefOrder] = field(default_factory=lambda: [RefOrder(), RefOrder()])
    queue_fraction: list[float] = field(default_factory=lambda: [0.0, 0.0])
    filled_last: list[int] = field(default_factory=lambda: [0, 0])
    passive_stats: RefPassiveStats = field(default_factory=RefPassiveStats)

    @staticmethod
    def from_book(book: BookTensors, cfg: SimConfig) -> PassiveReferenceEnv:
        maker_per_lot, maker_bps = resolve_fees(cfg, book).maker
        rate = maker_bps * BPS
        return PassiveReferenceEnv(
            **ReferenceEnv.fields_from(book, cfg),
            sell_px=book.sell_trade_px_ticks.cpu().numpy(),
            sell_sz=book.sell_trade_sz.cpu().numpy(),
            buy_px=book.buy_trade_px_ticks.cpu().numpy(),
            buy_sz=book.buy_trade_sz.cpu().numpy(),
            maker_fee_per_lot=maker_per_lot + rate * (book.price_origin_fixed / 1e9)
            * book.multiplier,
            maker_fee_per_value_tick=rate * book.tick_size * book.multiplier)

    def reset(self, k: int) -> None:
        super().reset(k)
        self.orders = [RefOrder(), RefOrder()]
        self.queue_fraction = [0.0, 0.0]

    def maker_fee(self, lots: int, value_ticks: int) -> float:
        out = float(lots) * self.maker_fee_per_lot
        if self.maker_fee_per_value_tick != 0.0:
            out = out + float(value_ticks) * self.maker_fee_per_value_tick
        return out

    # ---- the book as a resting order sees it ------------------------------------------
    def shown(self, row: int, side: int, price: int) -> tuple[int, bool]:
        """(lots the row shows at ``price`` on ``side``, whether the price lies within the
        visible levels: not deeper than the 10th, or the book shows fewer levels)."""
        px = self.bid_px[row] if side == BID else self.ask_px[row]
        sz = self.bid_sz[row] if side == BID else self.ask_sz[row]
        size = 0
        for level in range(len(px)):
            if int(px[level]) == price:
                size += int(sz[level])
        deepest = int(px[-1])
        within = price >= deepest if side == BID else price <= deepest
        return size, within or int(sz[-1]) == 0

    def crossed(self, row: int, side: int, price: int) -> bool:
        """The other side's best reached ``price``: an ask at or below a bid, or a bid at or
        above an ask."""
        if side == BID:
            return int(self.ask_px[row][0]) <= price
        return int(self.bid_px[row][0]) >= price

    def prints(self, row: int, side: int, price: int) -> tuple[bool, int]:
        """(a print went through ``price`` or the book crossed it, lots printed at it) for
        the aggressors that trade against ``side``."""
        if side == BID:
            px, size = int(self.sell_px[row]), int(self.sell_sz[row])
            through = px != TRADE_NONE_SELL and px < price
        else:
            px, size = int(self.buy_px[row]), int(self.buy_sz[row])
            through = px != TRADE_NONE_BUY and px > price
        return through or self.crossed(row, side, price), size if px == price else 0

    # ---- one row for one resting order -------------------------------------------------
    def rest(self, row: int, side: int) -> int:
        """Lots the order on ``side`` fills in ``row``; its queue and lots move on."""
        o = self.orders[side]
        if o.lots == 0:
            return 0
        size, seen = self.shown(row, side, o.price)
        through, traded = self.prints(row, side, o.price)
        if through:
            filled = o.lots
        else:
            filled = min(o.lots, math.floor(max(traded - o.queue, 0.0)))
        o.queue = max(o.queue - traded, 0.0)
        size_before, seen_before = self.shown(row - 1, side, o.price)
        if self.cfg.queue_model == "probabilistic" and seen_before and seen:
            level = max(size_before - traded, 0)
            cancelled = level - size
            if cancelled > 0:  # the level lost more than the prints took
                front = float(min(o.queue, level))
                share = front / level
                p_ahead = 1.0
                for _ in range(self.cfg.queue_power):
                    p_ahead *= share
                o.queue = max(front - p_ahead * cancelled, 0.0)
        if seen:
            o.queue = float(min(o.queue, size))
        o.lots -= filled
        return filled

    # ---- the books of one fill ---------------------------------------------------------
    def book(self, b: _StepBooks, sign: int, lots: int, value: int, close: int,
             close_value: int, fee: float, close_fee: float) -> None:
        flow, close_flow = -sign * value, -sign * close_value
        if close > 0 and close == abs(self.position):  # the open trade ends
            gross = self.trade_cash_ticks + close_flow
            trade_fees = self.trade_fees + close_fee
            net = float(gross) * self.tick_value - trade_fees
            b.reward += net
            b.closes += 1
            b.wins += net > 0
            b.gross += gross
            b.closed_fees += trade_fees
            self.trade_cash_ticks, self.trade_fees = flow - close_flow, fee - close_fee
        else:
            self.trade_cash_ticks += flow
            self.trade_fees = self.trade_fees + fee
        self.position += sign * lots
        b.flow += flow
        b.fees += fee
        b.filled += sign * lots
        b.turnover += lots

    def passive_rows(self, b: _StepBooks, first: int, last: int, filled: list[int]) -> None:
        """Rows ``first`` .. ``last`` for the resting orders, bid then ask in each row."""
        for row in range(first, last + 1):
            for side, sign in ((BID, 1), (ASK, -1)):
                price = self.orders[side].price
                lots = self.rest(row, side)
                if lots == 0:
                    continue
                close = min(lots, abs(self.position)) if sign * self.position < 0 else 0
                fee, close_fee = (self.maker_fee(lots, lots * price),
                                  self.maker_fee(close, close * price))
                self.book(b, sign, lots, lots * price, close, close * price, fee, close_fee)
                b.maker_fees += fee
                filled[side] += lots
                self.passive_stats.maker_lots += lots

    # ---- one step ----------------------------------------------------------------------
    def step(self, action: int, k: int) -> RefStep:
        cfg, limit, lat = self.cfg, self.cfg.position_limit_lots, self.cfg.latency_rows
        c = self.cursor
        last = (c + cfg.stride + lat >= self.stop
                or self.episode_steps >= cfg.max_episode_steps - 1)
        b, filled = _StepBooks(), [0, 0]
        self.passive_rows(b, c + 1, c + lat, filled)  # before the action arrives
        arrival = c + lat
        for side in (BID, ASK):
            if last or cfg.cancel_sides[action][side]:
                self.orders[side] = RefOrder()
        # the market order, within position + resting bid <= limit >= resting ask - position
        low, high = self.orders[ASK].lots - limit, limit - self.orders[BID].lots
        target = min(max(self.position + cfg.signed_order_lots[action], low), high)
        if last:
            target = 0
        order = target - self.position
        sign = (order > 0) - (order < 0)
        n = abs(order)
        close = min(n, abs(self.position)) if order * self.position < 0 else 0
        filled_n, value_n = self.walk(arrival, order > 0, n, last)
        filled_c, value_c = self.walk(arrival, order > 0, close, last)
        self.book(b, sign, filled_n, value_n, filled_c, value_c, self.fee(filled_n, value_n),
                  self.fee(filled_c, value_c))
        # a post joins the queue at the best price of row c, behind what row c + L shows
        for side, room in ((BID, limit - self.position), (ASK, limit + self.position)):
            want = min(cfg.post_lots[action][side], room)
            if last or want <= 0 or self.orders[side].lots > 0:
                continue
            price = int(self.bid_px[c][0]) if side == BID else int(self.ask_px[c][0])
            if self.crossed(arrival, side, price):
                self.passive_stats.rejected_posts += 1
                continue
            size, seen = self.shown(arrival, side, price)
            self.orders[side] = RefOrder(want, price, float(size) if seen else math.inf, 0)
            self.passive_stats.posted_lots += want
        self.passive_rows(b, arrival + 1, c + cfg.stride, filled)  # after it
        self.filled_last = filled
        self.stats.trades += b.closes
        self.stats.wins += b.wins
        self.stats.gross_pnl_ticks += b.gross
        self.stats.fees += b.closed_fees
        self.stats.net_pnl += b.reward
        self.stats.hold_steps += action == 0
        self.stats.steps += 1
        self.stats.turnover_lots += b.turnover
        self.stats.unfilled_lots += n - filled_n
        self.passive_stats.maker_fees += b.maker_fees
        if self.position == 0:
            self.time_in_trade = 0
        else:
            self.time_in_trade = (0 if b.closes else self.time_in_trade) + 1
        end_row = c + cfg.stride
        for side in (BID, ASK):
            o = self.orders[side]
            if o.lots == 0:
                self.orders[side], self.queue_fraction[side] = RefOrder(), 0.0
                continue
            o.age += 1
            size, seen = self.shown(end_row, side, o.price)
            self.queue_fraction[side] = (o.queue / size if size > 0 else 0.0) if seen else 1.0
        self.advance(last, k)
        return RefStep(reward=b.reward, trade_closed=b.closes > 0, episode_end=last,
                       filled_lots=b.filled, cash_flow_ticks=b.flow, fees=b.fees)
