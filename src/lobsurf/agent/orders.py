"""The resting orders as the agent sees them (``sim.passive_orders``): per side, what is
left of its order, its place in the queue and its age; read from the simulator's
``PassiveState``, stored in replay beside the position (lobsurf.agent.transitions), and
turned into network inputs of order 1 beside the position, time in trade and PnL.

Per side (bid, then ask) three inputs join the agent's own state ([B, 3] -> [B, 9]):

* remaining lots / the position unit (0: nothing rests on that side);
* the queue ahead as a fraction of the size shown at its price (``queue_fraction``: 0 at
  the front, 1 at the back or while its price is out of view; 0 where nothing rests);
* its age, scaled as time in trade: log1p(steps) / log1p(state_time_scale_steps).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from lobsurf.agent.config import NetworkConfig
from lobsurf.sim.state import PassiveState

#: network inputs the resting orders add to the agent's state (three a side)
NUM_ORDER_FEATURES = 6


class RestingOrders(NamedTuple):
    """The agent's view of its resting orders, each [B, 2] (side 0 the bid, 1 the ask):
    lots int64 still resting (0: none), queue_fraction float32 (PassiveState's), age int64
    steps it has rested."""

    lots: torch.Tensor
    queue_fraction: torch.Tensor
    age: torch.Tensor


def resting_orders(ps: PassiveState) -> RestingOrders:
    """Copies of what the agent sees of ``ps`` (the simulator's step overwrites it)."""
    return RestingOrders(lots=ps.remaining.clone(),
                         queue_fraction=ps.queue_fraction.to(torch.float32),
                         age=ps.age.clone())


def order_features(orders: RestingOrders, position_unit_lots: int, cfg: NetworkConfig
                   ) -> torch.Tensor:
    """[B, 6] float32 network inputs (module docstring): bid lots, ask lots, bid queue,
    ask queue, bid age, ask age."""
    lots = orders.lots.to(torch.float32) / position_unit_lots
    age = torch.log1p(orders.age.to(torch.float32)) / math.log1p(cfg.state_time_scale_steps)
    return torch.cat((lots, orders.queue_fraction.to(torch.float32), age), dim=-1)
