"""BatchedLobEnv: B environments stepped in lock-step as tensors.

The env owns the static config, the book tables it fills against and the state tensors;
``step`` calls the pure functions of ``matching`` and ``reward`` and handles episode ends
and auto-reset with masks (no Python loop over environments, no host sync, static shapes:
ready for ``torch.cuda.graph`` capture). ``lobsurf.sim.reference`` is the slow reference it
is tested against. The rules are listed in docs/sim_assumptions.md.

One step with market orders, for every env at once:
1. action -> signed order lots, clipped so |position + order| <= limit; on the episode's
   last step the order is replaced by one that flattens the position;
2. the order walks the opposite side of the book at row cursor + latency_rows;
3. position, the open trade's cash and fees update; a trade that closes pays its realized
   net PnL as reward;
4. the cursor advances ``stride`` rows; envs whose episode ended jump to a random cursor.
With ``cfg.passive_orders`` the step is ``lobsurf.sim.passive.passive_step_values``: resting
orders meet every row the step passes, and the state gains ``passive_state`` /
``passive_stats``.
The observation is ``state.cursor`` (callers gather the K-window there with
``lobsurf.data.dataset.gather_window``) plus position, unrealized PnL and time in trade
(and the resting orders' state).

The step is a pure function, ``step_values`` (the state, the stats, the actions, the reset
draws and the env's constant tables in; the new state, the new stats and the result out),
and ``BatchedLobEnv.step`` draws the reset uniforms from the env's generator, calls it and
copies the new values into the state tensors in place (lobsurf.writeback): two multi-tensor
copies for all seventeen fields (more with passive orders). The training step passes a
compiled ``step_values`` (``lobsurf.agent.step.StepKernels.sim_step``), which fuses the
eighty-odd small kernels of the eager step into a few.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields

import torch

from lobsurf.data.dataset import BookTensors
from lobsurf.sim.config import SimConfig
from lobsurf.sim.episode import (StepValues, episode_ends, next_state, next_stats,
                                 reset_tables)
from lobsurf.sim.episode import reset_cursors as draw_cursors
from lobsurf.sim.fees import resolve_fees
from lobsurf.sim.matching import closing_lots, strictly_upper_ones, walk_levels
from lobsurf.sim.passive import passive_step_values, passive_tables
from lobsurf.sim.reward import FeeModel, fees, money_scalar, ticks_to_money
from lobsurf.sim.state import PassiveState, PassiveStats, SimState, SimStats, StepResult
from lobsurf.sim.tables import EnvTables
from lobsurf.writeback import copy_values_

__all__ = ["BatchedLobEnv", "EnvTables", "StepFunction", "StepValues", "reset_cursors",
           "reset_tables", "step_values"]


def reset_cursors(draw: torch.Tensor, tables: EnvTables) -> tuple[torch.Tensor, torch.Tensor]:
    """[B] int64 draws k uniform in [0, total) -> the k-th valid cursor over all segments and
    its segment's stop row."""
    return draw_cursors(draw, tables.valid_end, tables.valid_offset, tables.segment_stop)


def step_values(s: SimState, st: SimStats, action: torch.Tensor, reset_draw: torch.Tensor,
                tables: EnvTables, cfg: SimConfig, force_end: torch.Tensor | None = None,
                passive_state: PassiveState | None = None,
                passive_stats: PassiveStats | None = None) -> StepValues:
    """One step of every env (module docstring), pure.

    Args:
        s, st: the state and the stats before the step (not written).
        action: [B] int64 action index in [0, num_actions).
        reset_draw: [B] int64 uniform draws in [0, total cursors): the new cursor of an env
            whose episode ends now (``reset_cursors``).
        force_end: optional [B] bool: make this step the episode's last (close at market).
        passive_state, passive_stats: the resting orders and their stats, with
            ``cfg.passive_orders`` (the step is then ``lobsurf.sim.passive``'s).
    """
    if cfg.passive_orders:
        return passive_step_values(s, st, passive_state, passive_stats, action,
                                   reset_cursors(reset_draw, tables), tables, cfg, force_end)
    limit = cfg.position_limit_lots
    # 1. order: clip to the limit; the last step of an episode flattens instead
    last = episode_ends(s, cfg, force_end)
    target = (s.position + tables.order_table[action]).clamp_(-limit, limit)
    target.masked_fill_(last, 0)
    order = target - s.position
    n = order.abs()
    buy = order > 0
    position_abs = s.position.abs()
    close = closing_lots(position_abs, n, target.abs())
    # 2. walk the side the order takes (asks for buys) at the fill row
    side_row = torch.add(buy, s.cursor, alpha=2)
    px = tables.fill_px[side_row]  # [B, 10]
    sz = tables.fill_sz[side_row]
    # a forced close must flatten: size enough for any position at the deepest level
    sz[:, -1].add_(last, alpha=limit)
    filled, value = walk_levels(px, sz, torch.stack((n, close), 1), tables.strictly_upper)
    filled_n, filled_c = filled.unbind(1)
    sign = order.sign()
    flow = value * -sign[:, None]  # [B, 2] cash flows (order, closing part)
    fee = fees(filled, value, tables.fee_per_lot, tables.fee_per_value_tick)  # [B, 2]
    flow_n, flow_c = flow.unbind(1)
    fee_n, fee_c = fee.unbind(1)
    # 3. trade accounting: the closing part (the walk's first lots) ends the open trade
    closed = (filled_c == position_abs) & (filled_c > 0)
    gross_ticks = s.trade_cash_ticks + flow_c
    trade_fees = s.trade_fees + fee_c
    net = ticks_to_money(gross_ticks, tables.tick_value) - trade_fees
    reward = torch.where(closed, net, 0.0)
    cash = torch.where(closed, flow_n - flow_c, s.trade_cash_ticks + flow_n)
    open_fees = torch.where(closed, fee_n - fee_c, s.trade_fees + fee_n)
    position = torch.addcmul(s.position, sign, filled_n)
    time_in_trade = torch.where(position == 0, 0, torch.where(closed, 0, s.time_in_trade) + 1)
    stats = next_stats(st, action, closed, reward > 0, torch.where(closed, gross_ticks, 0),
                       torch.where(closed, trade_fees, 0.0), reward, filled_n, n - filled_n)
    # 4. advance; ended episodes restart at a random cursor (auto-reset)
    state = next_state(s, last, reset_cursors(reset_draw, tables), cfg, tables.mid2_ticks,
                       tables.half_tick_value, position, cash, open_fees, time_in_trade)
    return StepValues(state=state, stats=stats, result=StepResult(
        reward=reward, trade_closed=closed, episode_end=last, filled_lots=sign * filled_n,
        cash_flow_ticks=flow_n, fees=fee_n))


#: the signature of ``step_values`` (a compiled copy is one)
StepFunction = Callable[..., StepValues]


class BatchedLobEnv:
    """B environments over one instrument's BookTensors, on the book's device.

    Attributes:
        state: SimState, [B] tensors updated in place.
        stats: SimStats, [B] accumulators (``reset_stats`` zeroes them).
        tables: EnvTables, the device constants of a step.
        generator: torch.Generator of the reset draws (one int64 per env per step).
        fees: the fees charged (``lobsurf.sim.fees.Fees``: cfg's, else the store's, else
            the default) and where they came from.
        passive_state, passive_stats: the resting orders ([B, 2]) and their counts ([B]),
            updated in place like ``state`` and ``stats``; None without passive orders
            (lobsurf.sim.passive).
    """

    def __init__(self, book: BookTensors, num_envs: int, cfg: SimConfig) -> None:
        self.book, self.cfg, self.num_envs = book, cfg, num_envs
        device = book.device
        self.device = device
        # Sides interleaved per row (2*row = bid, 2*row + 1 = ask) so one gather fetches the
        # side an order walks: [2N, 10]. Costs one more copy of the book's prices and sizes.
        self.side_px = torch.stack((book.bid_px_ticks, book.ask_px_ticks), 1).reshape(-1, 10)
        self.side_sz = torch.stack((book.bid_sz, book.ask_sz), 1).reshape(-1, 10)
        # views starting latency_rows rows later: index 2*cursor + buy reads the fill row
        self.fill_px = self.side_px[2 * cfg.latency_rows:]
        self.fill_sz = self.side_sz[2 * cfg.latency_rows:]
        self.mid2_ticks = book.bid_px_ticks[:, 0].long() + book.ask_px_ticks[:, 0].long()  # [N]
        self.strictly_upper = strictly_upper_ones(self.side_px.shape[1], device)
        self.order_table = torch.tensor(cfg.signed_order_lots, dtype=torch.int64, device=device)
        self.valid_end, self.valid_offset, self.total_cursors = reset_tables(book, cfg)
        self.segment_stop = book.segment_stop
        self.tick_value = book.tick_size * book.multiplier
        # the fees of cfg, else the store's, else the default (lobsurf.sim.fees)
        self.fees = resolve_fees(cfg, book)
        self.fee_model = FeeModel.build(self.fees.per_lot, self.fees.bps,
                                        book.price_origin_fixed / 1e9, book.tick_size,
                                        book.multiplier)
        self.maker_fee_model = FeeModel.build(*self.fees.maker, book.price_origin_fixed / 1e9,
                                              book.tick_size, book.multiplier)
        passive = passive_tables(
            book, cfg, self.side_px, self.side_sz,
            money_scalar(self.maker_fee_model.per_lot, device),
            (money_scalar(self.maker_fee_model.per_value_tick, device)
             if self.maker_fee_model.per_value_tick != 0.0 else None)
        ) if cfg.passive_orders else None
        # 0-d float64 device constants, made once (no host->device copy inside step)
        self.tables = EnvTables(
            order_table=self.order_table, fill_px=self.fill_px, fill_sz=self.fill_sz,
            strictly_upper=self.strictly_upper, mid2_ticks=self.mid2_ticks,
            valid_end=self.valid_end, valid_offset=self.valid_offset,
            segment_stop=self.segment_stop,
            fee_per_lot=money_scalar(self.fee_model.per_lot, device),
            fee_per_value_tick=(money_scalar(self.fee_model.per_value_tick, device)
                                if self.fee_model.per_value_tick != 0.0 else None),
            tick_value=money_scalar(self.tick_value, device),
            half_tick_value=money_scalar(self.tick_value / 2, device), passive=passive)
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(cfg.seed)
        self.state = SimState.zeros(num_envs, device)
        self.stats = SimStats.zeros(num_envs, device)
        self.passive_state = PassiveState.zeros(num_envs, device) if passive else None
        self.passive_stats = PassiveStats.zeros(num_envs, device) if passive else None

    # ---- resets -------------------------------------------------------------------------
    def _reset_draw(self) -> torch.Tensor:
        """[B] int64 uniform in [0, total cursors) from the env's generator."""
        return torch.randint(self.total_cursors, (self.num_envs,), generator=self.generator,
                             device=self.device)

    def reset(self) -> SimState:
        """Start a new episode in every env (random cursors); stats are kept."""
        cursor, stop = reset_cursors(self._reset_draw(), self.tables)
        s = self.state
        s.cursor.copy_(cursor)
        s.stop.copy_(stop)
        for t in (s.episode_steps, s.position, s.trade_cash_ticks, s.trade_fees, s.time_in_trade,
                  s.unrealized_pnl):
            t.zero_()
        if self.passive_state is not None:  # no order rests at an episode's start
            for f in fields(self.passive_state):
                getattr(self.passive_state, f.name).zero_()
        return s

    def reset_stats(self) -> None:
        self.stats.zero_()
        if self.passive_stats is not None:
            for f in fields(self.passive_stats):
                getattr(self.passive_stats, f.name).zero_()

    # ---- step ---------------------------------------------------------------------------
    def step(self, action: torch.Tensor, force_end: torch.Tensor | None = None,
             kernel: StepFunction = step_values) -> StepResult:
        """Advance every env one step.

        Args:
            action: [B] int64 action index in [0, num_actions).
            force_end: optional [B] bool: make this step the episode's last (close at market).
            kernel: ``step_values`` or a compiled copy of it.

        Returns:
            StepResult of [B] tensors; ``state`` and ``stats`` (and the passive ones) are
            updated in place.
        """
        passive = {} if self.passive_state is None else {
            "passive_state": self.passive_state, "passive_stats": self.passive_stats}
        new = kernel(self.state, self.stats, action, self._reset_draw(), self.tables, self.cfg,
                     force_end, **passive)
        parts = [(self.state, new.state), (self.stats, new.stats)]
        if passive:
            parts += [(self.passive_state, new.passive_state),
                      (self.passive_stats, new.passive_stats)]
        copy_values_([(getattr(old, f.name), getattr(fresh, f.name))
                      for old, fresh in parts for f in fields(fresh)])
        return new.result
