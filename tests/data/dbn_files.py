"""DBN test files written through the official ``databento_dbn`` encoder.

Role: tests only. Records are ``databento_dbn`` message objects serialised with ``bytes()``
after a ``databento_dbn.Metadata`` header, so every byte comes from Databento's own code,
not from the reader under test.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import databento_dbn as dbn
import zstandard

from lobsurf.data.schema import F_LAST, UNDEF_PRICE

PX = 1_000_000_000  # one currency unit in fixed point
ES_ID = 17077  # instrument id of ESH4 in the real CME sample


def mbo(action: str, side: str = "N", oid: int = 0, price: float = 0.0, size: int = 0, *,
        flags: int = F_LAST, ts: int = 1_700_000_000_000_000_000, instrument: int = ES_ID,
        publisher: int = 1) -> dbn.MBOMsg:
    """One MBO record; ``price`` in currency units (UNDEF for a clear)."""
    price_fixed = UNDEF_PRICE if action == "R" else round(price * PX)
    return dbn.MBOMsg(publisher_id=publisher, instrument_id=instrument, ts_event=ts - 5,
                      order_id=oid, price=price_fixed, size=size, action=dbn.Action(action),
                      side=dbn.Side(side), ts_recv=ts, flags=flags)


def metadata(schema: dbn.Schema, *, ts_out: bool = False, symbol: str = "ESH4") -> dbn.Metadata:
    return dbn.Metadata(dataset="GLBX.MDP3", start=0, stype_in=dbn.SType.RAW_SYMBOL,
                        stype_out=dbn.SType.INSTRUMENT_ID, schema=schema, symbols=[symbol],
                        ts_out=ts_out)


def write_dbn(path: Path, schema: dbn.Schema, records: Iterable, *, ts_out: bool = False,
              zstd: bool = False) -> Path:
    """Header plus records; with ``ts_out`` each record gets its 8-byte send timestamp."""
    body = bytearray(bytes(metadata(schema, ts_out=ts_out)))
    for k, record in enumerate(records):
        if ts_out:
            record.ts_out = 1_800_000_000_000_000_000 + k  # bytes() then carries the trailer
        body += bytes(record)
    data = zstandard.ZstdCompressor().compress(bytes(body)) if zstd else bytes(body)
    path.write_bytes(data)
    return path


def timed(records: list[tuple], start_ts: int = 1_700_000_000_000_000_000,
          step_ns: int = 1_000) -> list[dbn.MBOMsg]:
    """MBO records from (action, side, oid, price, size[, flags[, publisher]]) tuples,
    ``step_ns`` apart."""
    out = []
    for k, row in enumerate(records):
        action, side, oid, price, size, *rest = row
        flags = rest[0] if rest else F_LAST
        publisher = rest[1] if len(rest) > 1 else 1
        out.append(mbo(action, side, oid, price, size, flags=flags, ts=start_ts + k * step_ns,
                       publisher=publisher))
    return out


def definition(instrument: int = ES_ID, *, multiplier: float | None = 50.0,
               currency: str = "USD", tick: float = 0.25, symbol: str = "ESH4") -> dbn.InstrumentDefMsg:
    """An instrument-definition record (``unit_of_measure_qty`` is the multiplier)."""
    qty = UNDEF_PRICE if multiplier is None else round(multiplier * PX)
    return dbn.InstrumentDefMsg(
        publisher_id=1, instrument_id=instrument, ts_event=0, ts_recv=0,
        min_price_increment=round(tick * PX), display_factor=PX, raw_symbol=symbol, asset="ES",
        security_type="FUT", instrument_class=dbn.InstrumentClass.FUTURE,
        security_update_action=dbn.SecurityUpdateAction.ADD, unit_of_measure_qty=qty,
        currency=currency)


def mbp10(action: str, side: str = "N", price: float = 0.0, size: int = 0, *, bid: float = 4000.0,
          ask: float = 4000.25, flags: int = F_LAST, ts: int = 1_700_000_000_000_000_000,
          instrument: int = ES_ID, publisher: int = 1, tick: float = 0.25,
          level_size: int = 10) -> dbn.MBP10Msg:
    """One MBP-10 record whose book has 10 levels a tick apart from ``bid`` / ``ask``."""
    levels = [dbn.BidAskPair(bid_px=round((bid - k * tick) * PX), ask_px=round((ask + k * tick) * PX),
                             bid_sz=level_size, ask_sz=level_size, bid_ct=1, ask_ct=1)
              for k in range(10)]
    return dbn.MBP10Msg(publisher_id=publisher, instrument_id=instrument, ts_event=ts - 5,
                        price=round(price * PX), size=size, action=dbn.Action(action),
                        side=dbn.Side(side), ts_recv=ts, flags=flags, depth=0, levels=levels)
