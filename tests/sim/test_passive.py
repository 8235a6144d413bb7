"""Hand-computed resting orders: queue position, partial and through fills, the queue models,
post-only, keeping a quote, cancels in flight, the position limit, episode ends, maker fees."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from lobsurf.errors import UserError
from lobsurf.sim import BatchedLobEnv, SimConfig
from lobsurf.sim.books import random_walk_book
from tests.sim.passive_books import NO_BUY, NO_SELL, hand_book

SIZES = (1, 2, 3)
HOLD, BUY1, BUY3, SELL1, SELL3 = 0, 1, 3, 4, 6
POST_BID = {1: 7, 2: 8, 3: 9}
POST_ASK = {1: 10, 2: 11, 3: 12}
CANCEL_BID, CANCEL_ASK = 13, 14
TICK_VALUE = 0.25 * 50.0
BASE = SimConfig(window=1, stride=1, latency_rows=0, order_sizes_lots=SIZES,
                 position_limit_lots=10, max_episode_steps=100, passive_orders=True,
                 queue_model="risk_averse", fee_per_lot=1.0, fee_bps=0.0,
                 maker_fee_per_lot=-0.25, maker_fee_bps=0.0)


def run(book, actions: list[int], **changes):
    """One env from row 0 of ``book``; the results and resting orders after each action."""
    cfg = dataclasses.replace(BASE, **changes)
    env = BatchedLobEnv(book, 1, cfg)
    env.reset()
    env.state.cursor.fill_(0)
    env.state.stop.fill_(len(book))
    out = []
    for a in actions:
        result = env.step(torch.tensor([a]))
        ps = env.passive_state
        out.append((result, {f.name: getattr(ps, f.name)[0].tolist()
                             for f in dataclasses.fields(ps)}))
    return env, out


def flat_book(bid_sizes: list[int], sells: list[tuple[int, int]], buys=None,
              ask_sizes: list[int] | None = None, best_bids=None, spreads=None):
    """Rows with best bid 100 (unless given) and the given size at the touch."""
    n = len(bid_sizes)
    return hand_book(best_bids or [100] * n, [[s] for s in bid_sizes],
                     [[s] for s in (ask_sizes or [10] * n)], sells, buys or [NO_BUY] * n,
                     spreads)


def test_action_table():
    assert SimConfig().num_actions == 11 and SimConfig().action_names[-1] == "sell 5"
    assert BASE.num_actions == 15
    names = BASE.action_names
    assert [names[i] for i in (0, BUY1, SELL3, POST_BID[2], POST_ASK[3], CANCEL_BID,
                               CANCEL_ASK)] == ["hold", "buy 1", "sell 3", "post bid 2",
                                                "post ask 3", "cancel bid", "cancel ask"]
    assert BASE.signed_order_lots == (0, 1, 2, 3, -1, -2, -3) + (0,) * 8
    assert BASE.post_lots[POST_ASK[2]] == (0, 2) and BASE.cancel_sides[CANCEL_ASK] == (False, True)


def test_queue_then_partial_fills_from_the_prints_at_the_price():
    # joins behind the 5 lots shown at 100; 3 print (queue 2), 3 print (1 fills), 5 print
    book = flat_book([5, 2, 4, 7], [NO_SELL, (100, 3), (100, 3), (100, 5)])
    env, out = run(book, [POST_BID[2], HOLD, HOLD])
    (r0, p0), (r1, p1), (r2, p2) = out
    assert p0 == {"remaining": [2, 0], "price_ticks": [100, 0], "queue_ahead": [2.0, 0.0],
                  "queue_fraction": [1.0, 0.0], "age": [1, 0], "filled": [0, 0]}
    assert r0.filled_lots.item() == 0
    assert (p1["remaining"], p1["queue_ahead"], p1["filled"], p1["age"]) == ([1, 0], [0.0, 0.0],
                                                                             [1, 0], [2, 0])
    assert (r1.filled_lots.item(), r1.cash_flow_ticks.item(), r1.fees.item()) == (1, -100, -0.25)
    assert p2["remaining"] == [0, 0] and p2["filled"] == [1, 0] and p2["age"] == [0, 0]
    assert env.state.position.item() == 2
    assert env.passive_stats.maker_lots.item() == 2 and env.passive_stats.posted_lots.item() == 2
    assert env.passive_stats.maker_fees.item() == -0.5


def test_a_print_through_the_price_fills_the_whole_order_at_its_price():
    book = flat_book([20, 20], [NO_SELL, (99, 1)])  # 20 ahead, but sellers printed at 99
    env, out = run(book, [POST_BID[3]])
    assert out[0][0].filled_lots.item() == 3 and out[0][0].cash_flow_ticks.item() == -300
    assert out[0][1]["remaining"] == [0, 0]


def test_the_other_side_reaching_the_price_fills_the_whole_order():
    # an ask resting at 101 behind 30; row 1's best bid steps up to 101: it fills
    book = hand_book([100, 101], [[10], [10]], [[30], [30]], [NO_SELL] * 2, [NO_BUY] * 2)
    env, out = run(book, [POST_ASK[2]])
    assert out[0][0].filled_lots.item() == -2 and out[0][0].cash_flow_ticks.item() == 202


def _cancel_book():
    # 10 shown at 100 when the bid joins; 4 join behind it; 4 cancel; 9 print
    return flat_book([10, 14, 10, 10], [NO_SELL, NO_SELL, NO_SELL, (100, 9)])


def test_risk_averse_cancels_are_behind_the_order():
    env, out = run(_cancel_book(), [POST_BID[1], HOLD, HOLD], queue_model="risk_averse")
    assert [p["queue_ahead"][0] for _, p in out[:2]] == [10.0, 10.0]
    assert env.passive_stats.maker_lots.item() == 0  # 9 printed, 10 ahead


@pytest.mark.parametrize("power,queue", [(1, 10 - 10 / 14 * 4), (2, 10 - (10 / 14) ** 2 * 4)])
def test_probabilistic_cancels_are_ahead_with_the_share_ahead_to_a_power(power, queue):
    # the level before the cancels: 10 ahead, 4 behind; 4 cancelled: (10/14)^n x 4 ahead
    env, out = run(_cancel_book(), [POST_BID[1], HOLD, HOLD], queue_model="probabilistic",
                   queue_power=power)
    assert out[1][1]["queue_ahead"][0] == pytest.approx(queue, rel=1e-15)
    assert out[1][1]["queue_fraction"][0] == pytest.approx(queue / 10, rel=1e-15)
    assert env.passive_stats.maker_lots.item() == 1  # 9 printed, fewer than 9 ahead


def test_the_probabilistic_model_at_the_back_of_the_queue_moves_with_every_cancel():
    # nothing behind the order: every cancelled lot was ahead of it, whatever the power
    book = flat_book([10, 6], [NO_SELL, NO_SELL])
    _, out = run(book, [POST_BID[1]], queue_model="probabilistic", queue_power=5)
    assert out[0][1]["queue_ahead"][0] == 6.0


def test_the_queue_ahead_never_exceeds_the_size_shown():
    book = flat_book([10, 3, 12], [NO_SELL, NO_SELL, NO_SELL])
    _, out = run(book, [POST_BID[1], HOLD])
    assert [p["queue_ahead"][0] for _, p in out] == [3.0, 3.0]  # adds join behind it


def test_the_order_joins_behind_what_the_arrival_row_shows():
    book = flat_book([5, 9, 9], [NO_SELL] * 3)
    _, out = run(book, [POST_BID[1], HOLD], latency_rows=1)
    assert out[0][1]["queue_ahead"][0] == 9.0


def test_a_post_that_would_cross_when_it_arrives_is_refused():
    # decided at row 0 (best bid 100); at row 1 the ask is down at 100: post-only refuses it
    book = hand_book([100, 99, 99], [[5]] * 3, [[5]] * 3, [NO_SELL] * 3, [NO_BUY] * 3)
    env, out = run(book, [POST_BID[1], HOLD], latency_rows=1)
    assert out[0][1]["remaining"] == [0, 0]
    assert env.passive_stats.rejected_posts.item() == 1
    assert env.passive_stats.posted_lots.item() == 0


def test_posting_again_keeps_the_order_and_its_place():
    book = flat_book([5, 8, 8], [NO_SELL] * 3)
    _, out = run(book, [POST_BID[1], POST_BID[3]])
    assert out[1][1] == {"remaining": [1, 0], "price_ticks": [100, 0], "queue_ahead": [5.0, 0.0],
                         "queue_fraction": [5 / 8, 0.0], "age": [2, 0], "filled": [0, 0]}


def test_a_cancel_in_flight_lets_the_rows_before_it_arrives_fill():
    # the bid rests from row 1; the cancel decided at row 1 arrives at row 2 (latency 1),
    # after row 2's print through 100: the fill stands. Without latency it is gone first.
    book = flat_book([5, 5, 5, 5], [NO_SELL, NO_SELL, (99, 1), NO_SELL])
    env, _ = run(book, [POST_BID[1], CANCEL_BID], latency_rows=1)
    assert env.state.position.item() == 1
    env, out = run(book, [POST_BID[1], CANCEL_BID], latency_rows=0)
    assert env.state.position.item() == 0 and out[1][1]["remaining"] == [0, 0]


def test_the_position_limit_counts_resting_orders():
    book = flat_book([50] * 5, [NO_SELL] * 5, ask_sizes=[50] * 5)
    env, out = run(book, [POST_BID[2], BUY3, POST_ASK[3], SELL3], position_limit_lots=3)
    fills = [r.filled_lots.item() for r, _ in out]
    # buy 3 -> 1 (1 + 2 resting bid <= 3); the ask rests 3 (1 - 3 >= -3); sell 3 -> 1
    assert fills == [0, 1, 0, -1]
    assert out[2][1]["remaining"] == [2, 3] and env.state.position.item() == 0
    # a post is sized to the limit: short 2, limit 3 -> an ask of at most 1 lot
    env, out = run(book, [SELL1, SELL1, POST_ASK[3]], position_limit_lots=3)
    assert out[2][1]["remaining"] == [0, 1]


def test_the_episode_end_cancels_resting_orders_and_closes_at_market():
    book = flat_book([50] * 5, [NO_SELL] * 5, ask_sizes=[50] * 5)
    env, out = run(book, [BUY1, POST_ASK[1], POST_BID[3]], max_episode_steps=3)
    last, orders = out[2]
    assert last.episode_end.item() and last.trade_closed.item()
    assert last.filled_lots.item() == -1 and last.cash_flow_ticks.item() == 100  # at the bid
    assert orders["remaining"] == [0, 0] and env.state.position.item() == 0
    assert env.passive_stats.posted_lots.item() == 1  # the last step's post never rests


def test_a_forced_end_cancels_and_closes_like_an_episode_end():
    # the backtest's last step (force_end): a long from a filled bid and a resting ask
    book = flat_book([50] * 6, [NO_SELL, (99, 1)] + [NO_SELL] * 4, ask_sizes=[50] * 6)
    env, out = run(book, [POST_BID[1], POST_ASK[2]])
    assert env.state.position.item() == 1 and out[1][1]["remaining"] == [0, 2]
    result = env.step(torch.tensor([POST_BID[1]]), force_end=torch.tensor([True]))
    assert result.episode_end.item() and result.filled_lots.item() == -1
    assert env.passive_state.remaining.tolist() == [[0, 0]] and env.state.position.item() == 0


def test_a_step_can_close_two_trades():
    # stride 3, latency 2: bought 1 at market (101), then an ask (101) and a bid (100) rest.
    # In the last step, row 10's buyers print through the ask (trade 1 closes: 0 gross), row
    # 11's sellers through the bid (a new long), and the market sell arriving at row 11
    # closes that one at the bid (0 gross): each pays its taker fee less its maker rebate
    book = hand_book([100] * 16, [[20]] * 16, [[20]] * 16,
                     [NO_SELL] * 11 + [(99, 1)] + [NO_SELL] * 4,
                     [NO_BUY] * 10 + [(102, 1)] + [NO_BUY] * 5)
    env, out = run(book, [BUY1, POST_ASK[1], POST_BID[1], SELL1], stride=3, latency_rows=2)
    assert [r.trade_closed.item() for r, _ in out] == [False, False, False, True]
    last = out[3][0]
    assert env.stats.trades.item() == 2 and env.stats.wins.item() == 0
    assert last.reward.item() == 2 * (0.0 - (1.0 - 0.25))
    assert (last.filled_lots.item(), last.cash_flow_ticks.item()) == (-1, 101 - 100 + 100)
    assert last.fees.item() == -0.25 - 0.25 + 1.0
    assert env.state.position.item() == 0 and env.state.time_in_trade.item() == 0


def test_in_a_row_that_fills_both_orders_the_bid_is_booked_first():
    # long 2 (bought at 101), a bid of 1 and an ask of 3 rest; row 4's prints go through
    # both. Bid first: long 3, then the ask sells all 3: one trade. (Ask first would close
    # the long and open a short that the bid then closes: two trades.)
    book = hand_book([100] * 6, [[20]] * 6, [[20]] * 6,
                     [NO_SELL] * 4 + [(99, 1), NO_SELL], [NO_BUY] * 4 + [(102, 1), NO_BUY])
    env, out = run(book, [2, POST_BID[1], POST_ASK[3], HOLD])
    assert out[3][1]["filled"] == [1, 3] and env.state.position.item() == 0
    assert env.stats.trades.item() == 1
    gross = -2 * 101 - 100 + 3 * 101
    assert out[3][0].reward.item() == gross * TICK_VALUE - (2 * 1.0 - 4 * 0.25)


def test_maker_fees_and_rebates_are_charged_on_resting_fills():
    # bid filled through at 100 (rebate 0.25 + 0.1 bps), ask filled through at 101
    book = hand_book([100] * 4, [[5]] * 4, [[5]] * 4, [NO_SELL, (99, 1), NO_SELL, NO_SELL],
                     [NO_BUY, NO_BUY, (102, 1), NO_BUY])
    env, out = run(book, [POST_BID[1], POST_ASK[1]], maker_fee_bps=0.1)
    bid_fee = -0.25 + 0.1e-4 * 100 * TICK_VALUE  # price origin 0: price = ticks x 0.25
    ask_fee = -0.25 + 0.1e-4 * 101 * TICK_VALUE
    assert out[0][0].fees.item() == pytest.approx(bid_fee, rel=1e-12)
    assert out[1][0].trade_closed.item()
    assert out[1][0].reward.item() == pytest.approx(TICK_VALUE - bid_fee - ask_fee, rel=1e-12)
    assert env.passive_stats.maker_fees.item() == pytest.approx(bid_fee + ask_fee, rel=1e-12)


def test_a_price_outside_the_visible_levels_is_queued_behind_everything_until_seen():
    # decided at row 0 (bid 100); the book jumps 12 ticks up before it arrives (row 1: levels
    # 112..103), then comes back to show 100 with 7 lots
    book = hand_book([100, 112, 105, 105], [[5]] * 2 + [[5, 5, 5, 5, 5, 7]] * 2,
                     [[5]] * 4, [NO_SELL] * 4, [NO_BUY] * 4)
    _, out = run(book, [POST_BID[1], HOLD, HOLD], latency_rows=1)
    assert out[0][1]["queue_ahead"][0] == float("inf") and out[0][1]["queue_fraction"][0] == 1.0
    assert out[1][1]["queue_ahead"][0] == 7.0


def test_a_store_without_trades_is_refused_in_one_line():
    with pytest.raises(UserError, match="re-ingest") as caught:
        BatchedLobEnv(random_walk_book(50, 1), 1, BASE)
    assert "\n" not in str(caught.value)


def test_settings_are_checked():
    with pytest.raises(ValueError, match="latency_rows <= stride"):
        SimConfig(passive_orders=True, latency_rows=2, stride=1)
    with pytest.raises(ValueError, match="queue_power"):
        SimConfig(queue_power=0)
    with pytest.raises(ValueError, match="queue_model"):
        SimConfig(queue_model="fifo")
    with pytest.raises(ValueError, match="maker fees"):
        SimConfig(maker_fee_bps=float("nan"))
    assert SimConfig(maker_fee_per_lot=-0.5).maker_fee_per_lot == -0.5  # a rebate is fine
