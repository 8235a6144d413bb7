"""The unit of money on the report's PnL axes: the store's currency, read from its manifest
(``Instrument.currency``), or "price units x lots" where nobody gave the contract
multiplier at ingest (PnL is then price change x lots, not money)."""

from __future__ import annotations

from lobsurf.data.store import Store, StoreError
from lobsurf.data.store.instrument import UNKNOWN_CURRENCY

#: the unit where the multiplier is unknown (lobsurf ingest warns about it)
PRICE_UNITS = "price units x lots"
#: the unit where the store cannot be read, or its instruments' currencies differ
CURRENCY = "currency"


def pnl_unit(store: str, instrument_id: int | None = None) -> str:
    """The unit of PnL of ``instrument_id`` (None: the store's instruments, when they agree)
    in the store at ``store`` (module doc)."""
    try:
        instruments = Store.open(store).manifest.instruments
    except (StoreError, OSError):
        return CURRENCY
    if instrument_id is not None:
        instruments = [i for i in instruments if i.instrument_id == instrument_id]
    units = {PRICE_UNITS if not i.multiplier_known
             else f"{CURRENCY}, unknown" if i.currency == UNKNOWN_CURRENCY
             else i.currency for i in instruments}
    return units.pop() if len(units) == 1 else CURRENCY
