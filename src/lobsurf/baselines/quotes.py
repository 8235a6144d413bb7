"""What the passive baselines (``market_maker``, ``passive_imbalance``) share: the indices of
the actions that post, cancel and cross, where each env's resting orders stand against the
book it sees, and the pick of one action per env from rules in priority order.

The simulator takes one action per step (lobsurf.sim.config's table), so a policy that
wants a bid and an ask posts them on two steps, and moves a quote by cancelling it on one
step and posting it again on the next (a post on a side that rests an order keeps it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from lobsurf.baselines.imbalance import order_actions
from lobsurf.sim.config import SimConfig
from lobsurf.sim.env import BatchedLobEnv

#: action 0 of every action table
HOLD = 0


@dataclass(frozen=True)
class PassiveActions:
    """Action indices of one env's table (lobsurf.sim.config) for a passive baseline."""

    post_bid: int
    """post a bid of the quoted size at the best bid."""
    post_ask: int
    """post an ask of the quoted size at the best ask."""
    cancel_bid: int
    cancel_ask: int
    lots: int
    """the quoted size, lots."""

    @staticmethod
    def of(cfg: SimConfig, size_index: int, name: str) -> PassiveActions:
        """The actions of ``cfg`` that quote ``order_sizes_lots[size_index]`` lots; a
        ValueError naming baseline ``name`` where ``cfg`` has no passive orders."""
        if not cfg.passive_orders:
            raise ValueError(f"baseline {name} posts resting orders: it needs passive orders "
                             "(lobsurf eval --passive-orders, sim.passive_orders = true)")
        n = len(cfg.order_sizes_lots)
        if not 0 <= size_index < n:
            raise ValueError(f"size_index {size_index} outside the {n} order sizes")
        return PassiveActions(post_bid=1 + 2 * n + size_index, post_ask=1 + 3 * n + size_index,
                              cancel_bid=1 + 4 * n, cancel_ask=2 + 4 * n,
                              lots=cfg.order_sizes_lots[size_index])


class Quotes(NamedTuple):
    """Each env's resting orders against the book row it sees (the cursor), every field [B]
    bool: a bid (an ask) rests, and it rests at that row's best bid (best ask)."""

    bid: torch.Tensor
    ask: torch.Tensor
    bid_at_touch: torch.Tensor
    ask_at_touch: torch.Tensor


def quotes(env: BatchedLobEnv) -> Quotes:
    """Where ``env``'s resting orders stand (``Quotes``)."""
    ps, row = env.passive_state, env.state.cursor
    bid, ask = ps.remaining[:, 0] > 0, ps.remaining[:, 1] > 0
    best_bid = env.book.bid_px_ticks[row, 0].long()
    best_ask = env.book.ask_px_ticks[row, 0].long()
    return Quotes(bid=bid, ask=ask, bid_at_touch=bid & (ps.price_ticks[:, 0] == best_bid),
                  ask_at_touch=ask & (ps.price_ticks[:, 1] == best_ask))


def flatten_actions(env: BatchedLobEnv) -> torch.Tensor:
    """[2L + 1] int64 table: entry L + p is the market order that moves a position of p lots
    towards 0 (the largest order size <= |p|; Hold at p = 0), L the position limit."""
    limit = env.cfg.position_limit_lots
    return order_actions(env.cfg.order_sizes_lots, limit, env.device).flip(0)


def first_rule(rules: Sequence[tuple[torch.Tensor, torch.Tensor | int]], like: torch.Tensor
               ) -> torch.Tensor:
    """[B] int64: per env, the action of the first rule (when [B] bool, action [B] or int)
    that applies, Hold where none does; ``like`` gives the device and size."""
    out = torch.full_like(like, HOLD, dtype=torch.int64)
    for when, action in reversed(rules):
        out = torch.where(when, action, out)
    return out
