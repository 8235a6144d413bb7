"""Slow, obviously-correct single-environment simulator (plain Python ints and floats).

Used only by tests: the batched ``BatchedLobEnv`` must match it exactly. It walks the
book level by level in a Python loop and keeps the trade's books in Python ints
(ticks x lots). Floating-point money follows the same formulas, operation for operation,
as ``lobsurf.sim.reward`` so results agree bit for bit. Random resets take the draw
``k`` (uniform in [0, total valid cursors)) from the caller, who replays the batched env's
generator stream; k maps to the k-th valid cursor over all segments, as in the env.
With passive orders the reference is ``lobsurf.sim.reference_passive.PassiveReferenceEnv``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lobsurf.data.dataset import BookTensors
from lobsurf.sim.config import SimConfig
from lobsurf.sim.fees import resolve_fees
from lobsurf.sim.reward import BPS


@dataclass
class RefStep:
    reward: float
    trade_closed: bool
    episode_end: bool
    filled_lots: int
    cash_flow_ticks: int
    fees: float


@dataclass
class RefStats:
    trades: int = 0
    wins: int = 0
    gross_pnl_ticks: int = 0
    fees: float = 0.0
    net_pnl: float = 0.0
    hold_steps: int = 0
    steps: int = 0
    turnover_lots: int = 0
    unfilled_lots: int = 0


@dataclass
class ReferenceEnv:
    """One environment over a book held as numpy arrays (copied from BookTensors)."""

    bid_px: np.ndarray
    ask_px: np.ndarray
    bid_sz: np.ndarray
    ask_sz: np.ndarray
    segments: list[tuple[int, int]]
    cfg: SimConfig
    tick_value: float
    fee_per_lot: float
    fee_per_value_tick: float
    cursor: int = 0
    stop: int = 0
    episode_steps: int = 0
    position: int = 0
    trade_cash_ticks: int = 0
    trade_fees: float = 0.0
    time_in_trade: int = 0
    unrealized_pnl: float = 0.0
    stats: RefStats = field(default_factory=RefStats)

    @staticmethod
    def from_book(book: BookTensors, cfg: SimConfig) -> ReferenceEnv:
        if cfg.passive_orders:
            raise ValueError("passive orders: use lobsurf.sim.reference_passive.PassiveReferenceEnv")
        return ReferenceEnv(**ReferenceEnv.fields_from(book, cfg))

    @staticmethod
    def fields_from(book: BookTensors, cfg: SimConfig) -> dict:
        """The constructor's arguments for ``book`` under ``cfg`` (numpy copies, fees)."""
        resolved = resolve_fees(cfg, book)
        rate = resolved.bps * BPS
        origin = book.price_origin_fixed / 1e9
        return dict(
            bid_px=book.bid_px_ticks.cpu().numpy(), ask_px=book.ask_px_ticks.cpu().numpy(),
            bid_sz=book.bid_sz.cpu().numpy(), ask_sz=book.ask_sz.cpu().numpy(),
            segments=list(zip(book.segment_start.tolist(), book.segment_stop.tolist())),
            cfg=cfg, tick_value=book.tick_size * book.multiplier,
            fee_per_lot=resolved.per_lot + rate * origin * book.multiplier,
            fee_per_value_tick=rate * book.tick_size * book.multiplier)

    def fee(self, lots: int, value_ticks: int) -> float:
        out = float(lots) * self.fee_per_lot
        if self.fee_per_value_tick != 0.0:
            out = out + float(value_ticks) * self.fee_per_value_tick
        return out

    def reset(self, k: int) -> None:
        valid = []  # (first valid cursor, count) per segment
        for start, stop in self.segments:
            lo, hi = start + self.cfg.window - 1, stop - 1 - self.cfg.latency_rows
            valid.append((lo, max(0, hi - lo + 1), stop))
        for lo, count, stop in valid:
            if k < count:
                self.cursor, self.stop = lo + k, stop
                break
            k -= count
        self.episode_steps = self.position = self.trade_cash_ticks = self.time_in_trade = 0
        self.trade_fees = self.unrealized_pnl = 0.0

    def walk(self, row: int, buy: bool, want: int, forced: bool) -> tuple[int, int]:
        """Fill ``want`` lots best level first; returns (lots filled, sum price x lots)."""
        px = self.ask_px[row] if buy else self.bid_px[row]
        sz = self.ask_sz[row] if buy else self.bid_sz[row]
        filled = value = 0
        for level in range(len(px)):
            size = int(sz[level])
            if forced and level == len(px) - 1:
                size += self.cfg.position_limit_lots
            take = min(want - filled, size)
            filled += take
            value += take * int(px[level])
        return filled, value

    def step(self, action: int, k: int) -> RefStep:
        cfg, limit = self.cfg, self.cfg.position_limit_lots
        last = (self.cursor + cfg.stride + cfg.latency_rows >= self.stop
                or self.episode_steps >= cfg.max_episode_steps - 1)
        target = max(-limit, min(limit, self.position + cfg.signed_order_lots[action]))
        if last:
            target = 0
        order = target - self.position
        buy, n = order > 0, abs(order)
        sign = (order > 0) - (order < 0)
        # lots that reduce |position|: only an order against the position has them
        close = min(n, abs(self.position)) if order * self.position < 0 else 0
        row = self.cursor + cfg.latency_rows
        filled_n, value_n = self.walk(row, buy, n, last)
        filled_c, value_c = self.walk(row, buy, close, last)
        flow_n, flow_c = -sign * value_n, -sign * value_c
        fee_n, fee_c = self.fee(filled_n, value_n), self.fee(filled_c, value_c)
        closed = filled_c > 0 and filled_c == abs(self.position)
        reward = 0.0
        if closed:
            gross = self.trade_cash_ticks + flow_c
            total_fees = self.trade_fees + fee_c
            reward = float(gross) * self.tick_value - total_fees
            self.stats.trades += 1
            self.stats.wins += reward > 0
            self.stats.gross_pnl_ticks += gross
            self.stats.fees += total_fees
            self.trade_cash_ticks, self.trade_fees = flow_n - flow_c, fee_n - fee_c
            self.time_in_trade = 0
        else:
            self.trade_cash_ticks += flow_n
            self.trade_fees = self.trade_fees + fee_n
        self.stats.net_pnl += reward
        self.position += sign * filled_n
        self.time_in_trade = self.time_in_trade + 1 if self.position != 0 else 0
        self.stats.hold_steps += action == 0
        self.stats.steps += 1
        self.stats.turnover_lots += filled_n
        self.stats.unfilled_lots += n - filled_n
        self.advance(last, k)
        return RefStep(reward=reward, trade_closed=closed, episode_end=last,
                       filled_lots=sign * filled_n, cash_flow_ticks=flow_n, fees=fee_n)

    def advance(self, last: bool, k: int) -> None:
        """Move ``stride`` rows on, or reset with draw ``k`` after an episode's last step
        (its position is flat then), and mark the open trade at the new cursor's mid."""
        if last:
            self.reset(k)
        else:
            self.cursor += self.cfg.stride
            self.episode_steps += 1
        mid2 = int(self.bid_px[self.cursor][0]) + int(self.ask_px[self.cursor][0])
        mark = mid2 * self.position + 2 * self.trade_cash_ticks
        self.unrealized_pnl = float(mark) * (self.tick_value / 2) - self.trade_fees
