"""Hand-computed fills: multi-level walks, partial fills, latency, reversal, forced close, fees."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lobsurf.sim import BatchedLobEnv, SimConfig
from lobsurf.sim.books import book_from_arrays
from lobsurf.sim.matching import closing_lots, walk_levels
from lobsurf.sim.reward import FeeModel, fees, money_scalar

HOLD, BUY1, BUY5, SELL1, SELL5 = 0, 1, 5, 6, 10
TICK_VALUE = 0.25 * 50.0


def test_walk_docstring_example() -> None:
    px = torch.tensor([[100, 101, 102, 103, 104, 105, 106, 107, 108, 109]])
    sz = torch.tensor([[2, 3, 0, 0, 0, 0, 0, 0, 0, 0]], dtype=torch.int32)
    filled, value = walk_levels(px, sz, torch.tensor([[4, 0]]))
    assert filled.tolist() == [[4, 0]]
    assert value.tolist() == [[2 * 100 + 2 * 101, 0]]


def test_walk_partial_fill_stops_at_visible_depth() -> None:
    px = torch.arange(100, 110).reshape(1, 10)
    sz = torch.tensor([[1, 0, 2, 0, 0, 0, 0, 0, 0, 1]], dtype=torch.int32)
    filled, value = walk_levels(px, sz, torch.tensor([[9, 3]]))
    assert filled.tolist() == [[4, 3]]  # depth is 4: 5 of the 9 lots are cancelled
    assert value.tolist() == [[100 + 2 * 102 + 109, 100 + 2 * 102]]


@pytest.mark.parametrize("position,order,expected", [
    (0, 5, 0), (3, 2, 0), (3, -2, 2), (3, -5, 3), (-4, 1, 1), (-4, 9, 4), (-4, -1, 0), (2, 0, 0),
])
def test_closing_lots(position: int, order: int, expected: int) -> None:
    p, o = torch.tensor([position]), torch.tensor([order])
    assert closing_lots(p.abs(), o.abs(), (p + o).abs()).item() == expected


def test_fee_model_per_lot_and_bps() -> None:
    # origin price 1000.0, tick 0.25, multiplier 50: 2 lots at ticks 4 and 8 above the origin
    model = FeeModel.build(fee_per_lot=0.5, fee_bps=2.0, origin_price=1000.0, tick_size=0.25,
                           multiplier=50.0)
    notional = (1001.0 + 1002.0) * 50.0
    per_lot, per_tick = (money_scalar(x, "cpu") for x in (model.per_lot, model.per_value_tick))
    got = fees(torch.tensor([2]), torch.tensor([12]), per_lot, per_tick).item()
    assert got == pytest.approx(2 * 0.5 + notional * 2.0e-4, rel=1e-12)


def hand_book(latency_rows: int = 1):
    # 4 rows, one segment. Prices in ticks (tick 0.25, multiplier 50: 12.5 per tick x lot).
    lv = np.arange(10)
    bid_px = np.stack([99 - lv, 100 - lv, 103 - lv, 104 - lv])
    ask_px = np.stack([100 + lv, 101 + lv, 104 + lv, 105 + lv])
    z = np.zeros(10, int)
    ask_sz = np.stack([z + 10, np.r_[2, 3, 1, z[:7]], z + 10, z + 10])
    bid_sz = np.stack([z + 10, z + 10, np.r_[3, 1, z[:8]], z])  # row 3: no visible bids
    return book_from_arrays(bid_px, ask_px, bid_sz, ask_sz)


def env_at_row0(cfg: SimConfig) -> BatchedLobEnv:
    env = BatchedLobEnv(hand_book(), 1, cfg)
    env.reset()
    env.state.cursor.fill_(0)  # put the env at the first row by hand
    env.state.stop.fill_(4)
    return env


def test_multilevel_walk_partial_close_and_forced_close_at_deepest_level() -> None:
    env = env_at_row0(SimConfig(window=1, latency_rows=1, fee_per_lot=0.5))
    # buy 5 at row 1's asks: 2 @ 101 + 3 @ 102
    r = env.step(torch.tensor([BUY5]))
    assert (r.filled_lots.item(), r.cash_flow_ticks.item(), r.fees.item()) == (5, -508, 2.5)
    assert not r.trade_closed.item() and env.state.position.item() == 5
    # sell 5 at row 2's bids: only 3 @ 103 + 1 @ 102 visible -> 4 filled, 1 cancelled
    r = env.step(torch.tensor([SELL5]))
    assert (r.filled_lots.item(), r.cash_flow_ticks.item()) == (-4, 411)
    assert env.stats.unfilled_lots.item() == 1 and env.state.position.item() == 1
    assert not r.trade_closed.item()
    # last step (next fill row would leave the segment): the agent's Buy is replaced by a
    # close; row 3 shows no bids, so the lot sells at the deepest level's price, 104 - 9
    r = env.step(torch.tensor([BUY1]))
    assert r.episode_end.item() and r.trade_closed.item()
    assert (r.filled_lots.item(), r.cash_flow_ticks.item()) == (-1, 95)
    gross_ticks = -508 + 411 + 95
    assert r.reward.item() == gross_ticks * TICK_VALUE - 0.5 * 10
    s = env.stats
    assert (s.trades.item(), s.wins.item(), s.turnover_lots.item()) == (1, 0, 10)
    assert s.gross_pnl_ticks.item() == gross_ticks and s.fees.item() == 5.0
    assert env.state.position.item() == 0 and env.state.episode_steps.item() == 0


def test_latency_picks_the_fill_row() -> None:
    env = env_at_row0(SimConfig(window=1, latency_rows=0))
    assert env.step(torch.tensor([BUY5])).cash_flow_ticks.item() == -500  # row 0: 5 @ 100
    env = env_at_row0(SimConfig(window=1, latency_rows=1))
    assert env.step(torch.tensor([BUY5])).cash_flow_ticks.item() == -508  # row 1 (above)


def test_reversal_closes_with_the_first_lots_of_the_walk() -> None:
    env = env_at_row0(SimConfig(window=1, latency_rows=0, max_episode_steps=50))
    env.step(torch.tensor([2]))  # buy 2 @ 100 at row 0
    # sell 5 at row 1's bids (10 lots @ 100): closes 2 (gross 0), opens a 3-lot short
    r = env.step(torch.tensor([SELL5]))
    assert r.trade_closed.item() and r.reward.item() == 0.0
    assert env.state.position.item() == -3 and env.state.trade_cash_ticks.item() == 300
    assert env.state.time_in_trade.item() == 1 and env.stats.trades.item() == 1


def test_orders_are_clipped_to_the_position_limit() -> None:
    env = env_at_row0(SimConfig(window=1, latency_rows=0, position_limit_lots=3))
    r = env.step(torch.tensor([BUY5]))
    assert r.filled_lots.item() == 3 and env.stats.unfilled_lots.item() == 0
    r = env.step(torch.tensor([BUY1]))
    assert r.filled_lots.item() == 0 and env.state.position.item() == 3


def test_unrealized_pnl_marks_at_mid_net_of_fees() -> None:
    env = env_at_row0(SimConfig(window=1, latency_rows=0, fee_per_lot=1.0))
    env.step(torch.tensor([BUY1]))  # 1 @ 100; cursor moves to row 1, mid 100.5
    assert env.state.unrealized_pnl.item() == 0.5 * TICK_VALUE - 1.0
    assert env.state.time_in_trade.item() == 1
