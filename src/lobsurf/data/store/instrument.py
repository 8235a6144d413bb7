"""An instrument's record in a store's manifest: tick, money (multiplier, currency, fees),
the size unit its sizes are counted in, and its market hours."""

from __future__ import annotations

import math
from dataclasses import dataclass

from lobsurf.data.schema import FIXED_PRICE_SCALE

#: currency of an instrument whose currency nobody stated (DBN files carry none)
UNKNOWN_CURRENCY = "unknown"
#: market hours of an instrument: trading days with sessions, or around the clock (crypto)
SESSIONS, AROUND_THE_CLOCK = "sessions", "24/7"
MARKET_HOURS = (SESSIONS, AROUND_THE_CLOCK)


@dataclass
class Instrument:
    """One traded instrument.

    Attributes:
        instrument_id: the venue's numeric id.
        symbol: human-readable symbol ("" if unknown).
        tick_size_fixed: minimum price increment, fixed point (1e-9 units).
        multiplier: currency per price unit per lot (contract multiplier; 1 for shares).
        currency: ISO code of the price currency, or ``UNKNOWN_CURRENCY``.
        multiplier_known: False when nobody gave the multiplier and 1 was assumed: money
            figures are then in price units x lots, not currency.
        fee_per_lot: fee per lot filled (currency) given at ingest; None: none recorded
            (training and evaluation then use lobsurf.sim.fees' default, unless given).
        fee_bps: fee in basis points of filled notional given at ingest; None: see above.
            These two are the taker fee: what a market order (one that takes liquidity) pays.
        maker_fee_per_lot, maker_fee_bps: the maker fee, paid by a resting order's fills
            (currency per lot, bps of notional), given at ingest; negative: a rebate. None:
            none recorded (the simulator then charges the taker fee; lobsurf.sim.fees).
        size_unit: base-asset amount of one store size unit, the instrument's quantity step
            (0.00001 for Binance BTCUSDT spot; 1 for whole lots, contracts, shares). Sizes
            in the store are exact integers of it; ``multiplier`` is per one unit.
        market_hours: ``"sessions"`` (a venue with trading days) or ``"24/7"`` (crypto:
            segments only from gaps; no session snapping in the split, walk-forward folds
            by row blocks, 365 trading days a year).
    """

    instrument_id: int
    symbol: str
    tick_size_fixed: int
    multiplier: float = 1.0
    currency: str = UNKNOWN_CURRENCY
    multiplier_known: bool = True
    fee_per_lot: float | None = None
    fee_bps: float | None = None
    maker_fee_per_lot: float | None = None
    maker_fee_bps: float | None = None
    size_unit: float = 1.0
    market_hours: str = SESSIONS

    def __post_init__(self) -> None:
        unit = self.size_unit
        if isinstance(unit, bool) or not isinstance(unit, (int, float)) or not 0 < unit < math.inf:
            raise ValueError(f"size_unit {unit!r}: must be a finite number > 0")
        if self.market_hours not in MARKET_HOURS:
            raise ValueError(f"market_hours {self.market_hours!r}: one of {', '.join(MARKET_HOURS)}")
        for name in ("fee_per_lot", "fee_bps", "maker_fee_per_lot", "maker_fee_bps"):
            fee = getattr(self, name)
            number = isinstance(fee, (int, float)) and not isinstance(fee, bool)
            if fee is None:
                continue
            if name.startswith("maker_"):  # a maker fee may be a rebate
                if not (number and -math.inf < fee < math.inf):
                    raise ValueError(f"{name} {fee!r}: a maker fee must be a finite number")
            elif not (number and 0 <= fee < math.inf):
                raise ValueError(f"{name} {fee!r}: a fee must be a finite number >= 0")

    @property
    def tick_size(self) -> float:
        return self.tick_size_fixed / FIXED_PRICE_SCALE
