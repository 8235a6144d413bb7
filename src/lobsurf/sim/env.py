"""BatchedLobEnv: B market-order environments stepped in lock-step as tensors.

The env owns the static config, the book tables it fills against and the state tensors;
``step`` calls the pure functions of ``matching`` and ``reward`` and handles episode ends
and auto-reset with masks (no Python loop over environments, no host sync, static shapes:
ready for ``torch.cuda.graph`` capture). ``lobsurf.sim.reference`` is the slow reference it
is tested against. The rules are listed in docs/sim_assumptions.md.

One step, for every env at once:
1. action -> signed order lots, clipped so |position + order| <= limit; on the episode's
   last step the order is replaced by one that flattens the position;
2. the order walks the opposite side of the book at row cursor + latency_rows;
3. position, the open trade's cash and fees update; a trade that closes pays its realized
   net PnL as reward;
4. the cursor advances ``stride`` rows; envs whose episode ended jump to a random cursor.
The observation is ``state.cursor`` (callers gather the K-window there with
``lobsurf.data.dataset.gather_window``) plus position, unrealized PnL and time in trade.
"""

from __future__ import annotations

import torch

from lobsurf.data.dataset import BookTensors
from lobsurf.sim.config import SimConfig
from lobsurf.sim.matching import closing_lots, strictly_upper_ones, walk_levels
from lobsurf.sim.reward import FeeModel, fees, money_scalar, ticks_to_money
from lobsurf.sim.state import SimState, SimStats, StepResult


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


class BatchedLobEnv:
    """B environments over one instrument's BookTensors, on the book's device.

    Attributes:
        state: SimState, [B] tensors updated in place.
        stats: SimStats, [B] accumulators (``reset_stats`` zeroes them).
        generator: torch.Generator of the reset draws (one float64 per env per step).
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
        self.fee_model = FeeModel.build(cfg.fee_per_lot, cfg.fee_bps, book.price_origin_fixed / 1e9,
                                        book.tick_size, book.multiplier)
        # 0-d float64 device constants, made once (no host->device copy inside step)
        self._fee_per_lot = money_scalar(self.fee_model.per_lot, device)
        self._fee_per_value_tick = (money_scalar(self.fee_model.per_value_tick, device)
                                    if self.fee_model.per_value_tick != 0.0 else None)
        self._tick_value = money_scalar(self.tick_value, device)
        self._half_tick_value = money_scalar(self.tick_value / 2, device)
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(cfg.seed)
        self.state = SimState.zeros(num_envs, device)
        self.stats = SimStats.zeros(num_envs, device)

    # ---- resets -------------------------------------------------------------------------
    def _draw_cursors(self) -> tuple[torch.Tensor, torch.Tensor]:
        # k uniform in [0, total) per env -> the k-th valid cursor over all segments.
        k = torch.randint(self.total_cursors, (self.num_envs,), generator=self.generator,
                          device=self.device)
        seg = torch.searchsorted(self.valid_end, k, right=True)
        return k + self.valid_offset[seg], self.segment_stop[seg]

    def reset(self) -> SimState:
        """Start a new episode in every env (random cursors); stats are kept."""
        cursor, stop = self._draw_cursors()
        s = self.state
        s.cursor.copy_(cursor)
        s.stop.copy_(stop)
        for t in (s.episode_steps, s.position, s.trade_cash_ticks, s.trade_fees, s.time_in_trade,
                  s.unrealized_pnl):
            t.zero_()
        return s

    def reset_stats(self) -> None:
        self.stats.zero_()

    # ---- step ---------------------------------------------------------------------------
    def step(self, action: torch.Tensor, force_end: torch.Tensor | None = None) -> StepResult:
        """Advance every env one step.

        Args:
            action: [B] int64 action index in [0, num_actions).
            force_end: optional [B] bool: make this step the episode's last (close at market).

        Returns:
            StepResult of [B] tensors; ``state`` and ``stats`` are updated in place.
        """
        cfg, s, st = self.cfg, self.state, self.stats
        limit = cfg.position_limit_lots
        # 1. order: clip to the limit; the last step of an episode flattens instead
        last = s.cursor + (cfg.stride + cfg.latency_rows) >= s.stop
        last |= s.episode_steps >= cfg.max_episode_steps - 1
        if force_end is not None:
            last |= force_end
        target = (s.position + self.order_table[action]).clamp_(-limit, limit)
        target.masked_fill_(last, 0)
        order = target - s.position
        n = order.abs()
        buy = order > 0
        position_abs = s.position.abs()
        close = closing_lots(position_abs, n, target.abs())
        # 2. walk the side the order takes (asks for buys) at the fill row
        side_row = torch.add(buy, s.cursor, alpha=2)
        px = self.fill_px[side_row]  # [B, 10]
        sz = self.fill_sz[side_row]
        # a forced close must flatten: size enough for any position at the deepest level
        sz[:, -1].add_(last, alpha=limit)
        filled, value = walk_levels(px, sz, torch.stack((n, close), 1), self.strictly_upper)
        filled_n, filled_c = filled.unbind(1)
        sign = order.sign()
        flow = value * -sign[:, None]  # [B, 2] cash flows (order, closing part)
        fee = fees(filled, value, self._fee_per_lot, self._fee_per_value_tick)  # [B, 2]
        flow_n, flow_c = flow.unbind(1)
        fee_n, fee_c = fee.unbind(1)
        # 3. trade accounting: the closing part (the walk's first lots) ends the open trade
        closed = (filled_c == position_abs) & (filled_c > 0)
        gross_ticks = s.trade_cash_ticks + flow_c
        trade_fees = s.trade_fees + fee_c
        net = ticks_to_money(gross_ticks, self._tick_value) - trade_fees
        reward = torch.where(closed, net, 0.0)
        torch.where(closed, flow_n - flow_c, s.trade_cash_ticks + flow_n, out=s.trade_cash_ticks)
        torch.where(closed, fee_n - fee_c, s.trade_fees + fee_n, out=s.trade_fees)
        s.position.addcmul_(sign, filled_n)
        flat = s.position == 0
        s.time_in_trade.masked_fill_(closed, 0).add_(1).masked_fill_(flat, 0)
        # statistics
        st.trades += closed
        st.wins += reward > 0
        st.gross_pnl_ticks += torch.where(closed, gross_ticks, 0)
        st.fees += torch.where(closed, trade_fees, 0.0)
        st.net_pnl += reward
        st.hold_steps += action == 0
        st.steps += 1
        st.turnover_lots += filled_n
        st.unfilled_lots += n - filled_n
        # 4. advance; ended episodes restart at a random cursor (auto-reset)
        new_cursor, new_stop = self._draw_cursors()
        torch.where(last, new_cursor, s.cursor + cfg.stride, out=s.cursor)
        torch.where(last, new_stop, s.stop, out=s.stop)
        s.episode_steps.add_(1).masked_fill_(last, 0)
        # open trade at the new cursor's mid, in half ticks: 2 cash + position x (bid + ask)
        mark_ticks2 = torch.addcmul(s.trade_cash_ticks * 2, self.mid2_ticks[s.cursor], s.position)
        torch.sub(ticks_to_money(mark_ticks2, self._half_tick_value), s.trade_fees,
                  out=s.unrealized_pnl)
        return StepResult(reward=reward, trade_closed=closed, episode_end=last,
                          filled_lots=sign * filled_n, cash_flow_ticks=flow_n, fees=fee_n)
