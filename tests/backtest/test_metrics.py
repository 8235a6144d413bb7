"""Every summary metric against hand-computed values: a scripted policy on a hand-made
8-row book through the real sweep, and compute_metrics on hand-made records."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lobsurf.backtest.metrics import BacktestRecord, MetricsConfig, bootstrap_mean_ci, compute_metrics
from lobsurf.backtest.sweep import SweepConfig, sweep
from lobsurf.sim import SimConfig
from lobsurf.sim.books import book_from_arrays

# best bid per row in ticks; ask = bid + 1 (one-tick spread); 100 lots on every level
BEST_BID = np.array([100, 100, 101, 102, 102, 101, 100, 100])
BUY1, SELL1, HOLD = 1, 6, 0  # order sizes (1..5): action 1 buys 1 lot, 6 sells 1 lot
ACTIONS = [BUY1, HOLD, SELL1, SELL1, HOLD, HOLD, BUY1, HOLD]
TICK_VALUE = 0.25 * 50.0  # 12.5 per tick x lot
FEE = 1.0


class Scripted:
    """Plays ``ACTIONS`` in order, one per step (one env)."""

    def __init__(self, actions: list[int]) -> None:
        self.actions, self.t = actions, 0

    def act(self, env) -> torch.Tensor:
        a = torch.full((env.num_envs,), self.actions[self.t], dtype=torch.int64)
        self.t += 1
        return a


def hand_book():
    lv = np.arange(10)
    bid = BEST_BID[:, None] - lv
    ask = BEST_BID[:, None] + 1 + lv
    size = np.full((len(BEST_BID), 10), 100)
    return book_from_arrays(bid, ask, size, size)


def hand_record() -> BacktestRecord:
    book = hand_book()
    sim = SimConfig(window=1, latency_rows=0, fee_per_lot=FEE)
    rows = torch.arange(len(BEST_BID))
    records, tiling = sweep(book, rows, {"scripted": Scripted(ACTIONS)}, sim, SweepConfig(num_envs=1))
    assert tiling.steps == len(BEST_BID) and tiling.ranges == 1
    return records["scripted"]


def test_sweep_records_of_the_hand_made_book() -> None:
    rec = hand_record()
    # trade 1: buy at ask 101 (row 0), sell at bid 101 (row 2): 0 ticks, 2 fees, held 2 steps
    # trade 2: sell at bid 102 (row 3), buy at ask 101 (row 6): +1 tick, 2 fees, held 3 steps
    assert rec.trade_pnl.tolist() == [-2.0, TICK_VALUE - 2 * FEE]
    assert rec.trade_holding_steps.tolist() == [2, 3]
    # equity = realized + open trade at the next row's mid (bid + 0.5) net of its fees
    assert rec.step_pnl.tolist() == [-7.25, 12.5, -7.25, -7.25, 12.5, 12.5, -7.25, 0.0]
    assert rec.step_hold.tolist() == [a == HOLD for a in ACTIONS]
    assert (rec.gross_pnl, rec.fees, rec.turnover_lots, rec.unfilled_lots) == (TICK_VALUE, 4.0, 4, 0)


def test_every_metric_by_hand() -> None:
    m = compute_metrics(hand_record())
    sd = 12.5 / math.sqrt(2)  # sample sd of (-2, 10.5)
    expected = {
        "net_pnl": 8.5, "gross_pnl": 12.5, "fees": 4.0, "trades": 2,
        "win_rate": 0.5, "avg_win": 10.5, "avg_loss": -2.0, "pnl_per_trade": 4.25,
        "sharpe_per_trade": pytest.approx(4.25 / sd),
        "sharpe_per_day": None,  # one day only
        "days": 1,
        # equity 0, -7.25, 5.25, -2, -9.25, 3.25, 15.75, 8.5, 8.5: from 5.25 down to -9.25
        "max_drawdown": 14.5,
        "steps": 8, "hold_fraction": 0.5, "turnover_lots": 4, "turnover": 0.5,
        "avg_holding_steps": 2.5, "unfilled_lots": 0,
        # resample means of two trades are -2, 4.25 or 10.5; each end has 25% mass
        "pnl_per_trade_ci": [-2.0, 10.5],
    }
    assert m == expected


def test_daily_sharpe_and_undefined_metrics() -> None:
    rec = BacktestRecord(trade_pnl=np.array([3.0]), trade_holding_steps=np.array([4]),
                         step_pnl=np.array([1.0, 2.0, 3.0, -1.0, 4.0]),
                         step_day=np.array([19000, 19000, 19001, 19001, 19003]),
                         step_hold=np.zeros(5, bool), gross_pnl=5.0, fees=2.0,
                         turnover_lots=2, unfilled_lots=1)
    m = compute_metrics(rec, MetricsConfig(trading_days_per_year=252))
    # daily PnL 3, 2, 4: mean 3, sd 1 -> 3 sqrt(252)
    assert m["sharpe_per_day"] == pytest.approx(3 * math.sqrt(252)) and m["days"] == 3
    assert m["sharpe_per_trade"] is None  # one trade: no spread
    assert m["avg_loss"] is None and m["avg_win"] == 3.0 and m["pnl_per_trade_ci"] == [3.0, 3.0]
    assert m["max_drawdown"] == 1.0


def test_bootstrap_is_seeded_and_covers_the_mean() -> None:
    x = np.random.default_rng(5).normal(2.0, 1.0, 400)
    cfg = MetricsConfig(seed=3, bootstrap_chunk_draws=1000)  # many chunks
    lo, hi = bootstrap_mean_ci(x, cfg)
    assert (lo, hi) == bootstrap_mean_ci(x, MetricsConfig(seed=3))  # chunking changes nothing
    assert lo < x.mean() < hi and hi - lo == pytest.approx(2 * 1.96 / 20, rel=0.2)
    assert bootstrap_mean_ci(np.array([]), cfg) is None


def test_unfilled_lots_and_forced_close_by_hand() -> None:
    # row 0 shows 2 lots at the best ask (101) and nothing deeper: a 5-lot buy fills 2
    lv = np.arange(10)
    best_bid = np.array([100, 100, 102])
    bid, ask = best_bid[:, None] - lv, best_bid[:, None] + 1 + lv
    bid_sz, ask_sz = np.full((3, 10), 100), np.full((3, 10), 100)
    ask_sz[0] = 0
    ask_sz[0, 0] = 2
    book = book_from_arrays(bid, ask, bid_sz, ask_sz)
    sim = SimConfig(window=1, latency_rows=0, fee_per_lot=FEE)
    buy5 = 5
    records, _ = sweep(book, torch.arange(3), {"s": Scripted([buy5, HOLD, HOLD])}, sim,
                       SweepConfig(num_envs=1))
    m = compute_metrics(records["s"])
    # the last row's forced close sells the 2 lots at bid 102: +1 tick x 2 lots, 4 lots of fees
    assert (m["trades"], m["unfilled_lots"], m["turnover_lots"]) == (1, 3, 4)
    assert (m["gross_pnl"], m["fees"], m["net_pnl"]) == (2 * TICK_VALUE, 4.0, 2 * TICK_VALUE - 4.0)
    assert m["avg_holding_steps"] == 2.0 and m["hold_fraction"] == pytest.approx(2 / 3)


def test_random_cursor_backtest_summary_by_hand() -> None:
    # the older backtest runner (lobsurf eval --split random) on the same book and script
    from lobsurf.backtest.random_cursors import BacktestConfig, make_env, run_backtest

    run = BacktestConfig(num_envs=1, steps=len(BEST_BID))
    env = make_env(hand_book(), SimConfig(window=1, latency_rows=0, fee_per_lot=FEE), run)
    env.state.cursor.fill_(0)  # the episode starts at row 0 instead of a random row
    s = run_backtest(env, Scripted(ACTIONS), run)
    assert s == {"net_pnl": 8.5, "gross_pnl": 12.5, "fees": 4.0, "trades": 2, "wins": 1,
                 "win_rate": 0.5, "hold_fraction": 0.5, "pnl_per_trade": 4.25, "steps": 8,
                 "turnover_lots": 4, "unfilled_lots": 0, "envs": 1}
