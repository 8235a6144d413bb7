"""``baseline:bayes``'s dynamic programme on hand-made models: the vectorised backward
induction equals a plain-loop Bellman recursion, its values are what its policy earns over
every path of the model's chain (exact enumeration), and the steps-to-end clock counts to
each episode's last step."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from lobsurf.baselines.bayes import plan_bayes, steps_to_end
from lobsurf.baselines.bayes_model import LawModel

HALF_TICK = 6.25
FEE = 1.0


def random_model(states: int, max_lots: int, seed: int) -> LawModel:
    rng = np.random.default_rng(seed)
    kernel = rng.random((states, states)) ** 3
    kernel /= kernel.sum(1, keepdims=True)
    cost = np.cumsum(rng.random((2, states, max_lots + 1)) * 2, axis=2)
    cost[:, :, 0] = 0.0
    return LawModel(bins=1, transition=kernel, drift=rng.normal(0, 2, states),
                    buy_cost=cost[0], sell_cost=cost[1], visits=np.ones(states, np.int64),
                    rows=0)


def step_cost(model: LawModel, x: int, lots: int) -> float:
    """Execution cost (currency) of a signed order in state x: the walk plus the fee."""
    table = model.buy_cost if lots > 0 else model.sell_cost
    return HALF_TICK * float(table[x][abs(lots)]) + FEE * abs(lots)


def reference_values(model: LawModel, orders: list[int], limit: int, horizon: int
                     ) -> list[dict[tuple[int, int], float]]:
    """V_n(x, p) for n = 0..horizon by the Bellman recursion, one state at a time."""
    states = len(model.drift)
    values = [{(x, p): -step_cost(model, x, -p) for x in range(states)
               for p in range(-limit, limit + 1)}]
    for _ in range(horizon):
        before, now = values[-1], {}
        for x in range(states):
            for p in range(-limit, limit + 1):
                best = -float("inf")
                for order in orders:
                    target = min(max(p + order, -limit), limit)
                    ahead = sum(float(model.transition[x][y]) * before[y, target]
                                for y in range(states))
                    best = max(best, -step_cost(model, x, target - p)
                               + HALF_TICK * target * float(model.drift[x]) + ahead)
                now[x, p] = best
        values.append(now)
    return values


@pytest.mark.parametrize("orders,limit,seed", [
    ([0, 1, -1], 1, 0),
    ([0, 1, 2, -1, -2], 3, 1),
    ([0, 2, 5, -2, -5], 4, 2),  # orders clipped at the limit
])
def test_backward_induction_equals_the_plain_recursion(orders, limit, seed):
    model = random_model(states=4, max_lots=max(limit, 5), seed=seed)
    horizon = 5
    plan = plan_bayes(model, torch.tensor(orders), limit, horizon, HALF_TICK, FEE)
    reference = reference_values(model, orders, limit, horizon)
    for n in range(horizon + 1):
        for x in range(4):
            assert float(plan.flat_value[n, x]) == pytest.approx(reference[n][x, 0], rel=1e-12)
    # every chosen action attains the reference's maximum (n >= 1; n = 0 flattens anyway)
    for n in range(1, horizon + 1):
        for x, p in itertools.product(range(4), range(-limit, limit + 1)):
            order = orders[int(plan.actions[n, x, p + limit])]
            target = min(max(p + order, -limit), limit)
            ahead = sum(float(model.transition[x][y]) * reference[n - 1][y, target]
                        for y in range(4))
            got = (-step_cost(model, x, target - p) + HALF_TICK * target * float(model.drift[x])
                   + ahead)
            assert got == pytest.approx(reference[n][x, p], rel=1e-12, abs=1e-9)


def test_values_are_what_the_policy_earns_over_every_path():
    """Exact enumeration: following the plan from (x0, flat) with n steps to the end, the
    probability-weighted payoff over every path of the chain is V_n(x0, 0)."""
    model = random_model(states=3, max_lots=5, seed=7)
    orders, limit, horizon = [0, 1, 3, -1, -3], 3, 3
    plan = plan_bayes(model, torch.tensor(orders), limit, horizon, HALF_TICK, FEE)
    for x0 in range(3):
        expected = 0.0
        for path in itertools.product(range(3), repeat=horizon):
            states, prob, payoff, p = (x0, *path), 1.0, 0.0, 0
            for step, x in enumerate(states):
                n = horizon - step
                if n == 0:  # the last step: the simulator flattens
                    payoff -= step_cost(model, x, -p)
                    break
                target = min(max(p + orders[int(plan.actions[n, x, p + limit])], -limit), limit)
                payoff += -step_cost(model, x, target - p) + HALF_TICK * target * float(model.drift[x])
                prob *= float(model.transition[x][states[step + 1]])
                p = target
            expected += prob * payoff
        assert float(plan.flat_value[horizon, x0]) == pytest.approx(expected, rel=1e-12)


def test_no_drift_means_no_trade():
    model = random_model(states=4, max_lots=5, seed=3)
    still = LawModel(**{**model.__dict__, "drift": np.zeros(4)})
    plan = plan_bayes(still, torch.tensor([0, 1, 2, -1, -2]), 2, 6, HALF_TICK, FEE)
    assert (plan.actions[1:, :, 2] == 0).all()  # flat: Hold, every state, every horizon
    assert (plan.flat_value == 0).all()


def test_steps_to_end_counts_to_the_next_last_step():
    last = torch.tensor([[0, 1], [1, 0], [0, 0], [0, 1], [1, 1]], dtype=torch.bool)
    expected = []
    for b in range(2):
        column = []
        for t in range(5):
            ahead = next(u for u in range(t, 5) if last[u, b] or u == 4)
            column.append(ahead - t)
        expected.append(column)
    assert steps_to_end(last).t().tolist() == expected


def test_the_models_walk_is_the_simulators():
    """The cost the model charges for q lots is the simulator's walk of the same book
    (``lobsurf.sim.matching.walk_levels``), relative to the mid, for buys and sells."""
    from lobsurf.baselines.bayes_model import _walk_costs
    from lobsurf.sim.matching import walk_levels

    rng = np.random.default_rng(4)
    n, max_lots = 500, 12
    sizes = rng.integers(1, 5, (n, 10))
    sizes[:, -1] += max_lots  # the depth covers every order (as the forced close's padding)
    bid = 1_000 - np.arange(10)[None, :] - rng.integers(0, 3, (n, 1))
    ask = bid[:, :1] + rng.integers(1, 4, (n, 1)) + np.arange(10)[None, :]
    mid2 = bid[:, 0] + ask[:, 0]
    want = torch.arange(max_lots + 1).expand(n, -1)
    for px, sign in ((ask, 1), (bid, -1)):
        filled, value = walk_levels(torch.from_numpy(px), torch.from_numpy(sizes), want)
        assert (filled == want).all()
        expected = sign * (2 * value.numpy() - want.numpy() * mid2[:, None])
        assert np.array_equal(_walk_costs(px, sizes, mid2, max_lots, sign), expected)
