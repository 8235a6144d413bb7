"""``baseline:optimal``: the exact best net PnL a market-order trader could have made over
one sweep of the recorded book, and the policy that replays it.

The simulator's rules (``lobsurf.sim.env``, docs/sim_assumptions.md) make the problem a
finite, deterministic control problem once the sweep's schedule is fixed (which row each
env trades at each step and which steps end an episode; ``lobsurf.backtest.sweep.schedule``
and the env's own episode clock). Its state is the position p in [-L, L] lots; an action
moves it to clamp(p + order, -L, L) (0 on an episode's last step: the forced close); the
move walks the opposite side of the book at row cursor + latency_rows, level by level,
and what the visible depth cannot fill is cancelled. The simulator pays PnL per closed
trade, but every trade's net PnL is the sum of its fills' cash flows minus their fees,
and every episode ends flat, so the sweep's total net PnL is

    sum over steps of  (-sign(order) x value_ticks x tick_value - fee(filled, value)).

That sum is additive over steps, so backward induction (Bellman) over the position is
exact: V_T(p) = 0, V_t(p) = max_a [cash_t(p, a) + V_{t+1}(p'_t(p, a))]. Each step is one
vectorised update over [B envs, P = 2L + 1 positions, A actions]; the argmax table
[T, B, P] is the plan that ``OptimalPolicy`` replays inside the same sweep, so its
metrics come from the simulator itself and its net PnL equals the plan's value (up to
float rounding of the per-trade sums).

It reads the future (every row of the sweep), which no real policy can: its net PnL is
the ceiling that ``capture`` (a policy's net PnL as a fraction of it) is measured against.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lobsurf.backtest.sweep import Tiling, schedule, tile_rows
from lobsurf.data.dataset import BookTensors
from lobsurf.sim.config import SimConfig
from lobsurf.sim.env import BatchedLobEnv
from lobsurf.sim.matching import walk_levels

#: the sides of the interleaved book tables (``BatchedLobEnv.side_px``): 2 x row + side
BID_SIDE, ASK_SIDE = 0, 1


@dataclass
class SweepSchedule:
    """The sweep's steps as the simulator will take them (independent of the actions).

    Attributes:
        cursor: [T, B] int64 decision row of each env at each step.
        last: [T, B] bool the step is its episode's last (the position is closed at market).
        active: [T, B] bool the env trades at this step (parked envs are forced to Hold).
    """

    cursor: torch.Tensor
    last: torch.Tensor
    active: torch.Tensor


def sweep_schedule(book: BookTensors, tiling: Tiling, sim: SimConfig) -> SweepSchedule:
    """Follow ``lobsurf.backtest.sweep.sweep``'s schedule and the env's episode clock.

    An episode ends where the env's ``step`` says so: at a segment's end, after
    ``max_episode_steps`` steps, or where the sweep forces it (a gap, a piece's end).
    """
    steps, envs = tiling.steps, tiling.num_envs
    cursor = torch.empty(steps, envs, dtype=torch.int64, device=book.device)
    last = torch.empty(steps, envs, dtype=torch.bool, device=book.device)
    active = torch.empty(steps, envs, dtype=torch.bool, device=book.device)
    episode_steps = torch.zeros(envs, dtype=torch.int64, device=book.device)
    for t in range(steps):
        act, cur, stop, force_end = schedule(tiling, book, t)
        end = (cur + (sim.stride + sim.latency_rows) >= stop) | force_end
        end |= episode_steps >= sim.max_episode_steps - 1
        cursor[t], last[t], active[t] = cur, end, act
        episode_steps = torch.where(end, 0, episode_steps + 1)
    return SweepSchedule(cursor=cursor, last=last, active=active)


@dataclass
class OptimalPlan:
    """The DP's result for one sweep.

    Attributes:
        value: best attainable net PnL over the sweep (currency).
        env_value: [B] float64 best net PnL of each env's piece.
        actions: [T, B, P] int8 best action at step t for env b holding position p - L.
        position_limit: L, lots.
    """

    value: float
    env_value: torch.Tensor
    actions: torch.Tensor
    position_limit: int

    @property
    def steps(self) -> int:
        return int(self.actions.shape[0])


def _fill_tables(env: BatchedLobEnv, cursor: torch.Tensor, last: torch.Tensor,
                 sides: torch.Tensor, want: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # Walk 0..Q lots (want: [2B, Q+1]) on both sides (sides: [2] bid, ask) of each env's
    # fill row: filled, value [B, 2, Q+1]. Mirrors env.step: on an episode's last step the
    # deepest level can absorb any position.
    envs = cursor.shape[0]
    side_row = (2 * cursor)[:, None] + sides
    px = env.fill_px[side_row].reshape(2 * envs, -1)  # [2B, 10]
    sz = env.fill_sz[side_row].reshape(2 * envs, -1).clone()
    sz[:, -1] += last.repeat_interleave(2) * env.cfg.position_limit_lots
    filled, value = walk_levels(px, sz, want, env.strictly_upper)
    return filled.reshape(envs, 2, -1), value.reshape(envs, 2, -1)


def plan_optimal(env: BatchedLobEnv, rows: torch.Tensor, num_envs: int) -> OptimalPlan:
    """Backward induction over the position for the sweep of ``rows`` on ``num_envs`` envs.

    Args:
        env: any env over the book with the sweep's SimConfig (its tables are used).
        rows: [R0] int64 sorted decision rows, exactly as given to ``sweep``.
        num_envs: B, the sweep's ``SweepConfig.num_envs``.

    Returns:
        The plan (value, per-env values, the [T, B, P] argmax table).
    """
    sim, book = env.cfg, env.book
    if sim.num_actions > torch.iinfo(torch.int8).max:
        raise ValueError(f"the optimal plan stores actions as int8: at most 127 actions, "
                         f"got {sim.num_actions}")
    limit = sim.position_limit_lots
    tiling = tile_rows(book, rows, sim, num_envs)
    sched = sweep_schedule(book, tiling, sim)
    device = book.device
    position = torch.arange(-limit, limit + 1, device=device)  # [P]
    orders = env.order_table  # [A] signed lots of each action
    # target of (position, action) before the episode-end rule: [P, A]
    target = (position[:, None] + orders[None, :]).clamp(-limit, limit)
    per_lot, per_value_tick = env.fee_model.per_lot, env.fee_model.per_value_tick
    hold_only = torch.full((orders.shape[0],), float("-inf"), dtype=torch.float64, device=device)
    hold_only[0] = 0.0  # parked envs: the sweep replaces every action by Hold
    value_next = torch.zeros(num_envs, len(position), dtype=torch.float64, device=device)
    actions = torch.empty(tiling.steps, num_envs, len(position), dtype=torch.int8, device=device)
    # made once: the two sides, the lots walked (an order moves at most 2L lots), env index
    sides = torch.tensor([BID_SIDE, ASK_SIDE], device=device)
    want = torch.arange(2 * limit + 1, device=device).expand(2 * num_envs, -1)
    env_index = torch.arange(num_envs, device=device)[:, None, None]
    for t in range(tiling.steps - 1, -1, -1):
        last, active = sched.last[t], sched.active[t]
        filled_q, value_q = _fill_tables(env, sched.cursor[t], last, sides, want)
        tgt = torch.where(last[:, None, None], 0, target[None])  # [B, P, A]
        order = tgt - position[None, :, None]
        n, buy = order.abs(), (order > 0).long()
        filled, value = filled_q[env_index, buy, n], value_q[env_index, buy, n]  # [B, P, A]
        sign = order.sign()
        # float64 first: an int64 tensor x a Python float would compute in float32
        value_f, filled_f = value.double(), filled.double()
        cash = (-sign * value_f) * env.tick_value - (filled_f * per_lot + value_f * per_value_tick)
        reached = position[None, :, None] + sign * filled + limit  # [B, P, A] index of p'
        q = cash + value_next.gather(1, reached.reshape(num_envs, -1)).reshape(reached.shape)
        q = torch.where(active[:, None, None], q, q + hold_only)
        value_next, best = q.max(2)
        actions[t] = best.to(torch.int8)
    env_value = value_next[:, limit]  # every env starts flat
    return OptimalPlan(value=float(env_value.sum()), env_value=env_value, actions=actions,
                       position_limit=limit)


class OptimalPolicy:
    """Replays an ``OptimalPlan`` in the sweep it was planned for: at step t, env b holding
    position p takes ``plan.actions[t, b, p + L]``. The step counter wraps after the plan's
    last step, so the same policy can run the same sweep again."""

    def __init__(self, plan: OptimalPlan) -> None:
        self.plan = plan
        self.t = 0

    @property
    def value(self) -> float:
        return self.plan.value

    def act(self, env: BatchedLobEnv) -> torch.Tensor:
        table = self.plan.actions[self.t]  # [B, P]
        if env.num_envs != table.shape[0]:
            raise ValueError(f"the optimal plan is for {table.shape[0]} envs, the sweep has "
                             f"{env.num_envs}")
        index = (env.state.position + self.plan.position_limit)[:, None]
        self.t = (self.t + 1) % self.plan.steps
        return table.gather(1, index).squeeze(1).long()


def make_optimal(env: BatchedLobEnv, rows: torch.Tensor | None, num_envs: int | None
                 ) -> OptimalPolicy:
    """The optimal policy for the sweep of ``rows`` on ``num_envs`` envs (see module doc)."""
    if rows is None or num_envs is None:
        raise ValueError("baseline optimal plans over a sweep's rows: it needs a sweep "
                         "(--split heldout or all), not random cursors")
    return OptimalPolicy(plan_optimal(env, rows, num_envs))
