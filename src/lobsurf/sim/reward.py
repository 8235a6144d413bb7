"""Pure money functions: fees and realized PnL, in float64 currency units.

Cash values arrive as integer ticks x lots relative to the dataset's price origin. The
origin cancels in PnL (a closed trade buys and sells the same lots) but not in fees in
basis points, which need the absolute notional; ``FeeModel`` folds it into two constants.
Every formula here is mirrored operation for operation in ``lobsurf.sim.reference`` so
the batched simulator and the reference agree bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: basis points per unit
BPS = 1e-4


@dataclass(frozen=True)
class FeeModel:
    """fee(lots, value_ticks) = lots * per_lot + value_ticks * per_value_tick (currency).

    per_lot folds the fixed fee per lot and the bps fee on the origin price; per_value_tick
    is the bps fee on one tick x lot of price above the origin.
    """

    per_lot: float
    per_value_tick: float

    @staticmethod
    def build(fee_per_lot: float, fee_bps: float, origin_price: float, tick_size: float,
              multiplier: float) -> FeeModel:
        rate = fee_bps * BPS
        return FeeModel(per_lot=fee_per_lot + rate * origin_price * multiplier,
                        per_value_tick=rate * tick_size * multiplier)


def money_scalar(value: float, device: torch.device | str) -> torch.Tensor:
    """0-d float64 device tensor: int64 tensor x it is one kernel computing in float64
    (a Python float would give float32, and ``.double()`` first would cost a second kernel)."""
    return torch.tensor(value, dtype=torch.float64, device=device)


def fees(lots: torch.Tensor, value_ticks: torch.Tensor, per_lot: torch.Tensor,
         per_value_tick: torch.Tensor | None) -> torch.Tensor:
    """[...] float64 fee of fills of ``lots`` lots worth ``value_ticks`` ticks x lots.

    per_lot, per_value_tick: 0-d float64 device tensors (``FeeModel`` fields through
    ``money_scalar``, made once); per_value_tick None when there is no bps fee.
    """
    out = lots * per_lot
    if per_value_tick is not None:  # static config branch: two kernels fewer when bps = 0
        out = out + value_ticks * per_value_tick
    return out


def ticks_to_money(ticks_lots: torch.Tensor, tick_value: torch.Tensor) -> torch.Tensor:
    """[...] int64 ticks x lots -> float64 currency; tick_value: 0-d float64 (money_scalar)."""
    return ticks_lots * tick_value
