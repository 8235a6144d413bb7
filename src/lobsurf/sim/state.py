"""Simulator state: named [B] tensors, updated in place by the step (stable addresses,
so a captured CUDA graph always reads and writes the live values).

``SimState`` is what the agent's observation is built from (together with the book rows
at ``cursor``); ``SimStats`` accumulates per-environment results across episodes. With
passive orders, ``PassiveState`` ([B, 2]: the resting bid and ask) and ``PassiveStats`` do
the same for resting orders (lobsurf.sim.passive).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch


@dataclass
class SimState:
    """Per-environment state, every field [B].

    Attributes:
        cursor: int64 row of the newest snapshot the agent sees (the observation's end_row).
        stop: int64 first row past the current episode's segment.
        episode_steps: int64 steps taken in the current episode.
        position: int64 signed lots held.
        trade_cash_ticks: int64 cash flow of the open trade since it opened, in ticks x lots
            (buys negative); 0 when flat.
        trade_fees: float64 fees paid by the open trade so far (currency).
        time_in_trade: int64 steps since the open trade opened (0 when flat).
        unrealized_pnl: float64 open trade marked at the mid of row ``cursor``, net of the
            fees it has paid (currency); 0 when flat.
    """

    cursor: torch.Tensor
    stop: torch.Tensor
    episode_steps: torch.Tensor
    position: torch.Tensor
    trade_cash_ticks: torch.Tensor
    trade_fees: torch.Tensor
    time_in_trade: torch.Tensor
    unrealized_pnl: torch.Tensor

    @staticmethod
    def zeros(num_envs: int, device: torch.device | str) -> SimState:
        def z(dtype: torch.dtype) -> torch.Tensor:
            return torch.zeros(num_envs, dtype=dtype, device=device)

        return SimState(cursor=z(torch.int64), stop=z(torch.int64), episode_steps=z(torch.int64),
                        position=z(torch.int64), trade_cash_ticks=z(torch.int64),
                        trade_fees=z(torch.float64), time_in_trade=z(torch.int64),
                        unrealized_pnl=z(torch.float64))

    def clone(self) -> SimState:
        return SimState(**{f.name: getattr(self, f.name).clone() for f in fields(self)})


@dataclass
class SimStats:
    """Per-environment results accumulated over every step since the last reset_stats, [B].

    Attributes:
        trades: int64 closed trades (a forced close at episode end counts).
        wins: int64 closed trades with net PnL > 0.
        gross_pnl_ticks: int64 realized PnL of closed trades before fees, ticks x lots.
        fees: float64 fees of closed trades (currency).
        net_pnl: float64 realized net PnL of closed trades (currency), the sum of rewards.
        hold_steps: int64 steps whose action was Hold.
        steps: int64 steps taken.
        turnover_lots: int64 lots filled.
        unfilled_lots: int64 lots ordered (after position clipping) that the visible depth
            could not fill and that were cancelled.
    """

    trades: torch.Tensor
    wins: torch.Tensor
    gross_pnl_ticks: torch.Tensor
    fees: torch.Tensor
    net_pnl: torch.Tensor
    hold_steps: torch.Tensor
    steps: torch.Tensor
    turnover_lots: torch.Tensor
    unfilled_lots: torch.Tensor

    @staticmethod
    def zeros(num_envs: int, device: torch.device | str) -> SimStats:
        kinds = {"fees": torch.float64, "net_pnl": torch.float64}
        return SimStats(**{
            f.name: torch.zeros(num_envs, dtype=kinds.get(f.name, torch.int64), device=device)
            for f in fields(SimStats)
        })

    def zero_(self) -> None:
        for f in fields(self):
            getattr(self, f.name).zero_()


@dataclass
class StepResult:
    """What one step returns, every field [B] (fresh tensors each eager step).

    Attributes:
        reward: float64 realized net PnL of the trade closed this step (currency), else 0
            (with passive orders a step may close several: their sum).
        trade_closed: bool a trade closed (position returned to flat or passed through zero).
        episode_end: bool this was the episode's last step (position closed at market); the
            state already holds the next episode's first cursor (auto-reset).
        filled_lots: int64 signed lots filled this step (+ bought, - sold), resting orders'
            fills included.
        cash_flow_ticks: int64 cash flow of this step's fills in ticks x lots (buys negative).
        fees: float64 fees of this step's fills (currency; maker rebates negative).
    """

    reward: torch.Tensor
    trade_closed: torch.Tensor
    episode_end: torch.Tensor
    filled_lots: torch.Tensor
    cash_flow_ticks: torch.Tensor
    fees: torch.Tensor


@dataclass
class PassiveState:
    """The resting orders, every field [B, 2] (side 0 the bid, 1 the ask), updated in place
    by the env's step like ``SimState``. What the agent may observe of its quotes.

    Attributes:
        remaining: int64 lots still resting; 0: no order on that side.
        price_ticks: int64 the order's price (ticks, as ``bid_px_ticks``); 0 where none.
        queue_ahead: float64 lots expected ahead of it at its price (fractional under the
            probabilistic queue model; inf while its price has been outside the visible
            levels since it arrived); 0 where none.
        queue_fraction: float64 queue ahead / the size shown at its price in the row the
            agent sees (the cursor): 0 at the front, 1 at the back or out of view; 0 where
            none.
        age: int64 steps it has rested (1 after the step it arrived in); 0 where none.
        filled: int64 lots it filled in the last step.
    """

    remaining: torch.Tensor
    price_ticks: torch.Tensor
    queue_ahead: torch.Tensor
    queue_fraction: torch.Tensor
    age: torch.Tensor
    filled: torch.Tensor

    @staticmethod
    def zeros(num_envs: int, device: torch.device | str) -> PassiveState:
        kinds = {"queue_ahead": torch.float64, "queue_fraction": torch.float64}
        return PassiveState(**{f.name: torch.zeros(num_envs, 2, device=device,
                                                   dtype=kinds.get(f.name, torch.int64))
                               for f in fields(PassiveState)})

    @property
    def resting(self) -> torch.Tensor:
        """[B, 2] bool: an order rests on that side."""
        return self.remaining > 0


@dataclass
class PassiveStats:
    """Per-env resting-order counts since the last ``reset_stats``, every field [B].

    Attributes:
        posted_lots: int64 lots of the orders that joined a queue.
        maker_lots: int64 lots filled while resting.
        maker_fees: float64 maker fees of those fills (currency; negative: rebates).
        rejected_posts: int64 posts refused because their price would have crossed the
            book when they arrived.
    """

    posted_lots: torch.Tensor
    maker_lots: torch.Tensor
    maker_fees: torch.Tensor
    rejected_posts: torch.Tensor

    @staticmethod
    def zeros(num_envs: int, device: torch.device | str) -> PassiveStats:
        return PassiveStats(**{f.name: torch.zeros(
            num_envs, device=device,
            dtype=torch.float64 if f.name == "maker_fees" else torch.int64)
            for f in fields(PassiveStats)})
