"""Trades parsed from crypto recordings, in a clean in-memory form (not yet in the store).

One print per trade message: capture and exchange time, price in fixed point, size in the
instrument's store size units, and the aggressor: +1 the buyer took liquidity (lifted the
ask), -1 the seller did (hit the bid), 0 the source does not say. Binance ``trade`` gives it
as ``m`` (true: the buyer was the maker, so the seller was the aggressor), Tardis ``trades``
as ``side`` (the taker's side: buy, sell or unknown).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

BUYER_AGGRESSOR = 1
SELLER_AGGRESSOR = -1
UNKNOWN_AGGRESSOR = 0


@dataclass
class TradePrints:
    """N trades in time order of the recording.

    Attributes:
        ts_recv_ns: [N] int64 capture time (UNIX ns).
        ts_event_ns: [N] int64 exchange trade time (UNIX ns).
        price_fixed: [N] int64 price, fixed point (1e-9).
        size: [N] int64 size in store size units of ``size_unit_atoms``.
        side: [N] int8 aggressor, ``BUYER_AGGRESSOR`` / ``SELLER_AGGRESSOR`` / 0.
        size_unit_atoms: the size unit the sizes are counted in (1e-12 base units); a later
            refinement of the instrument's unit multiplies sizes of earlier prints.
    """

    ts_recv_ns: np.ndarray
    ts_event_ns: np.ndarray
    price_fixed: np.ndarray
    size: np.ndarray
    side: np.ndarray
    size_unit_atoms: int

    def __len__(self) -> int:
        return int(self.ts_recv_ns.shape[0])

    def take(self, rows: np.ndarray) -> TradePrints:
        arrays = {f.name: getattr(self, f.name)[rows] for f in fields(self)
                  if f.name != "size_unit_atoms"}
        return TradePrints(**arrays, size_unit_atoms=self.size_unit_atoms)
