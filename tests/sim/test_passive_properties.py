"""Property tests (hypothesis) of resting orders: one row's fills against its prints, the
queue models' order, and the books and limits of whole runs."""

from __future__ import annotations

import dataclasses

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lobsurf.data.dataset import TRADE_NONE_SELL
from lobsurf.sim import BatchedLobEnv, SimConfig
from lobsurf.sim.queue import Row, fill_row, visible_size
from tests.sim.passive_books import queue_market
from tests.sim.test_env_reference import passive_actions

FAST = settings(max_examples=15, deadline=None)
RUNS = settings(max_examples=8, deadline=None)  # whole simulator runs: fewer examples
ENVS, STEPS = 4, 30


def random_rows(seed: int, batch: int = 64) -> tuple[torch.Tensor, ...]:
    """Random orders and one normalized row (both sides) around them."""
    g = torch.Generator().manual_seed(seed)

    def ints(lo: int, hi: int, *shape: int) -> torch.Tensor:
        return torch.randint(lo, hi, shape, generator=g)

    best = ints(95, 105, batch, 2) * torch.tensor([1, -1])  # normalized best prices
    px = best[..., None] - torch.arange(10)
    sz = ints(0, 9, batch, 2, 10)
    price = best + ints(-4, 3, batch, 2)
    trade_px = torch.where(ints(0, 3, batch, 2) == 0, TRADE_NONE_SELL, price + ints(-1, 2, batch, 2))
    row = Row(px, sz, trade_px, ints(0, 15, batch, 2))
    remaining = ints(0, 6, batch, 2)
    queue = ints(0, 12, batch, 2).double() + torch.rand(batch, 2, generator=g).round(decimals=2)
    return remaining, queue, price, row


@FAST
@given(seed=st.integers(0, 10_000), model=st.sampled_from(["risk_averse", "probabilistic"]),
       power=st.integers(1, 6))
def test_a_row_fills_no_more_than_the_prints_beyond_the_queue(seed, model, power) -> None:
    remaining, queue, price, row = random_rows(seed)
    size_before, seen_before = visible_size(price, row.px, row.sz.flip(-1))  # any prior row
    f = fill_row(remaining, queue, price, size_before, seen_before, row, model, power)
    through = (row.trade_px < price) | (-row.px[..., 0].flip(-1) <= price)
    traded = torch.where(row.trade_px == price, row.trade_sz, 0)
    assert bool(((f.filled >= 0) & (f.filled <= remaining)).all())
    assert bool((f.filled[through] == remaining[through]).all())  # a through print: all of it
    beyond = (traded - queue).clamp(min=0).floor().long()
    assert bool((f.filled[~through] <= beyond[~through]).all())
    assert bool((f.remaining == remaining - f.filled).all())
    assert bool((f.queue >= 0).all()) and bool((f.queue[f.seen] <= f.size[f.seen]).all())
    after_prints = (queue - traded).clamp(min=0)
    assert bool((f.queue <= after_prints).all())  # cancels and the clamp only move it up
    if model == "risk_averse":  # only the prints and the size shown move it
        assert torch.equal(f.queue, torch.where(f.seen, torch.minimum(after_prints, f.size),
                                                after_prints))


def _post_and_hold(cfg: SimConfig, book, side_action: int, steps: int
                   ) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Post once, then hold: (lots filled so far [B], resting lots [B, 2], queue ahead
    [B, 2]) after each step."""
    env = BatchedLobEnv(book, ENVS, cfg)
    env.reset()
    ps, out = env.passive_state, []
    for t in range(steps):
        action = side_action if t == 0 else 0
        env.step(torch.full((ENVS,), action))
        out.append((env.passive_stats.maker_lots.clone(), ps.remaining.clone(),
                    ps.queue_ahead.clone()))
    return out


@RUNS
@given(book_seed=st.integers(0, 200), power=st.integers(1, 8), stride=st.integers(1, 4),
       latency=st.integers(0, 4), side=st.sampled_from(["bid", "ask"]))
def test_risk_averse_never_fills_earlier_than_probabilistic(book_seed, power, stride, latency,
                                                            side) -> None:
    latency = min(latency, stride)
    book = queue_market(500, seed=book_seed)
    cfg = SimConfig(window=2, stride=stride, latency_rows=latency, max_episode_steps=STEPS,
                    passive_orders=True, order_sizes_lots=(5,), position_limit_lots=50,
                    queue_model="risk_averse", seed=book_seed)
    post = 3 if side == "bid" else 4
    averse = _post_and_hold(cfg, book, post, STEPS)
    hopeful = _post_and_hold(dataclasses.replace(cfg, queue_model="probabilistic",
                                                 queue_power=power), book, post, STEPS)
    for (a_lots, a_rest, a_queue), (h_lots, h_rest, h_queue) in zip(averse, hopeful):
        assert bool((a_lots <= h_lots).all())
        both = (a_rest > 0) & (h_rest > 0)  # the same order, resting under both models
        assert bool((a_queue[both] >= h_queue[both]).all())


@RUNS
@given(book_seed=st.integers(0, 200), stride=st.integers(1, 4), latency=st.integers(0, 4),
       limit=st.integers(1, 8), model=st.sampled_from(["risk_averse", "probabilistic"]),
       maker=st.sampled_from([-0.3, 0.0, 0.4]), action_seed=st.integers(0, 1000))
def test_books_and_limits_of_runs_with_resting_orders(book_seed, stride, latency, limit, model,
                                                      maker, action_seed) -> None:
    """position + resting bid <= limit and position - resting ask >= -limit every step; the
    equity identity (cash + position x mid = realized + unrealized) holds with maker fees;
    the lots filled are the market lots plus the resting lots."""
    cfg = SimConfig(window=2, stride=stride, latency_rows=min(latency, stride),
                    max_episode_steps=15, passive_orders=True, order_sizes_lots=(1, 2, 3),
                    position_limit_lots=limit, queue_model=model, fee_per_lot=0.5,
                    maker_fee_per_lot=maker, maker_fee_bps=0.1, seed=book_seed)
    book = queue_market(600, seed=book_seed)
    env = BatchedLobEnv(book, ENVS, cfg)
    env.reset()
    s, ps = env.state, env.passive_state
    tv = book.tick_size * book.multiplier
    cash = torch.zeros(ENVS, dtype=torch.int64)
    paid = torch.zeros(ENVS, dtype=torch.float64)
    for a in passive_actions(cfg, STEPS, ENVS, action_seed):
        r = env.step(a)
        assert bool((s.position + ps.remaining[:, 0] <= limit).all())
        assert bool((s.position - ps.remaining[:, 1] >= -limit).all())
        cash += r.cash_flow_ticks
        paid += r.fees
        mid2 = book.bid_px_ticks[s.cursor, 0].long() + book.ask_px_ticks[s.cursor, 0].long()
        equity = (2 * cash + s.position * mid2).double() * (tv / 2) - paid
        torch.testing.assert_close(env.stats.net_pnl + s.unrealized_pnl, equity, rtol=1e-9,
                                   atol=1e-6)
        assert bool((r.reward[~r.trade_closed] == 0).all())
    assert int(env.stats.turnover_lots.sum()) >= int(env.passive_stats.maker_lots.sum())


@RUNS
@given(book_seed=st.integers(0, 200), stride=st.integers(1, 4))
def test_always_hold_with_passive_orders_is_exactly_zero(book_seed, stride) -> None:
    cfg = SimConfig(window=2, stride=stride, latency_rows=1, passive_orders=True,
                    max_episode_steps=9, maker_fee_per_lot=-0.5)
    env = BatchedLobEnv(queue_market(300, seed=book_seed), ENVS, cfg)
    env.reset()
    for _ in range(STEPS):
        r = env.step(torch.zeros(ENVS, dtype=torch.int64))
        assert bool((r.reward == 0).all()) and bool((r.filled_lots == 0).all())
    assert int(env.passive_stats.posted_lots.sum()) == 0 and float(env.stats.fees.sum()) == 0.0
