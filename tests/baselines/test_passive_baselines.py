"""The passive baselines' actions by hand: market_maker and passive_imbalance on hand-built
books, one env per situation, and a market maker's round trip through the simulator."""

from __future__ import annotations

import math

import pytest
import torch

from lobsurf.baselines.market_maker import NEVER_QUOTES, MarketMakerParams, MarketMakerPolicy
from lobsurf.baselines.passive_imbalance import PassiveImbalancePolicy
from lobsurf.baselines.policies import (BASELINES, MARKET_BASELINES, BaselineConfig,
                                        baseline_names, make_baseline)
from lobsurf.baselines.quotes import PassiveActions, first_rule, flatten_actions
from lobsurf.sim import BatchedLobEnv, SimConfig
from tests.sim.passive_books import NO_BUY, NO_SELL, hand_book

SIZES = (1, 2, 3)
HOLD, BUY1, BUY2, SELL1, SELL2, SELL3 = 0, 1, 2, 4, 5, 6
POST_BID1, POST_ASK1, POST_ASK3 = 7, 10, 12
CANCEL_BID, CANCEL_ASK = 13, 14
TICK_VALUE = 0.25 * 50.0
SIM = SimConfig(window=1, stride=1, latency_rows=0, order_sizes_lots=SIZES,
                position_limit_lots=10, max_episode_steps=100, passive_orders=True,
                fee_per_lot=1.0, fee_bps=0.0, maker_fee_per_lot=0.0, maker_fee_bps=0.0)
# rows: 0 I = 0 (bid 100 / ask 101); 1 I = +0.5; 2 I = -0.6; 3 I = 0, the book a tick up
BOOK = hand_book([100, 100, 100, 101], [[10], [30], [10], [10]], [[10], [10], [40], [10]],
                 [NO_SELL] * 4, [NO_BUY] * 4)


def situations(cases: list[dict]) -> BatchedLobEnv:
    """One env per case: ``row`` (the cursor), ``position``, ``loss_ticks`` (the open trade's
    unrealized loss per lot), ``bid`` / ``ask`` (the resting order's price; lots 1)."""
    env = BatchedLobEnv(BOOK, len(cases), SIM)
    env.reset()
    for i, c in enumerate(cases):
        env.state.cursor[i] = c["row"]
        env.state.position[i] = c.get("position", 0)
        env.state.unrealized_pnl[i] = -c.get("loss_ticks", 0) * TICK_VALUE * abs(
            c.get("position", 0))
        for side, key in ((0, "bid"), (1, "ask")):
            if key in c:
                env.passive_state.remaining[i, side] = 1
                env.passive_state.price_ticks[i, side] = c[key]
    return env


MM_CASES = [  # (situation, expected action, why)
    (dict(row=0), POST_BID1, "flat, I = 0: the bid first"),
    (dict(row=0, bid=100), POST_ASK1, "the bid rests at the touch: now the ask"),
    (dict(row=0, bid=100, ask=101), HOLD, "both quotes at the touch"),
    (dict(row=2), POST_ASK1, "I = -0.6 < -0.5: the bid is pulled, the ask quoted"),
    (dict(row=2, bid=100, ask=101), CANCEL_BID, "I = -0.6: cancel the resting bid"),
    (dict(row=1, bid=100, ask=101), HOLD, "I = +0.5 is not beyond the pull threshold"),
    (dict(row=0, position=2), POST_ASK1, "at the inventory limit: the ask alone"),
    (dict(row=0, position=2, bid=100), CANCEL_BID, "at the limit: the bid is pulled"),
    (dict(row=0, position=-1), POST_BID1, "short: the bid, which brings it to 0, first"),
    (dict(row=0, position=1), POST_ASK1, "long: the ask first"),
    (dict(row=0, position=1, loss_ticks=3), SELL1, "the stop: 3 ticks lost per lot"),
    (dict(row=0, position=2, loss_ticks=2.9), POST_ASK1, "2.9 ticks: no stop"),
    (dict(row=0, position=-2, loss_ticks=4), BUY2, "the stop flattens a short"),
    (dict(row=3, bid=100, ask=101), CANCEL_ASK, "both off the touch, I = 0: the ask first"),
    (dict(row=3, bid=100), CANCEL_BID, "the bid is behind the touch: re-quote"),
    (dict(row=2, bid=99, ask=102), CANCEL_BID, "both off the touch, I < 0: the bid first"),
]


def test_market_maker_rules_by_hand() -> None:
    env = situations([c for c, _, _ in MM_CASES])
    params = MarketMakerParams(inventory_limit=2, pull_threshold=0.5, stop_ticks=3.0)
    got = MarketMakerPolicy(params, BaselineConfig(), env).act(env).tolist()
    for (case, want, why), action in zip(MM_CASES, got):
        assert action == want, f"{why}: {case} -> {SIM.action_names[action]}"


def test_a_market_maker_that_never_quotes_holds() -> None:
    env = situations([dict(row=r) for r in range(4)] + [dict(row=0, bid=100)])
    got = MarketMakerPolicy(NEVER_QUOTES, BaselineConfig(), env).act(env).tolist()
    assert got == [HOLD] * 4 + [CANCEL_BID]


PI_CASES = [
    (dict(row=1), POST_BID1, "flat, I = +0.5 > 0.4: join the bid"),
    (dict(row=1, bid=100), HOLD, "the entry bid rests at the touch"),
    (dict(row=0, bid=100), CANCEL_BID, "the signal went away: cancel the entry"),
    (dict(row=2), POST_ASK1, "I = -0.6: join the ask"),
    (dict(row=2, bid=100), CANCEL_BID, "the signal turned: the entry bid goes first"),
    (dict(row=0, position=1), POST_ASK1, "long, no signal: exit passively"),
    (dict(row=1, position=3), POST_ASK3, "long 3, signal still up: the exit ask of 3 lots"),
    (dict(row=2, position=1), SELL1, "long against a down signal: exit at market"),
    (dict(row=1, position=-2), BUY2, "short against an up signal: exit at market"),
    (dict(row=0, position=1, bid=100), CANCEL_BID, "long: a leftover entry bid goes"),
    (dict(row=3, position=1, ask=101), CANCEL_ASK, "the exit ask is below the touch: re-quote"),
    (dict(row=0, position=-1, bid=100, ask=101), CANCEL_ASK, "short: no ask is wanted"),
]


def test_passive_imbalance_rules_by_hand() -> None:
    env = situations([c for c, _, _ in PI_CASES])
    got = PassiveImbalancePolicy(0.4, BaselineConfig(), env).act(env).tolist()
    for (case, want, why), action in zip(PI_CASES, got):
        assert action == want, f"{why}: {case} -> {SIM.action_names[action]}"


def test_action_helpers() -> None:
    a = PassiveActions.of(SIM, 1, "x")
    assert (a.post_bid, a.post_ask, a.cancel_bid, a.cancel_ask, a.lots) == (8, 11, 13, 14, 2)
    assert [SIM.action_names[i] for i in (a.post_bid, a.post_ask, a.cancel_bid)] == [
        "post bid 2", "post ask 2", "cancel bid"]
    env = BatchedLobEnv(BOOK, 1, SIM)
    table = flatten_actions(env)  # position -10..10 -> the order towards 0
    assert [SIM.action_names[table[p + 10]] for p in (-10, -2, -1, 0, 1, 3, 4)] == [
        "buy 3", "buy 2", "buy 1", "hold", "sell 1", "sell 3", "sell 3"]
    when = torch.tensor([[True, False, False], [True, True, False]])
    assert first_rule([(when[0], 5), (when[1], torch.tensor([6, 7, 8]))],
                      torch.zeros(3)).tolist() == [5, 7, 0]


def test_they_need_passive_orders_and_join_baseline_all_only_with_them() -> None:
    market = SimConfig(window=1, latency_rows=0)
    env = BatchedLobEnv(BOOK, 1, market)
    for name in ("market_maker", "passive_imbalance"):
        with pytest.raises(ValueError, match="needs passive orders"):
            make_baseline(name, env, BaselineConfig(), torch.arange(4))
    assert baseline_names(market) == MARKET_BASELINES
    assert baseline_names(SIM) == BASELINES == MARKET_BASELINES + (
        "market_maker", "passive_imbalance", "optimal_passive")


def test_a_market_maker_round_trip_earns_the_spread() -> None:
    """Through the simulator: the bid joins behind 2 lots, sellers print 3 (it fills), the
    ask joins behind 2, buyers print 3 (it fills): one trade of one tick, maker fees 0."""
    book = hand_book([100] * 6, [[2]] * 6, [[2]] * 6,
                     [NO_SELL, NO_SELL, (100, 3), NO_SELL, NO_SELL, NO_SELL],
                     [NO_BUY, NO_BUY, NO_BUY, NO_BUY, (101, 3), NO_BUY])
    env = BatchedLobEnv(book, 1, SIM)
    env.reset()
    env.state.cursor.fill_(0)
    env.state.stop.fill_(len(book))
    policy = MarketMakerPolicy(MarketMakerParams(1, 1.0, math.inf), BaselineConfig(), env)
    actions = []
    for _ in range(5):
        actions.append(int(policy.act(env)))
        env.step(torch.tensor([actions[-1]]))
    # post bid; post ask; the bid fills (row 2), long 1: the ask rests, bid unwanted: hold;
    # hold; the ask fills at row 4: flat
    assert actions[:2] == [POST_BID1, POST_ASK1]
    assert int(env.state.position) == 0 and int(env.stats.trades) == 1
    assert float(env.stats.net_pnl) == TICK_VALUE  # 101 - 100, no fee
    assert int(env.passive_stats.maker_lots) == 2
