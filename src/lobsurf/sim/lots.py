"""Order sizes in base-asset amounts: ``sim.lot_size_base`` turned into store size units.

A crypto store counts sizes in its instrument's size unit (0.00001 BTC for Binance BTCUSDT
spot), so ``sim.order_sizes_lots = [1, ..., 5]`` would trade 0.00001 .. 0.00005 BTC. With
``sim.lot_size_base = 0.001`` a lot is 0.001 BTC instead: order sizes and the position limit
are multiplied by 0.001 / 0.00001 = 100 size units, exactly (Decimal), and the run records
the result (its config then holds the sizes in units and no lot_size_base, so resuming and
evaluating it need no store to convert again).
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

from lobsurf.data.dataset import BookTensors
from lobsurf.errors import UserError
from lobsurf.sim.config import SimConfig


def units_per_lot(lot_size_base: float, size_unit: float) -> int:
    """Store size units in one lot of ``lot_size_base``; UserError unless a whole number."""
    ratio = Decimal(repr(lot_size_base)) / Decimal(repr(size_unit))
    if ratio != ratio.to_integral_value() or ratio < 1:
        raise UserError(f"sim.lot_size_base {lot_size_base!r} is not a whole number of the "
                        f"store's size unit {size_unit!r} (lobsurf info shows it)")
    return int(ratio)


def resolve_lot_size(sim: SimConfig, book: BookTensors) -> tuple[SimConfig, str | None]:
    """``sim`` with its lot sizes in store size units, and a line saying so (None when
    ``sim.lot_size_base`` is not set: sizes already are units)."""
    if sim.lot_size_base is None:
        return sim, None
    factor = units_per_lot(sim.lot_size_base, book.size_unit)
    sizes = tuple(factor * s for s in sim.order_sizes_lots)
    limit = factor * sim.position_limit_lots
    note = (f"sim.lot_size_base {sim.lot_size_base!r} = {factor:,} size units of "
            f"{book.size_unit!r}: order sizes {sizes} units, position limit {limit:,} units")
    return replace(sim, order_sizes_lots=sizes, position_limit_lots=limit,
                   lot_size_base=None), note
