"""``baseline:bayes``: the causal ceiling of a synthetic store, the best policy for the
generator's known law given only what an agent sees, by dynamic programming.

The state at a decision is x (the imbalance bin and the spread state at the decision row,
``bayes_model.observed_state``), the position p in [-L, L] lots and n, the steps to the
episode's last step (fixed by the sweep's schedule: a session's or piece's end, or
``max_episode_steps``; the same clock ``baseline:optimal`` follows). On an episode's last
step the simulator flattens the position; on the others an action moves it to
p' = clamp(p + order, -L, L). With the law's model (``bayes_model.LawModel``, half ticks
worth h = tick value / 2 per lot) and the fee per lot f, backward induction gives

    V_0(x, p)  = -h cost(x, -p) - f |p|
    V_n(x, p)  = max_a [ -h cost(x, p' - p) - f |p' - p| + h p' drift(x)
                         + sum_x' K(x, x') V_{n-1}(x', p') ]

where cost(x, q) walks q lots (buy_cost for q > 0, sell_cost for q < 0). The net PnL of a
sweep is the sum over steps of the fills' cost against the mid, the fees and the position
times the mid's move between fill rows (every episode ends flat), so V_n(x, 0) is the
expected net PnL of an episode of n + 1 steps that starts in x under the model. The table
of maximising actions [n, x, p] is the policy; ``BayesPolicy`` replays it in the sweep
reading only the decision row's top of book and spread, its position and the step count.

Ties go to Hold (the first action): with edge 0 the drift is exactly 0 and every trade
costs the spread and the fee, so the policy never trades.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from lobsurf.baselines.bayes_model import LawModel, law_model, law_of, observed_state
from lobsurf.baselines.optimal import sweep_schedule
from lobsurf.data.dataset import BookTensors
from lobsurf.backtest.sweep import tile_rows
from lobsurf.sim.config import SimConfig
from lobsurf.sim.env import BatchedLobEnv

#: why ``baseline:bayes`` cannot plan: real data records no generator; resting orders can
#: earn the spread that its market orders pay
NO_LAW = ("needs the law of a synthetic store (lobsurf synth, then lobsurf ingest of its "
          "folder); this store records no generator")
PASSIVE = ("plans market orders only: with sim.passive_orders a causal policy can also earn "
           "the spread it counts as paid, so it would be no ceiling")


def why_no_ceiling(book: BookTensors, sim: SimConfig) -> str | None:
    """Why ``baseline:bayes`` cannot plan on ``book`` under ``sim`` (None: it can)."""
    if book.synth is None:
        return NO_LAW
    return PASSIVE if sim.passive_orders else None


def without_bayes_where_no_ceiling(names: Sequence[str], book: BookTensors, sim: SimConfig
                                   ) -> list[str]:
    """``names`` less ``bayes``, with one line on stderr saying why, where it cannot plan
    (``why_no_ceiling``); ``names`` as they are otherwise."""
    why = why_no_ceiling(book, sim) if "bayes" in names else None
    if why is None:
        return list(names)
    print(f"lobsurf: baseline bayes left out: it {why}", file=sys.stderr)
    return [name for name in names if name != "bayes"]


@dataclass
class BayesPlan:
    """The DP's result.

    Attributes:
        actions: [N + 1, X, P] int8 best action with n steps to the episode's end, in state
            x, holding position p - L (n = 0: any, the simulator flattens).
        flat_value: [N + 1, X] float64 V_n(x, 0), expected net PnL of an episode of n + 1
            steps starting flat in x (currency).
        position_limit: L, lots.
        bins: imbalance bins of x.
    """

    actions: torch.Tensor
    flat_value: torch.Tensor
    position_limit: int
    bins: int


def plan_bayes(model: LawModel, orders: torch.Tensor, position_limit: int, horizon: int,
               half_tick_value: float, fee_per_lot: float) -> BayesPlan:
    """Backward induction of the module doc for n = 0..horizon (float64, CPU).

    Args:
        model: the law per observed state.
        orders: [A] int64 signed lots of each action (0 = Hold first).
        position_limit: L.
        horizon: the largest n needed.
        half_tick_value: currency per half tick per lot.
        fee_per_lot: currency per lot filled.
    """
    limit = position_limit
    position = torch.arange(-limit, limit + 1)
    target = (position[:, None] + orders[None, :]).clamp(-limit, limit)  # [P, A]
    order = target - position[:, None]
    buy = torch.from_numpy(model.buy_cost)  # [X, Q + 1]
    sell = torch.from_numpy(model.sell_cost)
    lots = order.abs()
    walk = torch.where(order > 0, buy[:, lots], sell[:, lots])  # [X, P, A]
    trade_cost = half_tick_value * walk + fee_per_lot * lots  # [X, P, A]
    flatten = -position
    close = torch.where(flatten > 0, buy[:, flatten.abs()], sell[:, flatten.abs()])
    value = -(half_tick_value * close + fee_per_lot * flatten.abs())  # [X, P] = V_0
    carry = half_tick_value * torch.from_numpy(model.drift)[:, None] * position  # [X, P']
    kernel = torch.from_numpy(model.transition)
    n_states = kernel.shape[0]
    actions = torch.zeros(horizon + 1, n_states, len(position), dtype=torch.int8)
    flat_value = torch.empty(horizon + 1, n_states, dtype=torch.float64)
    flat_value[0] = value[:, limit]
    for n in range(1, horizon + 1):
        ahead = carry + kernel @ value  # [X, P']: holding p' over the step, then V_{n-1}
        q = ahead[:, target + limit] - trade_cost  # [X, P, A]
        value, best = q.max(2)
        actions[n] = best.to(torch.int8)
        flat_value[n] = value[:, limit]
    return BayesPlan(actions=actions, flat_value=flat_value, position_limit=limit,
                     bins=model.bins)


def steps_to_end(last: torch.Tensor) -> torch.Tensor:
    """[T, B] int64 steps from each step to its episode's last step (0 on the last step),
    from the schedule's [T, B] bool ``last``."""
    out = torch.zeros(last.shape, dtype=torch.int64, device=last.device)
    for t in range(last.shape[0] - 2, -1, -1):
        out[t] = torch.where(last[t], 0, out[t + 1] + 1)
    return out


def book_state(book: BookTensors, rows: torch.Tensor, bins: int) -> torch.Tensor:
    """[N] int64 observed state of ``rows`` of the book (``observed_state``)."""
    spread = book.ask_px_ticks[rows, 0] - book.bid_px_ticks[rows, 0]
    return observed_state(book.bid_sz[rows, 0], book.ask_sz[rows, 0], spread, bins)


class BayesPolicy:
    """Replays a ``BayesPlan`` in the sweep it was planned for: at step t, env b with n steps
    to its episode's end, in state x, holding p takes ``actions[n, x, p + L]``. The step
    counter wraps after the sweep's last step, as ``OptimalPolicy``'s.

    Attributes:
        expected_net_pnl: the plan's expected net PnL over the sweep (the sum of V_n(x, 0)
            at every episode's first step), currency: beside the realised net PnL it shows
            how well the model of the law predicts the policy.
    """

    def __init__(self, plan: BayesPlan, remaining: torch.Tensor, expected_net_pnl: float
                 ) -> None:
        self.plan = plan
        self.remaining = remaining
        self.expected_net_pnl = expected_net_pnl
        self.t = 0

    def act(self, env: BatchedLobEnv) -> torch.Tensor:
        n = self.remaining[self.t]
        if env.num_envs != n.shape[0]:
            raise ValueError(f"the bayes plan is for {n.shape[0]} envs, the sweep has "
                             f"{env.num_envs}")
        x = book_state(env.book, env.state.cursor, self.plan.bins)
        self.t = (self.t + 1) % self.remaining.shape[0]
        return self.plan.actions[n, x, env.state.position + self.plan.position_limit].long()


def episode_starts_value(plan: BayesPlan, book: BookTensors, cursor: torch.Tensor,
                         last: torch.Tensor, active: torch.Tensor,
                         remaining: torch.Tensor) -> float:
    """Sum of V_n(x, 0) over the first steps of the sweep's episodes (``BayesPolicy``)."""
    first = torch.ones_like(last)
    first[1:] = last[:-1]
    first &= active
    x = book_state(book, cursor[first], plan.bins)
    return float(plan.flat_value[remaining[first], x].sum())


def make_bayes(env: BatchedLobEnv, rows: torch.Tensor | None, num_envs: int | None,
               bins: int, mc_rows: int) -> BayesPolicy:
    """The causal ceiling for the sweep of ``rows`` on ``num_envs`` envs (module doc).

    Raises:
        ValueError: no sweep, or no ceiling to plan (``why_no_ceiling``).
    """
    if rows is None or num_envs is None:
        raise ValueError("baseline bayes plans over a sweep's steps: it needs a sweep "
                         "(--split heldout or all), not random cursors")
    book, sim = env.book, env.cfg
    why = why_no_ceiling(book, sim)
    if why is not None:
        raise ValueError(f"baseline bayes {why}")
    law = law_of(book.synth)
    if law.tick_size_fixed != book.tick_size_fixed:
        raise ValueError(f"baseline bayes: the store's tick ({book.tick_size_fixed / 1e9:g}) "
                         f"is not its generator's ({law.tick_size_fixed / 1e9:g})")
    if sim.num_actions > torch.iinfo(torch.int8).max:
        raise ValueError(f"the bayes plan stores actions as int8: at most 127 actions, got "
                         f"{sim.num_actions}")
    limit = sim.position_limit_lots
    model = law_model(law, sim.stride, sim.latency_rows, bins, mc_rows,
                      max(limit, max(sim.order_sizes_lots)), limit)
    sched = sweep_schedule(book, tile_rows(book, rows, sim, num_envs), sim)
    remaining = steps_to_end(sched.last)
    # the bps fee at the book's mean mid (FeeModel: per lot at the origin + per tick above)
    mean_mid_ticks = float(env.mid2_ticks.double().mean()) / 2
    fee = env.fee_model.per_lot + env.fee_model.per_value_tick * mean_mid_ticks
    plan = plan_bayes(model, env.order_table.cpu(), limit, int(remaining.max()),
                      env.tick_value / 2, fee)
    plan.actions = plan.actions.to(book.device)
    plan.flat_value = plan.flat_value.to(book.device)
    expected = episode_starts_value(plan, book, sched.cursor, sched.last, sched.active,
                                    remaining)
    return BayesPolicy(plan, remaining, expected)
