"""Simulator configuration: one frozen dataclass, every tunable with its unit.

Derived quantities (the action tables) are properties, never written back. The actions
(n = len(order_sizes_lots)):

| index | market orders only (default) | with ``passive_orders`` |
|---|---|---|
| 0 | Hold | Hold |
| 1 .. n | Buy sizes[i-1] at market | the same |
| n+1 .. 2n | Sell sizes[i-1] at market | the same |
| 2n+1 .. 3n | | Post a bid of sizes[i-1] at the best bid (join its queue) |
| 3n+1 .. 4n | | Post an ask of sizes[i-1] at the best ask |
| 4n+1 | | Cancel the resting bid |
| 4n+2 | | Cancel the resting ask |

The market actions keep their indices, so a market-order policy means the same with
passive orders on. What each action does with resting orders: lobsurf.sim.passive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

QueueModel = Literal["risk_averse", "probabilistic"]
QUEUE_MODELS: tuple[str, ...] = ("risk_averse", "probabilistic")


@dataclass(frozen=True)
class SimConfig:
    """Static settings of the batched LOB execution simulator."""

    window: int = 64
    """K: snapshots in an observation window; a reset cursor leaves K-1 rows before it."""
    stride: int = 1
    """snapshots the cursor advances per step."""
    latency_rows: int = 1
    """an order decided at row r fills against the book of row r + latency_rows (0 = same row)."""
    order_sizes_lots: tuple[int, ...] = (1, 2, 3, 4, 5)
    """lots of the Buy and Sell actions: action 1..n buys sizes[i-1], n+1..2n sells them."""
    position_limit_lots: int = 10
    """|position| never exceeds this; orders are clipped to it before they reach the book."""
    lot_size_base: float | None = None
    """base-asset amount of one lot of order_sizes_lots and position_limit_lots (crypto, e.g.
    0.001 BTC); a run turns it into store size units at its start (lobsurf.sim.lots). None:
    a lot is one store size unit (the instrument's quantity step; a contract, a share)."""
    fee_per_lot: float | None = 0.0
    """fee per lot filled, in the instrument's currency; None with fee_bps None: not given,
    the store's recorded fee or the default (lobsurf.sim.fees); one None of two counts 0."""
    fee_bps: float | None = 0.0
    """fee in basis points of filled notional (price x multiplier x lots); None: see
    fee_per_lot. These two are the taker fee: market orders pay it."""
    max_episode_steps: int = 1000
    """an episode ends after this many steps (or at its segment's end); position closed at market."""
    seed: int = 0
    """seeds the reset generator (segment and cursor draws)."""
    passive_orders: bool = False
    """besides market orders, post resting orders at the best bid or ask (one a side) and
    cancel them; fills follow the store's trades and ``queue_model``. Needs a store with
    trades and latency_rows <= stride."""
    queue_model: QueueModel = "probabilistic"
    """how cancellations at a resting order's price move it up its queue: probabilistic (a
    cancel is ahead of it with probability x ** queue_power, x the share of the level ahead
    of it) or risk_averse (all behind it: only trades move it; the floor of fill rates).
    The default and its power are the closest to the exact FIFO queue of CME ES MBO data
    (docs/sim_assumptions.md, "Which queue model")."""
    queue_power: int = 5
    """n of the probabilistic queue model, an integer >= 1: 1 spreads cancels evenly through
    the queue; larger puts more of them behind the order (Databento's bias k is n = 1/(1+k))."""
    maker_fee_per_lot: float | None = None
    """fee per lot a resting order fills (currency; negative: a rebate); None with
    maker_fee_bps None: the store's recorded maker fee, else the taker fee; one None of two
    counts 0."""
    maker_fee_bps: float | None = None
    """maker fee in basis points of filled notional (negative: a rebate); None: see
    maker_fee_per_lot."""

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError("window must be >= 1")
        if self.stride < 1:
            raise ValueError("stride must be >= 1")
        if self.latency_rows < 0:
            raise ValueError("latency_rows must be >= 0")
        if not self.order_sizes_lots or min(self.order_sizes_lots) < 1:
            raise ValueError("order_sizes_lots must be positive lots")
        if self.position_limit_lots < 1:
            raise ValueError("position_limit_lots must be >= 1")
        if self.lot_size_base is not None and not 0 < self.lot_size_base < math.inf:
            raise ValueError("lot_size_base must be a finite base-asset amount > 0")
        if not all(0 <= fee < math.inf for fee in (self.fee_per_lot, self.fee_bps)
                   if fee is not None):
            raise ValueError("fees must be finite and >= 0")  # NaN fails too
        if self.max_episode_steps < 1:
            raise ValueError("max_episode_steps must be >= 1")
        if not all(-math.inf < fee < math.inf for fee in (self.maker_fee_per_lot,
                                                           self.maker_fee_bps)
                   if fee is not None):
            raise ValueError("maker fees must be finite")
        if self.queue_model not in QUEUE_MODELS:
            raise ValueError(f"queue_model must be one of {', '.join(QUEUE_MODELS)}, got "
                             f"{self.queue_model!r}")
        if isinstance(self.queue_power, bool) or not isinstance(self.queue_power, int) or (
                self.queue_power < 1):
            raise ValueError(f"queue_power must be an integer >= 1, got {self.queue_power!r}")
        if self.passive_orders and self.latency_rows > self.stride:
            raise ValueError(f"passive orders need latency_rows <= stride (an order reaches the "
                             f"book before the next decision), got latency_rows "
                             f"{self.latency_rows} > stride {self.stride}")

    @property
    def num_actions(self) -> int:
        """Hold + one Buy and one Sell per order size; with passive orders also one Post bid
        and one Post ask per size and the two Cancels (module docstring)."""
        n = len(self.order_sizes_lots)
        return 1 + 2 * n + (2 * n + 2 if self.passive_orders else 0)

    @property
    def signed_order_lots(self) -> tuple[int, ...]:
        """Action index -> signed lots of its market order (+ buy, - sell, 0: none)."""
        sizes = tuple(self.order_sizes_lots)
        market = (0,) + sizes + tuple(-s for s in sizes)
        return market + (0,) * (self.num_actions - len(market))

    @property
    def post_lots(self) -> tuple[tuple[int, int], ...]:
        """Action index -> (lots of the bid it posts, lots of the ask it posts)."""
        sizes = tuple(self.order_sizes_lots)
        rows = [(0, 0)] * (1 + 2 * len(sizes))
        if self.passive_orders:
            rows += [(s, 0) for s in sizes] + [(0, s) for s in sizes] + [(0, 0)] * 2
        return tuple(rows)

    @property
    def cancel_sides(self) -> tuple[tuple[bool, bool], ...]:
        """Action index -> (cancels the resting bid, cancels the resting ask)."""
        rows = [(False, False)] * self.num_actions
        if self.passive_orders:
            rows[-2:] = [(True, False), (False, True)]
        return tuple(rows)

    @property
    def action_names(self) -> tuple[str, ...]:
        """Action index -> what it does, e.g. "buy 2", "post ask 1", "cancel bid"."""
        sizes = tuple(self.order_sizes_lots)
        names = ["hold"] + [f"buy {s}" for s in sizes] + [f"sell {s}" for s in sizes]
        if self.passive_orders:
            names += [f"post bid {s}" for s in sizes] + [f"post ask {s}" for s in sizes]
            names += ["cancel bid", "cancel ask"]
        return tuple(names)
