"""What every simulator step shares: resets, the step's values, the trade books of a fill,
and the advance to the next decision.

``step_values`` (market orders, lobsurf.sim.env) and ``passive_step_values`` (with resting
orders, lobsurf.sim.passive) both end with ``next_stats`` and ``next_state``; the passive
step books each of its fills with ``book_fill``. Pure functions over [B] tensors.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from lobsurf.data.dataset import BookTensors
from lobsurf.sim.config import SimConfig
from lobsurf.sim.reward import ticks_to_money
from lobsurf.sim.state import PassiveState, PassiveStats, SimState, SimStats, StepResult


def reset_tables(book: BookTensors, cfg: SimConfig) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Tables for drawing a uniformly random valid cursor over all segments.

    A valid cursor c has K-1 rows of its segment before it and its first fill row inside
    the segment: start + K - 1 <= c <= stop - 1 - latency_rows.

    Returns:
        valid_end: [S] int64 cumulative count of valid cursors up to and including each segment.
        valid_offset: [S] int64 first valid cursor of each segment minus the count before it.
        total: number of valid cursors (host int, computed once at construction).
    """
    lo = book.segment_start + (cfg.window - 1)
    hi = book.segment_stop - 1 - cfg.latency_rows
    count = (hi - lo + 1).clamp(min=0)
    valid_end = count.cumsum(0)
    total = int(valid_end[-1])  # construction-time host read, not in step
    if total == 0:
        raise ValueError(f"no segment has {cfg.window + cfg.latency_rows} rows: nothing to "
                         "simulate with this window and latency")
    return valid_end, lo - (valid_end - count), total


def reset_cursors(draw: torch.Tensor, valid_end: torch.Tensor, valid_offset: torch.Tensor,
                  segment_stop: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[B] int64 draws k uniform in [0, total) -> the k-th valid cursor over all segments and
    its segment's stop row (``reset_tables``)."""
    seg = torch.searchsorted(valid_end, draw, right=True)
    return draw + valid_offset[seg], segment_stop[seg]


def episode_ends(s: SimState, cfg: SimConfig, force_end: torch.Tensor | None) -> torch.Tensor:
    """[B] bool: this step is the episode's last (the next fill row would leave the
    segment, the step limit, or ``force_end``)."""
    last = s.cursor + (cfg.stride + cfg.latency_rows) >= s.stop
    last |= s.episode_steps >= cfg.max_episode_steps - 1
    if force_end is not None:
        last |= force_end
    return last


class StepValues(NamedTuple):
    """What a step function returns: the new state and stats, the step's result, and with
    passive orders their new state and stats (None without)."""

    state: SimState
    stats: SimStats
    result: StepResult
    passive_state: PassiveState | None = None
    passive_stats: PassiveStats | None = None


class TradeBooks(NamedTuple):
    """The open trade's books while a step books its fills one by one, every field [B].

    position, cash (ticks x lots), fees: the open trade's, as ``SimState``; reward, closes,
    wins, gross_ticks, closed_fees: of the trades this step closed so far; flow, fees_paid,
    filled, turnover: this step's fills so far (cash flow, fees, signed and absolute lots).
    """

    position: torch.Tensor
    cash: torch.Tensor
    fees: torch.Tensor
    reward: torch.Tensor
    closes: torch.Tensor
    wins: torch.Tensor
    gross_ticks: torch.Tensor
    closed_fees: torch.Tensor
    flow: torch.Tensor
    fees_paid: torch.Tensor
    filled: torch.Tensor
    turnover: torch.Tensor

    @staticmethod
    def start(s: SimState) -> TradeBooks:
        zero = torch.zeros_like(s.position)
        zero_money = torch.zeros_like(s.trade_fees)
        return TradeBooks(s.position, s.trade_cash_ticks, s.trade_fees, zero_money, zero, zero,
                          zero, zero_money, zero, zero_money, zero, zero)


def book_fill(b: TradeBooks, sign: torch.Tensor | int, lots: torch.Tensor,
              close_lots: torch.Tensor, value: torch.Tensor, close_value: torch.Tensor,
              fee: torch.Tensor, close_fee: torch.Tensor, tick_value: torch.Tensor
              ) -> TradeBooks:
    """Book one fill of ``lots`` (sign +1 bought, -1 sold) worth ``value`` ticks x lots with
    ``fee``, whose first ``close_lots`` (worth ``close_value``, fee ``close_fee``) reduce the
    position: those close the open trade when they flatten it (its net PnL is rewarded),
    the rest open the next one. The rules of ``step_values``, one fill at a time."""
    flow, close_flow = value * -sign, close_value * -sign
    closed = (close_lots == b.position.abs()) & (close_lots > 0)
    gross = b.cash + close_flow
    trade_fees = b.fees + close_fee
    net = ticks_to_money(gross, tick_value) - trade_fees
    return TradeBooks(
        position=b.position + lots * sign,
        cash=torch.where(closed, flow - close_flow, b.cash + flow),
        fees=torch.where(closed, fee - close_fee, b.fees + fee),
        reward=b.reward + torch.where(closed, net, 0.0),
        closes=b.closes + closed, wins=b.wins + (closed & (net > 0)),
        gross_ticks=b.gross_ticks + torch.where(closed, gross, 0),
        closed_fees=b.closed_fees + torch.where(closed, trade_fees, 0.0),
        flow=b.flow + flow, fees_paid=b.fees_paid + fee, filled=b.filled + lots * sign,
        turnover=b.turnover + lots)


def next_stats(st: SimStats, action: torch.Tensor, trades: torch.Tensor, wins: torch.Tensor,
               gross_ticks: torch.Tensor, closed_fees: torch.Tensor, reward: torch.Tensor,
               turnover: torch.Tensor, unfilled: torch.Tensor) -> SimStats:
    """The stats after a step that closed ``trades`` trades (``wins`` of them won) worth
    ``gross_ticks`` before ``closed_fees``, rewarded ``reward``, filled ``turnover`` lots
    and left ``unfilled`` market lots unfilled."""
    return SimStats(
        trades=st.trades + trades, wins=st.wins + wins,
        gross_pnl_ticks=st.gross_pnl_ticks + gross_ticks, fees=st.fees + closed_fees,
        net_pnl=st.net_pnl + reward, hold_steps=st.hold_steps + (action == 0),
        steps=st.steps + 1, turnover_lots=st.turnover_lots + turnover,
        unfilled_lots=st.unfilled_lots + unfilled)


def next_state(s: SimState, last: torch.Tensor, cursor_draw: tuple[torch.Tensor, torch.Tensor],
               cfg: SimConfig, mid2_ticks: torch.Tensor, half_tick_value: torch.Tensor,
               position: torch.Tensor, cash: torch.Tensor, open_fees: torch.Tensor,
               time_in_trade: torch.Tensor) -> SimState:
    """Advance ``stride`` rows, or to the drawn cursor (``reset_cursors``: cursor, stop)
    where the episode ended, and mark the open trade at the new cursor's mid."""
    new_cursor, new_stop = cursor_draw
    cursor = torch.where(last, new_cursor, s.cursor + cfg.stride)
    # open trade at the new cursor's mid, in half ticks: 2 cash + position x (bid + ask)
    mark_ticks2 = torch.addcmul(cash * 2, mid2_ticks[cursor], position)
    return SimState(
        cursor=cursor, stop=torch.where(last, new_stop, s.stop),
        episode_steps=torch.where(last, 0, s.episode_steps + 1), position=position,
        trade_cash_ticks=cash, trade_fees=open_fees, time_in_trade=time_in_trade,
        unrealized_pnl=ticks_to_money(mark_ticks2, half_tick_value) - open_fees)
