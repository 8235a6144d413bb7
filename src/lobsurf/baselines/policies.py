"""Baseline policies: hold, random, momentum (order-flow imbalance), top-of-book imbalance
(``lobsurf.baselines.imbalance``, threshold fitted on training rows), a future-peeking oracle,
the causal ceiling of a synthetic store (``lobsurf.baselines.bayes``, the best policy for its
known law) and the exact optimum of a sweep (``lobsurf.baselines.optimal``), both planned
over the sweep's steps.

Each is a ``lobsurf.backtest.policy.Policy``: ``act(env) -> [B] int64 actions`` reading the
env's book and state on the device, with no host sync, so the backtest runner treats them
and a learned agent alike. Actions use the env's convention: 0 Hold, 1..n Buy
order_sizes_lots[i-1], n+1..2n Sell them.
"""

from __future__ import annotations

import torch

from lobsurf.baselines.actions import buy_sell_actions, direction_to_action
from lobsurf.baselines.config import BaselineConfig
from lobsurf.baselines.imbalance import make_imbalance
from lobsurf.baselines.optimal import make_optimal
from lobsurf.data.dataset import gather_window
from lobsurf.sim.env import BatchedLobEnv


class HoldPolicy:
    """Always Hold: never trades; its PnL is exactly zero."""

    def act(self, env: BatchedLobEnv) -> torch.Tensor:
        return torch.zeros(env.num_envs, dtype=torch.int64, device=env.device)


class RandomPolicy:
    """Uniform over all actions, from its own seeded generator."""

    def __init__(self, cfg: BaselineConfig, device: torch.device | str) -> None:
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(cfg.seed)

    def act(self, env: BatchedLobEnv) -> torch.Tensor:
        return torch.randint(0, env.cfg.num_actions, (env.num_envs,), generator=self.generator,
                             device=env.device)


def order_flow_imbalance(env: BatchedLobEnv, lookback: int) -> torch.Tensor:
    """[B] float64 order-flow imbalance (Cont, Kukanov, Stoikov 2014) over the last steps.

    e_n = 1{b_n >= b_n-1} q^b_n - 1{b_n <= b_n-1} q^b_n-1 - 1{a_n <= a_n-1} q^a_n
          + 1{a_n >= a_n-1} q^a_n-1, with b, a the best prices and q their sizes; summed over
    the last ``lookback`` snapshot changes ending at the cursor.
    """
    w = gather_window(env.book, env.state.cursor, lookback + 1)
    b, a = w.bid_px_ticks[:, :, 0], w.ask_px_ticks[:, :, 0]
    qb, qa = w.bid_sz[:, :, 0].double(), w.ask_sz[:, :, 0].double()
    e = ((b[:, 1:] >= b[:, :-1]) * qb[:, 1:] - (b[:, 1:] <= b[:, :-1]) * qb[:, :-1]
         - (a[:, 1:] <= a[:, :-1]) * qa[:, 1:] + (a[:, 1:] >= a[:, :-1]) * qa[:, :-1])
    return e.sum(1)


class MomentumPolicy:
    """Trade with the sign of order-flow imbalance: buy on OFI > threshold, sell below -threshold."""

    def __init__(self, cfg: BaselineConfig, env: BatchedLobEnv) -> None:
        if cfg.momentum_lookback_rows > env.cfg.window - 1:
            raise ValueError(f"momentum lookback {cfg.momentum_lookback_rows} needs window >= "
                             f"{cfg.momentum_lookback_rows + 1} (the env's window is {env.cfg.window})")
        self.cfg = cfg
        self.buy, self.sell = buy_sell_actions(env, cfg.size_index)

    def act(self, env: BatchedLobEnv) -> torch.Tensor:
        ofi = order_flow_imbalance(env, self.cfg.momentum_lookback_rows)
        threshold = self.cfg.momentum_threshold_lots
        direction = (ofi > threshold).long() - (ofi < -threshold).long()
        return direction_to_action(direction, self.buy, self.sell)


class OraclePolicy:
    """Upper bound: buys when the mid ``horizon`` rows after the fill row is above the ask it
    would pay (plus a round trip of per-lot fees), sells when it is below the bid; else holds.

    It reads the future (rows past the cursor, clamped to the episode's segment), which no
    real policy can.
    """

    def __init__(self, cfg: BaselineConfig, env: BatchedLobEnv) -> None:
        self.cfg = cfg
        self.buy, self.sell = buy_sell_actions(env, cfg.size_index)
        tick_value = env.book.tick_size * env.book.multiplier
        # twice the round-trip per-lot fee (bps fees at the book's price origin), in half
        # ticks of the mid (mid2 units)
        self.margin2 = 2 * 2 * env.fee_model.per_lot / tick_value

    def act(self, env: BatchedLobEnv) -> torch.Tensor:
        s, book = env.state, env.book
        fill_row = s.cursor + env.cfg.latency_rows
        future = torch.minimum(fill_row + self.cfg.oracle_horizon_rows, s.stop - 1)
        mid2 = env.mid2_ticks[future].double()
        ask2 = 2 * book.ask_px_ticks[fill_row, 0].double()
        bid2 = 2 * book.bid_px_ticks[fill_row, 0].double()
        direction = (mid2 > ask2 + self.margin2).long() - (mid2 < bid2 - self.margin2).long()
        return direction_to_action(direction, self.buy, self.sell)


BASELINES = ("hold", "random", "momentum", "imbalance", "oracle", "bayes", "optimal")
#: baselines fitted on training rows (``make_baseline`` needs ``train_rows`` for them).
FITTED_BASELINES = ("imbalance",)
#: baselines planned over one sweep (``make_baseline`` needs ``sweep_rows``, ``sweep_envs``).
PLANNED_BASELINES = ("bayes", "optimal")


def make_baseline(name: str, env: BatchedLobEnv, cfg: BaselineConfig,
                  train_rows: torch.Tensor | None = None, sweep_rows: torch.Tensor | None = None,
                  sweep_envs: int | None = None):
    """Build baseline ``name`` (one of BASELINES) for ``env``.

    Args:
        name: one of BASELINES.
        env: an env with the book and simulator settings the policy will trade.
        cfg: baseline settings.
        train_rows: [n] int64 training end rows of ``env.book``, for FITTED_BASELINES
            (unless their setting is given in ``cfg``).
        sweep_rows: [R] int64 rows of the sweep the policy will trade, for PLANNED_BASELINES.
        sweep_envs: the sweep's number of envs, for PLANNED_BASELINES.
    """
    if name not in BASELINES:
        raise ValueError(f"unknown baseline {name!r}; choose one of {', '.join(BASELINES)}")
    if name == "imbalance":
        return make_imbalance(env, cfg, train_rows)
    if name == "optimal":
        return make_optimal(env, sweep_rows, sweep_envs)
    if name == "bayes":
        from lobsurf.baselines.bayes import make_bayes

        return make_bayes(env, sweep_rows, sweep_envs, cfg.bayes_imbalance_bins,
                          cfg.bayes_mc_rows)
    if name == "hold":
        return HoldPolicy()
    if name == "random":
        return RandomPolicy(cfg, env.device)
    if name == "momentum":
        return MomentumPolicy(cfg, env)
    if name == "oracle":
        return OraclePolicy(cfg, env)
    raise ValueError(f"unknown baseline {name!r}; choose one of {', '.join(BASELINES)}")


def make_baselines(names: list[str] | tuple[str, ...], env: BatchedLobEnv, cfg: BaselineConfig,
                   train_rows: torch.Tensor | None = None, sweep_rows: torch.Tensor | None = None,
                   sweep_envs: int | None = None) -> dict:
    """name → policy for each of ``names`` (see ``make_baseline``), ready for a sweep next
    to a learned agent: ``{**make_baselines(BASELINES, env, cfg, rows), "agent": agent}``.
    ``bayes`` is left out, with one line on stderr, where it has no ceiling to plan (real
    data has no known law; resting orders)."""
    from lobsurf.baselines.bayes import without_bayes_where_no_ceiling

    return {name: make_baseline(name, env, cfg, train_rows, sweep_rows, sweep_envs)
            for name in without_bayes_where_no_ceiling(names, env.book, env.cfg)}
