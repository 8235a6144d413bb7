"""Baselines through the backtest runner: hold is exactly zero, the oracle makes money,
momentum trades with the sign of order-flow imbalance."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lobsurf.backtest.random_cursors import BacktestConfig, make_env, run_backtest
from lobsurf.baselines.policies import (BaselineConfig, HoldPolicy, MomentumPolicy, make_baseline,
                                        order_flow_imbalance)
from lobsurf.sim import SimConfig
from lobsurf.sim.books import book_from_arrays, random_walk_book

RUN = BacktestConfig(num_envs=16, steps=300)


def backtest(name: str, sim: SimConfig, seed: int = 0) -> dict:
    env = make_env(random_walk_book(3000, 2, seed=seed), sim, RUN)
    return run_backtest(env, make_baseline(name, env, BaselineConfig(seed=seed)), RUN)


def test_hold_is_exactly_zero() -> None:
    s = backtest("hold", SimConfig(window=32, fee_per_lot=1.0))
    assert (s["net_pnl"], s["gross_pnl"], s["fees"], s["trades"]) == (0.0, 0.0, 0.0, 0)
    assert s["hold_fraction"] == 1.0 and s["steps"] == RUN.num_envs * RUN.steps


@pytest.mark.parametrize("seed", [0, 1])
def test_oracle_beats_random_and_is_profitable(seed: int) -> None:
    sim = SimConfig(window=32, fee_per_lot=1.0, seed=seed)
    oracle, random = backtest("oracle", sim, seed), backtest("random", sim, seed)
    assert oracle["net_pnl"] > 0 and oracle["win_rate"] > 0.6
    assert random["net_pnl"] < oracle["net_pnl"]
    # every trade was closed by the final forced close: net = gross - fees
    assert oracle["net_pnl"] == pytest.approx(oracle["gross_pnl"] - oracle["fees"])


def test_summary_keys() -> None:
    s = backtest("momentum", SimConfig(window=32))
    for key in ("net_pnl", "gross_pnl", "fees", "trades", "wins", "win_rate", "hold_fraction",
                "pnl_per_trade"):
        assert key in s
    assert 0 <= s["win_rate"] <= 1 and 0 <= s["hold_fraction"] <= 1


def test_order_flow_imbalance_by_hand() -> None:
    # 3 rows; best bid rises with size 5 (+5), then ask falls with size 4 (-4): OFI = +5 - 4 = 1
    bid_px = np.array([[100], [101], [101]]) - np.arange(10)
    ask_px = np.array([[103], [103], [102]]) + np.arange(10)
    bid_sz = np.full((3, 10), 7)
    bid_sz[1:, 0] = 5
    ask_sz = np.full((3, 10), 9)
    ask_sz[2, 0] = 4
    book = book_from_arrays(bid_px, ask_px, bid_sz, ask_sz)
    env = make_env(book, SimConfig(window=3, latency_rows=0), BacktestConfig(num_envs=1, steps=1))
    env.state.cursor.fill_(2)
    # e1 = +5 (bid up: q_b now) - 0 - 0 (ask same: -9 + 9) ; e2 = (5 - 5) - 4 + 0 = -4
    assert order_flow_imbalance(env, 2).tolist() == [1.0]
    policy = MomentumPolicy(BaselineConfig(momentum_lookback_rows=2, momentum_threshold_lots=0.5), env)
    assert policy.act(env).tolist() == [1]  # buy the smallest size


def test_momentum_needs_window_for_lookback() -> None:
    env = make_env(random_walk_book(300, 1), SimConfig(window=4), BacktestConfig(num_envs=2, steps=1))
    with pytest.raises(ValueError, match="lookback"):
        MomentumPolicy(BaselineConfig(momentum_lookback_rows=8), env)
    assert HoldPolicy().act(env).tolist() == [0, 0]
