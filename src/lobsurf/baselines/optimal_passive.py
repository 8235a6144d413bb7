"""``baseline:optimal_passive``: the exact best net PnL over one sweep of the policies that
trade market orders and post one-lot resting orders, under the ``risk_averse`` queue model,
and the policy that replays it.

Under ``risk_averse`` a resting order's fills are fixed by the data: its queue ahead starts
at the size its arrival row shows and shrinks only by the prints at its price
(lobsurf.sim.queue), so an order's future is a function of (its price, its queue ahead)
and the rows to come. With one-lot posts an order fills whole or not at all, and the
state of a decision is

    (position p in [-L, L], the resting bid: none or (price, queue), the resting ask: the same).

Every order that may rest at step t was posted at some earlier step of the episode, so the
states a side can be in at step t are the distinct (price, queue) of the orders posted at
steps 0..t-1 still unfilled (a forward pass over the sweep's schedule enumerates them, per
env; orders that meet at the same price and queue merge). On the bundled market at one
decision every 10 rows the busiest env holds 32 per side at a step on average, 52 at most
(docs/ceilings.md). The net PnL of a sweep is additive over steps (every episode ends
flat: the sum of the fills' cash flows minus their fees, maker and taker), so backward
induction over (p, bid, ask) is exact, as for ``baseline:optimal``: each step follows the
simulator's order of events (lobsurf.sim.passive: the rows before the action arrives fill
the resting orders, then a cancel or the market order, clipped by the position limit
counting the resting orders, or a post at the decision row's best price behind the
arrival row's size, refused where it would cross, then the rows after it;
``lobsurf.baselines.optimal_passive_states``).

Time: the bundled market's held-out session at one decision every 10 rows (157 steps of
64 envs) plans in about 1.5 minutes on a 2-core CPU (docs/ceilings.md).

The actions it plans over: Hold, every market order, Post bid and Post ask of one lot,
Cancel bid, Cancel ask (larger posts are left out: the plan is the optimum of the
policies whose posts are one lot, e.g. ``market_maker`` and ``passive_imbalance`` at their
default size, and of every market-order policy, so it is >= ``optimal``). It reads the
future: a ceiling, like ``optimal``, not a strategy.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from lobsurf.backtest.sweep import tile_rows
from lobsurf.baselines.optimal import (ASK_SIDE, BID_SIDE, market_fill_tables,
                                       sweep_schedule)
from lobsurf.baselines.optimal_passive_states import (POST_LOTS, OrderStates, StepTables,
                                                      forward_step)
from lobsurf.sim.config import SimConfig
from lobsurf.sim.env import BatchedLobEnv

#: envs whose step the backward induction computes at once (grouped by how many states
#: they hold, so few pad to the busiest env's count)
CHUNK_ENVS = 8


def why_no_passive_optimum(sim: SimConfig) -> str | None:
    """Why ``baseline:optimal_passive`` cannot plan under ``sim`` (None: it can)."""
    if not sim.passive_orders:
        return "needs passive orders (lobsurf eval --passive-orders)"
    if sim.queue_model != "risk_averse":
        return ("needs the risk_averse queue model: under the probabilistic one a resting "
                "order's queue is an expectation, not fixed by the data")
    if POST_LOTS not in sim.order_sizes_lots:
        return f"posts {POST_LOTS} lot: the order sizes must include {POST_LOTS}"
    return None


def passive_ceiling_note(swept: bool) -> str:
    """What the ceilings of a sweep with passive orders cover (``swept``: optimal_passive
    was planned), as ``lobsurf eval`` says it under its table."""
    head = "optimal is the exact optimum of market orders"
    if swept:
        return (f"{head}; optimal_passive that of market orders and one-lot resting orders "
                "(risk_averse queue; capture_passive is the share of it); larger resting "
                "orders are outside both (docs/ceilings.md)")
    return (f"{head}; resting orders can earn the spread it pays, and no ceiling of trading "
            "with them is computed here (docs/ceilings.md)")


def without_passive_optimum_where_none(names: Sequence[str], sim: SimConfig) -> list[str]:
    """``names`` less ``optimal_passive``, with one line on stderr saying why, where it cannot
    plan under ``sim`` (``why_no_passive_optimum``); ``names`` as they are otherwise."""
    why = why_no_passive_optimum(sim) if "optimal_passive" in names else None
    if why is None:
        return list(names)
    print(f"lobsurf: baseline optimal_passive left out: it {why}", file=sys.stderr)
    return [name for name in names if name != "optimal_passive"]


@dataclass
class StepPlan:
    """The best actions of one step, env by env: env b's block of ``actions`` starts at
    ``offset[b]`` and holds [W_b, W_b, P] int8 (the bid's slot, the ask's slot, position +
    L), W_b = ``width[b]``. Blocks, not one [B, S, S, P] table: the envs hold few states
    but the busiest one many, and padding every env to it would cost its square."""

    actions: torch.Tensor
    offset: torch.Tensor
    width: torch.Tensor


@dataclass
class PassivePlan:
    """The DP's result for one sweep.

    Attributes:
        value: best attainable net PnL over the sweep (currency).
        env_value: [B] float64 of each env's piece.
        states: per step, the order states of its decision (``OrderStates``).
        steps: per step, the best actions (``StepPlan``).
        position_limit: L.
    """

    value: float
    env_value: torch.Tensor
    states: list[OrderStates]
    steps: list[StepPlan]
    position_limit: int


class _Money:
    """Cash of fills in currency: market orders at the taker fee, resting orders at the
    maker fee (``FeeModel``: per lot + per tick x lot of value)."""

    def __init__(self, env: BatchedLobEnv) -> None:
        self.tick_value = env.tick_value
        self.taker, self.maker = env.fee_model, env.maker_fee_model

    def resting(self, lots: torch.Tensor, price_raw: torch.Tensor, sign: int) -> torch.Tensor:
        """Cash of ``lots`` of a resting bid (sign +1, pays) or ask (sign -1) at its price."""
        lots_f, value = lots.double(), (lots * price_raw).double()
        fee = lots_f * self.maker.per_lot + value * self.maker.per_value_tick
        return (-sign * value) * self.tick_value - fee

    def market(self, sign: torch.Tensor, filled: torch.Tensor, value: torch.Tensor
               ) -> torch.Tensor:
        value_f, filled_f = value.double(), filled.double()
        fee = filled_f * self.taker.per_lot + value_f * self.taker.per_value_tick
        return (-sign * value_f) * self.tick_value - fee


def plan_actions(env: BatchedLobEnv) -> list[tuple[int, str, int]]:
    """(action index, what it does, its signed market lots or its side) of every action the
    plan considers: "market" (Hold is 0 lots), "post" one lot or "cancel" on a side."""
    sizes = env.cfg.order_sizes_lots
    n, one = len(sizes), sizes.index(POST_LOTS)
    out = [(0, "market", 0)]
    out += [(1 + i, "market", s) for i, s in enumerate(sizes)]
    out += [(1 + n + i, "market", -s) for i, s in enumerate(sizes)]
    out += [(1 + 2 * n + one, "post", BID_SIDE), (1 + 3 * n + one, "post", ASK_SIDE),
            (1 + 4 * n, "cancel", BID_SIDE), (2 + 4 * n, "cancel", ASK_SIDE)]
    return out


def _lookup(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """table [B, ...] flattened per env, read at index [B, ...] (flat per env)."""
    envs = table.shape[0]
    return table.reshape(envs, -1).gather(1, index.reshape(envs, -1)).reshape(index.shape)


def _backward(env: BatchedLobEnv, money: _Money, step: StepTables, states: OrderStates,
              value_next: torch.Tensor, last: torch.Tensor, active: torch.Tensor,
              walks: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """V_t [B, S, S, P] and the best actions [B, S, S, P] of one step (module docstring):
    dim 1 the bid's slot, dim 2 the ask's, dim 3 the position + L.

    In a state that can be reached (position + resting bid <= L, position - resting ask
    >= -L: posts and market orders keep to it) Hold, a post and a cancel send no market
    order, so only the market orders walk the book; the other states' values are never
    read."""
    limit, device = env.cfg.position_limit_lots, states.price.device
    envs, slots = states.price.shape[:2]
    width = 2 * limit + 1
    shape = (envs, slots, slots, width)
    sign = (1, -1)  # a filled bid adds to the position, a filled ask takes from it

    def on(x: torch.Tensor, s: int) -> torch.Tensor:
        """[B, S] of side s -> broadcast over the state grid (its slot's dim)."""
        return x[:, :, None, None] if s == BID_SIDE else x[:, None, :, None]

    def at(x: torch.Tensor) -> torch.Tensor:
        """[B] -> broadcast over the state grid."""
        return x[:, None, None, None]

    raw = [states.price[..., s] * sign[s] for s in (0, 1)]  # [B, S] prices in ticks
    alive = [on(step.alive[..., s].long(), s) for s in (0, 1)]
    position = torch.arange(-limit, limit + 1, device=device)[None, None, None, :]
    pos_pre = position + on(step.fill_pre[..., 0], 0) - on(step.fill_pre[..., 1], 1)
    base = sum(on(money.resting(step.fill_pre[..., s], raw[s], sign[s]), s) for s in (0, 1))
    # a kept order after arrival (none where it filled before): next slot, signed fill, cash
    keep = [(on(torch.where(step.alive[..., s], step.keep_next[..., s], 0), s),
             on(torch.where(step.alive[..., s], step.fill_keep[..., s], 0), s) * sign[s],
             on(torch.where(step.alive[..., s],
                            money.resting(step.fill_keep[..., s], raw[s], sign[s]), 0.0), s))
            for s in (0, 1)]
    new = [(at(step.new_next[:, s]), at(step.fill_new[:, s]) * sign[s],
            at(money.resting(step.fill_new[:, s], step.new_price[:, s] * sign[s], sign[s])),
            at(step.can_post[:, s])) for s in (0, 1)]
    # a market order of m = -2L..2L lots at the arrival row: signed lots filled, its cash
    filled_q, value_q = walks
    lots = torch.arange(-2 * limit, 2 * limit + 1, device=device)
    walk = ((lots > 0).long() * filled_q.shape[-1] + lots.abs()).expand(envs, -1)
    direction = lots.sign()
    filled = _lookup(filled_q, walk)
    market_cash = money.market(direction, filled, _lookup(value_q, walk))
    market_lots = direction * filled
    sn = value_next.shape[1]

    def value(bid: tuple, ask: tuple, order: torch.Tensor | None) -> torch.Tensor:
        """cash + V_{t+1} with the bid and ask sides' (next slot, signed fill, cash) after
        arrival and a market order of ``order`` lots ([B, S, S, P]; None: none)."""
        pos_end, cash = pos_pre + bid[1] + ask[1], base + bid[2] + ask[2]
        if order is not None:
            index = order + 2 * limit
            pos_end = pos_end + _lookup(market_lots, index)
            cash = cash + _lookup(market_cash, index)
        cell = (bid[0] * sn + ask[0]) * width + pos_end.clamp(-limit, limit) + limit
        return cash + _lookup(value_next, cell.expand(shape))

    none = (0, 0, 0.0)
    best = torch.full(shape, -torch.inf, dtype=torch.float64, device=device)
    choice = torch.zeros(shape, dtype=torch.int64, device=device)
    for index, kind, arg in plan_actions(env):
        if kind == "market":  # clipped so position + resting bid <= L >= resting ask - position
            target = torch.minimum(pos_pre + arg, limit - alive[0])
            order = torch.maximum(target, alive[1] - limit) - pos_pre
            q = value(keep[0], keep[1], order.expand(shape))
        elif kind == "cancel":
            q = value(none, keep[1], None) if arg == BID_SIDE else value(keep[0], none, None)
        else:  # a post joins where that side rests nothing after the rows before arrival
            slot, fill, cash, can_post = new[arg]
            room = limit - pos_pre if arg == BID_SIDE else limit + pos_pre
            joins = (alive[arg] == 0) & can_post & (room >= POST_LOTS)
            kept = keep[arg]
            side = (torch.where(joins, slot, kept[0]), torch.where(joins, fill, kept[1]),
                    torch.where(joins, cash, kept[2]))
            q = value(side, keep[1], None) if arg == BID_SIDE else value(keep[0], side, None)
        if index != 0:  # parked envs hold
            q = torch.where(at(active), q, -torch.inf)
        better = q > best  # ties keep the earlier action (Hold first)
        best, choice = torch.where(better, q, best), torch.where(better, index, choice)
    # the episode's last step: both orders cancelled, the position closed at market
    ended = value(none, none, (-pos_pre).expand(shape))
    return torch.where(at(last), ended, best), torch.where(at(last), 0, choice)


def plan_optimal_passive(env: BatchedLobEnv, rows: torch.Tensor, num_envs: int) -> PassivePlan:
    """Backward induction over (position, resting bid, resting ask) for the sweep of
    ``rows`` on ``num_envs`` envs (module docstring).

    Args:
        env: an env over the book with the sweep's SimConfig (passive orders on,
            ``risk_averse``, one-lot orders among the sizes).
        rows: [R0] int64 sorted decision rows, exactly as given to ``sweep``.
        num_envs: B, the sweep's number of envs.
    """
    cfg, book = env.cfg, env.book
    why = why_no_passive_optimum(cfg)
    if why is not None:
        raise ValueError(f"baseline optimal_passive {why}")
    if cfg.num_actions > torch.iinfo(torch.int8).max:
        raise ValueError(f"the plan stores actions as int8: at most 127, got {cfg.num_actions}")
    tiling = tile_rows(book, rows, cfg, num_envs)
    sched = sweep_schedule(book, tiling, cfg)
    states = [OrderStates.none(num_envs, book.device)]
    steps = []
    for t in range(tiling.steps):
        step, nxt = forward_step(env, sched.cursor[t], sched.last[t], sched.active[t], states[-1])
        steps.append(step)
        states.append(nxt)
    money, limit = _Money(env), cfg.position_limit_lots
    sides = torch.tensor([BID_SIDE, ASK_SIDE], device=book.device)
    want = torch.arange(2 * limit + 1, device=book.device).expand(2 * num_envs, -1)
    value = torch.zeros(num_envs, 1, 1, 2 * limit + 1, dtype=torch.float64, device=book.device)
    plans: list[StepPlan] = []
    for t in range(tiling.steps - 1, -1, -1):
        walks = market_fill_tables(env, sched.cursor[t], sched.last[t], sides, want)
        value, plan = _backward_in_chunks(env, money, steps[t], states[t], value, sched.last[t],
                                          sched.active[t], walks)
        plans.append(plan)
    env_value = value[:, 0, 0, limit]  # every env starts flat, nothing resting
    return PassivePlan(value=float(env_value.sum()), env_value=env_value, states=states[:-1],
                       steps=plans[::-1], position_limit=limit)


def _backward_in_chunks(env: BatchedLobEnv, money: _Money, step: StepTables, states: OrderStates,
                        value_next: torch.Tensor, last: torch.Tensor, active: torch.Tensor,
                        walks: tuple[torch.Tensor, torch.Tensor]
                        ) -> tuple[torch.Tensor, StepPlan]:
    """``_backward`` over chunks of ``CHUNK_ENVS`` envs of similar width (the states they
    hold), each padded to its own widest: V_t [B, S, S, P] and the step's plan."""
    envs, slots = states.remaining.shape[:2]
    width = (states.remaining > 0).sum(1).max(1).values + 1  # [B] slots in use, none included
    order = torch.argsort(width)
    value = torch.zeros(envs, slots, slots, value_next.shape[-1], dtype=torch.float64,
                        device=width.device)
    offset = torch.zeros(envs, dtype=torch.int64, device=width.device)
    blocks, start = [], 0
    for chunk in order.split(CHUNK_ENVS):
        w = int(width[chunk].max())  # host read: the chunk's shape
        part = StepTables(**{k: (v[chunk, :w] if v.dim() == 3 else v[chunk])
                        for k, v in vars(step).items()})
        own = OrderStates(states.remaining[chunk, :w], states.price[chunk, :w],
                          states.queue[chunk, :w])
        v, best = _backward(env, money, part, own, value_next[chunk], last[chunk],
                            active[chunk], (walks[0][chunk], walks[1][chunk]))
        value[chunk, :w, :w] = v
        block = best[0].numel()
        offset[chunk] = start + block * torch.arange(len(chunk), device=width.device)
        blocks.append(best.to(torch.int8).reshape(-1))
        start += block * len(chunk)
        width[chunk] = w
    return value, StepPlan(actions=torch.cat(blocks), offset=offset, width=width)


class OptimalPassivePolicy:
    """Replays a ``PassivePlan`` in the sweep it was planned for: at step t, env b finds the
    slots of its resting bid and ask among the plan's states (by price and queue ahead) and
    takes the plan's action for them and its position. The step counter wraps after the
    last step, so the same policy can run the same sweep again."""

    def __init__(self, plan: PassivePlan) -> None:
        self.plan, self.t = plan, 0
        self.sign = torch.tensor([1, -1], device=plan.env_value.device)

    @property
    def value(self) -> float:
        return self.plan.value

    def act(self, env: BatchedLobEnv) -> torch.Tensor:
        states, step = self.plan.states[self.t], self.plan.steps[self.t]
        if env.num_envs != step.width.shape[0]:
            raise ValueError(f"the plan is for {step.width.shape[0]} envs, the sweep has "
                             f"{env.num_envs}")
        ps = env.passive_state
        price = ps.price_ticks * self.sign
        match = ((states.remaining > 0) & (states.price == price[:, None])
                 & (states.queue == ps.queue_ahead[:, None]))  # [B, S, 2]
        slot = torch.where(ps.remaining > 0, match.long().argmax(1), 0)  # [B, 2]
        position = env.state.position + self.plan.position_limit
        self.t = (self.t + 1) % len(self.plan.steps)
        cell = (slot[:, 0] * step.width + slot[:, 1]) * (2 * self.plan.position_limit + 1)
        return step.actions[step.offset + cell + position].long()


def make_optimal_passive(env: BatchedLobEnv, rows: torch.Tensor | None, num_envs: int | None
                         ) -> OptimalPassivePolicy:
    """The passive optimum for the sweep of ``rows`` on ``num_envs`` envs (module docstring)."""
    if rows is None or num_envs is None:
        raise ValueError("baseline optimal_passive plans over a sweep's rows: it needs a sweep "
                         "(--split heldout or all), not random cursors")
    return OptimalPassivePolicy(plan_optimal_passive(env, rows, num_envs))
