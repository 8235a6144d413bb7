"""The resting orders of the passive optimum (``lobsurf.baselines.optimal_passive``): a
forward pass over the sweep's schedule that lists, per env and step, the distinct resting
bids and asks the plan can hold at each decision, and what the rows of the step do to them.

Under ``risk_averse`` a one-lot order's future is a function of (its price, its queue
ahead) and the rows to come, so the states of a side at step t are the distinct (price,
queue) of the orders posted at steps 0..t-1 still unfilled (orders that meet at the same
price and queue merge). Each step follows the simulator's order of events
(lobsurf.sim.passive): the rows before the action arrives fill the resting orders; a post
joins at the decision row's best price behind the arrival row's size, refused where it
would cross; the rows after the arrival fill what rests.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lobsurf.baselines.optimal import ASK_SIDE, BID_SIDE
from lobsurf.sim.env import BatchedLobEnv
from lobsurf.sim.queue import UNSEEN_QUEUE, Row, crossing, fill_row, visible_size
from lobsurf.sim.tables import PassiveTables

#: lots of every post the plan makes
POST_LOTS = 1


@dataclass
class OrderStates:
    """The resting orders an env may hold at one decision, [B, S, 2] (side 0 the bid, 1 the
    ask; slot 0: none, and padding): lots (0 or 1), normalized price (asks negated, as
    lobsurf.sim.queue reads them), queue ahead."""

    remaining: torch.Tensor
    price: torch.Tensor
    queue: torch.Tensor

    @staticmethod
    def none(envs: int, device: torch.device) -> OrderStates:
        zero = torch.zeros(envs, 1, 2, dtype=torch.int64, device=device)
        return OrderStates(zero, zero.clone(), zero.double())


def _row(pt: PassiveTables, rows: torch.Tensor, slots: int) -> Row:
    """The normalized rows [B] as ``fill_row`` reads them, repeated for ``slots`` per env."""
    rows = rows.clamp(max=pt.last_row)

    def rep(x: torch.Tensor) -> torch.Tensor:
        return x.repeat_interleave(slots, 0)

    return Row(rep(pt.book_px[rows] * pt.side_sign), rep(pt.book_sz[rows]),
               rep(pt.trade_px[rows]), rep(pt.trade_sz[rows]))


def _meet(rem: torch.Tensor, queue: torch.Tensor, price: torch.Tensor, pt: PassiveTables,
          cursor: torch.Tensor, first: int, stop: int
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Orders [B, S, 2] through rows cursor + first .. cursor + stop - 1: (lots left, queue
    ahead, lots filled), under ``risk_averse`` (the sizes before a row do not matter)."""
    envs, slots = rem.shape[:2]
    rem, queue, price = rem.reshape(-1, 2), queue.reshape(-1, 2), price.reshape(-1, 2)
    filled = torch.zeros_like(rem)
    unused = torch.zeros_like(rem)
    for k in range(first, stop):
        f = fill_row(rem, queue, price, unused, unused.bool(), _row(pt, cursor + k, slots),
                     "risk_averse", 1)
        rem, queue, filled = f.remaining, f.queue, filled + f.filled
    shape = (envs, slots, 2)
    return rem.reshape(shape), queue.reshape(shape), filled.reshape(shape)


def _slots(env_of: torch.Tensor, price: torch.Tensor, queue: torch.Tensor, envs: int
           ) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Distinct (price, queue) per env among candidates [K] -> (slot of each candidate,
    from 1; the distinct keys [U, 3] (env, price, queue) sorted by env; slots used + 1)."""
    keys = torch.stack((env_of.double(), price.double(), queue), 1)
    if len(keys) == 0:
        return (torch.zeros(0, dtype=torch.int64, device=price.device),
                torch.zeros(0, 4, dtype=torch.float64, device=price.device), 1)
    unique, inverse = torch.unique(keys, dim=0, return_inverse=True)
    env_u = unique[:, 0].long()
    first = torch.searchsorted(env_u, torch.arange(envs, device=price.device))
    slot = torch.arange(len(unique), device=price.device) - first[env_u] + 1
    return slot[inverse], torch.cat((unique, slot[:, None].double()), 1), int(slot.max()) + 1


@dataclass
class StepTables:
    """One step's side tables, [B, S, 2] per slot (or [B, 2] for the new post): the
    rows before arrival (lots left, lots filled), the kept order's next slot and fill after
    arrival, the new post's next slot, fill and whether it can post."""

    alive: torch.Tensor
    fill_pre: torch.Tensor
    keep_next: torch.Tensor
    fill_keep: torch.Tensor
    new_next: torch.Tensor
    fill_new: torch.Tensor
    can_post: torch.Tensor
    new_price: torch.Tensor


def forward_step(env: BatchedLobEnv, cursor: torch.Tensor, last: torch.Tensor,
             active: torch.Tensor, states: OrderStates) -> tuple[StepTables, OrderStates]:
    """The side tables of one step and the order states of the next decision."""
    pt, cfg = env.tables.passive, env.cfg
    lat, stride, envs = cfg.latency_rows, cfg.stride, cursor.shape[0]
    rem_pre, q_pre, fill_pre = _meet(states.remaining, states.queue, states.price, pt, cursor,
                                     1, lat + 1)
    rem_keep, q_keep, fill_keep = _meet(rem_pre, q_pre, states.price, pt, cursor, lat + 1,
                                        stride + 1)
    decision, arrival = _row(pt, cursor, 1), _row(pt, cursor + lat, 1)
    best = decision.px[:, :, 0].long()  # [B, 2] normalized best prices the policy sees
    size, seen = visible_size(best, arrival.px, arrival.sz)
    q_new = torch.where(seen, size.double(), UNSEEN_QUEUE)
    rem_new, q_new, fill_new = _meet(torch.full_like(best, POST_LOTS)[:, None], q_new[:, None],
                                     best[:, None], pt, cursor, lat + 1, stride + 1)
    can_post = ~crossing(best, arrival.px) & (active & ~last)[:, None]
    goes_on = ~last[:, None, None]
    kept = (rem_pre > 0) & (rem_keep > 0) & goes_on
    new = can_post[:, None] & (rem_new > 0)
    slots = states.remaining.shape[1]
    env_index = torch.arange(envs, device=cursor.device)
    keep_next, new_next = torch.zeros_like(rem_keep), torch.zeros_like(rem_new)
    sides, width = [], 1
    for side in (BID_SIDE, ASK_SIDE):
        cand = torch.cat((kept[:, :, side], new[:, :, side]), 1)  # [B, S + 1]
        price = torch.cat((states.price[:, :, side], best[:, side, None]), 1)
        queue = torch.cat((q_keep[:, :, side], q_new[:, :, side]), 1)
        where = cand.nonzero()
        slot, keys, used = _slots(env_index[where[:, 0]], price[cand], queue[cand], envs)
        nxt = torch.zeros_like(cand, dtype=torch.int64)
        nxt[cand] = slot
        keep_next[:, :, side], new_next[:, :, side] = nxt[:, :slots], nxt[:, slots:]
        sides.append(keys)
        width = max(width, used)
    out = OrderStates(torch.zeros(envs, width, 2, dtype=torch.int64, device=cursor.device),
                      torch.zeros(envs, width, 2, dtype=torch.int64, device=cursor.device),
                      torch.zeros(envs, width, 2, dtype=torch.float64, device=cursor.device))
    for side, keys in enumerate(sides):
        b, s = keys[:, 0].long(), keys[:, 3].long()
        out.remaining[b, s, side] = POST_LOTS
        out.price[b, s, side] = keys[:, 1].long()
        out.queue[b, s, side] = keys[:, 2]
    step = StepTables(alive=rem_pre > 0, fill_pre=fill_pre, keep_next=keep_next,
                 fill_keep=fill_keep, new_next=new_next[:, 0], fill_new=fill_new[:, 0],
                 can_post=can_post, new_price=best)
    return step, out
