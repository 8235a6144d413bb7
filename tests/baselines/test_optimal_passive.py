"""``baseline:optimal_passive``: the DP's value equals brute force over every action sequence
on tiny books (the simulator runs each sequence), its replay in the sweep earns the plan's
value over pieces, gaps and episode ends, and it is at least the market-order optimum."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from lobsurf.baselines.optimal import make_optimal
from lobsurf.baselines.optimal_passive import (plan_actions, make_optimal_passive,
                                               plan_optimal_passive)
from lobsurf.backtest.metrics import compute_metrics
from lobsurf.backtest.sweep import SweepConfig, sweep
from lobsurf.sim import BatchedLobEnv, SimConfig
from tests.sim.passive_books import queue_market

BOOK = queue_market(1200, 11, segments=2, move_prob=0.15)  # sessions [0, 600), [600, 1200)


def brute_force(sim: SimConfig, start: int, steps: int) -> tuple[float, float]:
    """(best net PnL over every sequence of the plan's actions, best over market orders
    only) of ``steps`` decisions from ``start``, each sequence in its own env."""
    actions = [a for a, *_ in plan_actions(BatchedLobEnv(BOOK, 1, sim))]
    sequences = torch.tensor(list(itertools.product(actions, repeat=steps)))
    env = BatchedLobEnv(BOOK, len(sequences), sim)
    env.reset()
    env.state.cursor.fill_(start)
    env.state.stop.fill_(600 * (1 + start // 600))
    for t in range(steps):
        env.step(sequences[:, t], force_end=torch.full((len(sequences),), t == steps - 1))
    market = (sequences < 1 + 2 * len(sim.order_sizes_lots)).all(1)
    return float(env.stats.net_pnl.max()), float(env.stats.net_pnl[market].max())


CASES = {  # name: (stride, latency, sizes, limit, maker fee per lot, steps)
    "s1-l0": (1, 0, (1,), 1, -0.5, 5),
    "s3-l1": (3, 1, (1,), 2, 0.5, 5),
    "s2-l2-two-sizes": (2, 2, (1, 2), 2, -2.0, 4),
    "s4-l1-rebate": (4, 1, (2, 1), 3, -4.0, 4),
    "s1-l0-at-the-limit": (1, 0, (1,), 1, -20.0, 5),  # rebates worth holding at the limit
    "s1-l0-limit-1": (1, 0, (1,), 1, -3.0, 5),  # market orders clipped by a resting order
}
#: decision rows where a resting order beats every market-order sequence in some case
STARTS = (57, 71, 196, 470, 871, 1102)


def check_against_brute_force(name: str, start: int) -> tuple[float, float]:
    stride, latency, sizes, limit, maker, steps = CASES[name]
    sim = SimConfig(window=1, stride=stride, latency_rows=latency, order_sizes_lots=sizes,
                    position_limit_lots=limit, max_episode_steps=100, passive_orders=True,
                    fee_per_lot=1.0, fee_bps=0.0, maker_fee_per_lot=maker, maker_fee_bps=0.1,
                    queue_model="risk_averse")
    rows = torch.arange(start, start + stride * (steps - 1) + 1)
    plan = plan_optimal_passive(BatchedLobEnv(BOOK, 1, sim), rows, 1)
    assert len(plan.steps) == steps
    best, best_market = brute_force(sim, start, steps)
    assert plan.value == pytest.approx(best, rel=1e-9, abs=1e-9)
    return best, best_market


@pytest.mark.parametrize("name,start,posting_pays", [
    ("s1-l0", 470, True), ("s3-l1", 196, True), ("s1-l0-at-the-limit", 470, True),
    ("s1-l0-at-the-limit", 71, False), ("s1-l0-limit-1", 57, True)])
def test_the_plan_equals_brute_force(name: str, start: int, posting_pays: bool) -> None:
    best, best_market = check_against_brute_force(name, start)
    assert (best > best_market) == posting_pays  # where posting pays, the plan must find it


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("start", STARTS)
def test_the_plan_equals_brute_force_everywhere(name: str, start: int) -> None:
    check_against_brute_force(name, start)


SWEEP = SimConfig(window=4, stride=3, latency_rows=1, order_sizes_lots=(1, 2),
                  position_limit_lots=3, max_episode_steps=15, passive_orders=True,
                  fee_per_lot=1.0, fee_bps=0.0, maker_fee_per_lot=-0.3, maker_fee_bps=0.2,
                  queue_model="risk_averse")  # the queue the passive optimum plans for
ROWS = torch.cat([torch.arange(10, 150), torch.arange(170, 600), torch.arange(700, 900)])


class Checked:
    """The replay, each action checked against the plan read with plain loops: the slot of
    each resting order is the state with its exact price and queue ahead."""

    def __init__(self, policy) -> None:
        self.policy, self.t, self.checked = policy, 0, 0

    def act(self, env: BatchedLobEnv) -> torch.Tensor:
        plan = self.policy.plan
        states, step = plan.states[self.t], plan.steps[self.t]
        got = self.policy.act(env)
        for b in range(env.num_envs):
            slots = []
            for side, sign in ((0, 1), (1, -1)):
                slot = 0
                if int(env.passive_state.remaining[b, side]) > 0:
                    price = sign * int(env.passive_state.price_ticks[b, side])
                    queue = float(env.passive_state.queue_ahead[b, side])
                    found = [s for s in range(states.price.shape[1])
                             if int(states.remaining[b, s, side]) > 0
                             and int(states.price[b, s, side]) == price
                             and float(states.queue[b, s, side]) == queue]
                    assert len(found) == 1, (self.t, b, side, found)
                    slot = found[0]
                    self.checked += 1
                slots.append(slot)
            width, p = int(step.width[b]), 2 * plan.position_limit + 1
            cell = (slots[0] * width + slots[1]) * p + int(env.state.position[b])
            assert int(got[b]) == int(step.actions[int(step.offset[b]) + cell + plan.position_limit])
        self.t += 1
        return got


def test_the_replay_earns_the_plan_over_pieces_gaps_and_episode_ends() -> None:
    env = BatchedLobEnv(BOOK, 1, SWEEP)
    policy, market = make_optimal_passive(env, ROWS, 5), make_optimal(env, ROWS, 5)
    checked = Checked(policy)
    records, _ = sweep(BOOK, ROWS, {"passive": checked, "market": market}, SWEEP, SweepConfig(5))
    assert checked.checked > 10  # resting orders were looked up
    got = compute_metrics(records["passive"])
    assert got["net_pnl"] == pytest.approx(policy.value, rel=1e-9)
    assert policy.value > market.value == pytest.approx(compute_metrics(records["market"])["net_pnl"])
    assert got["maker_lots"] > 0 and got["trades"] > 5
    again, _ = sweep(BOOK, ROWS, {"passive": policy}, SWEEP, SweepConfig(5))
    assert compute_metrics(again["passive"])["net_pnl"] == got["net_pnl"]


def test_what_it_refuses() -> None:
    import dataclasses

    for changes, match in (({"queue_model": "probabilistic"}, "risk_averse"),
                           ({"passive_orders": False}, "passive orders"),
                           ({"order_sizes_lots": (2, 3)}, "must include 1")):
        env = BatchedLobEnv(BOOK, 1, dataclasses.replace(SWEEP, **changes))
        with pytest.raises(ValueError, match=match):
            make_optimal_passive(env, ROWS, 5)
    with pytest.raises(ValueError, match="needs a sweep"):
        make_optimal_passive(BatchedLobEnv(BOOK, 1, SWEEP), None, None)


def test_it_bounds_every_baseline_that_posts_one_lot() -> None:
    """On its sweep the passive optimum earns at least the market-order optimum (so every
    market-order policy) and the passive baselines (one-lot posts), with a maker rebate
    that makes posting pay."""
    from lobsurf.baselines.market_maker import MarketMakerParams, MarketMakerPolicy
    from lobsurf.baselines.policies import BaselineConfig, make_baselines

    env = BatchedLobEnv(BOOK, 1, SWEEP)
    rows = torch.arange(610, 900)
    cfg = BaselineConfig(imbalance_threshold=0.3, passive_imbalance_threshold=0.2)
    names = ("imbalance", "optimal", "passive_imbalance", "optimal_passive")
    policies = make_baselines(names, env, cfg, None, rows, 5)
    policies["market_maker"] = MarketMakerPolicy(MarketMakerParams(2, 1.0, math.inf), cfg, env)
    records, _ = sweep(BOOK, rows, policies, SWEEP, SweepConfig(5))
    pnl = {name: compute_metrics(r)["net_pnl"] for name, r in records.items()}
    for name in ("market_maker", "passive_imbalance"):  # they did post and fill
        assert compute_metrics(records[name])["maker_lots"] > 0, name
    best = pnl.pop("optimal_passive")
    assert best == pytest.approx(policies["optimal_passive"].value, rel=1e-9)
    assert all(best >= v - 1e-9 for v in pnl.values()), (best, pnl)
    assert best > pnl["optimal"]


def test_the_replay_tells_orders_at_one_price_apart_by_their_queue() -> None:
    """Where two states of a side rest at the same price with different queues ahead and the
    plan acts differently in them, the replay takes the action of the one the env holds."""
    env = BatchedLobEnv(BOOK, 5, SWEEP)
    policy = make_optimal_passive(env, ROWS, 5)
    plan, p = policy.plan, 2 * policy.plan.position_limit + 1
    found = 0
    for t, (states, step) in enumerate(zip(plan.states, plan.steps)):
        for b in range(5):
            width, offset = int(step.width[b]), int(step.offset[b])
            table = step.actions[offset:offset + width * width * p].reshape(width, width, p)
            bids = [s for s in range(1, width) if int(states.remaining[b, s, 0]) > 0]
            for s1, s2 in itertools.combinations(bids, 2):
                same_price = int(states.price[b, s1, 0]) == int(states.price[b, s2, 0])
                flat = plan.position_limit
                if not same_price or int(table[s1, 0, flat]) == int(table[s2, 0, flat]):
                    continue
                for slot in (s1, s2):  # the env holds this bid, nothing on the ask, flat
                    env.passive_state.remaining.zero_()
                    env.passive_state.remaining[b, 0] = 1
                    env.passive_state.price_ticks[b, 0] = int(states.price[b, slot, 0])
                    env.passive_state.queue_ahead[b, 0] = float(states.queue[b, slot, 0])
                    env.state.position.zero_()
                    policy.t = t
                    assert int(policy.act(env)[b]) == int(table[slot, 0, flat])
                found += 1
    assert found > 0  # the sweep has such pairs to tell apart
