"""Simulator configuration: one frozen dataclass, every tunable with its unit.

Derived quantities (the signed order table) are properties, never written back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


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
    fee_per_lot."""
    max_episode_steps: int = 1000
    """an episode ends after this many steps (or at its segment's end); position closed at market."""
    seed: int = 0
    """seeds the reset generator (segment and cursor draws)."""

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

    @property
    def num_actions(self) -> int:
        """Hold + one Buy and one Sell per order size."""
        return 1 + 2 * len(self.order_sizes_lots)

    @property
    def signed_order_lots(self) -> tuple[int, ...]:
        """Action index -> signed lots (+ buy, - sell, 0 hold)."""
        sizes = tuple(self.order_sizes_lots)
        return (0,) + sizes + tuple(-s for s in sizes)
