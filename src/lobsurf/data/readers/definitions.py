"""Databento instrument-definition files: the money facts DBN market data leaves out.

Role: ``lobsurf ingest --definitions FILE``. MBP-10 and MBO records carry no contract
multiplier, currency or tick; Databento's ``definition`` schema does, one
``InstrumentDefMsg`` per instrument (and per update). This module decodes such a file with
the official ``databento_dbn`` decoder and returns, per instrument id, the last definition
seen:

* multiplier = ``unit_of_measure_qty`` (e.g. 50 for E-mini S&P 500: 50 USD per index point
  per contract); ``contract_multiplier`` is used only where that is undefined;
* currency = ``currency`` (ISO code);
* tick = ``min_price_increment`` (fixed point, 1e-9).

An undefined field (Databento's UNDEF sentinels, empty strings) stays unknown. Any other
content is a one-line error naming the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import databento_dbn
import numpy as np

from lobsurf.data.readers.dbn_read import ZSTD_MAGIC
from lobsurf.data.schema import FIXED_PRICE_SCALE, UNDEF_PRICE
from lobsurf.errors import UserError

#: Databento's "undefined" for int32 fields such as contract_multiplier
UNDEF_INT32 = np.iinfo(np.int32).max
#: definition record classes of DBN versions 3, 1 and 2 (older files decode as these)
_DEFINITION_TYPES = tuple(getattr(databento_dbn, name) for name in
                          ("InstrumentDefMsg", "InstrumentDefMsgV1", "InstrumentDefMsgV2")
                          if hasattr(databento_dbn, name))


@dataclass(frozen=True)
class Definition:
    """What one instrument-definition record says about money (None where undefined)."""

    instrument_id: int
    symbol: str
    multiplier: float | None
    currency: str | None
    tick_size_fixed: int | None


def _definition(msg) -> Definition:
    qty = int(msg.unit_of_measure_qty)
    multiplier = qty / FIXED_PRICE_SCALE if qty not in (UNDEF_PRICE, 0) else None
    if multiplier is None and int(msg.contract_multiplier) not in (UNDEF_INT32, 0):
        multiplier = float(msg.contract_multiplier)
    if multiplier is not None and not multiplier > 0:
        multiplier = None  # a negative or NaN multiplier is no fact about money
    increment = int(msg.min_price_increment)
    tick = increment if 0 < increment < UNDEF_PRICE else None
    currency = str(msg.currency or "").strip() or None
    return Definition(int(msg.instrument_id), str(msg.raw_symbol or ""), multiplier, currency, tick)


def read_definitions(path: str | os.PathLike) -> dict[int, Definition]:
    """Instrument id → its last definition in the DBN definition file ``path``."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such definitions file")
    data = path.read_bytes()
    compression = (databento_dbn.Compression.ZSTD if data[:4] == ZSTD_MAGIC
                   else databento_dbn.Compression.NONE)
    decoder = databento_dbn.DBNDecoder(compression=compression)
    try:
        decoder.write(data)
        records = decoder.decode()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - the Rust decoder panics with a BaseException
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"{path}: not a readable DBN definitions file: {first_line}") from None
    if not records or not isinstance(records[0], databento_dbn.Metadata):
        raise UserError(f"{path}: not a DBN file")
    schema = str(records[0].schema) if records[0].schema is not None else "mixed"
    if schema != "definition":
        raise UserError(f"{path}: schema {schema!r}, not 'definition': pass a Databento "
                        "instrument-definition file to --definitions")
    found: dict[int, Definition] = {}
    for msg in records[1:]:
        if isinstance(msg, _DEFINITION_TYPES):
            found[int(msg.instrument_id)] = _definition(msg)
    if not found:
        raise UserError(f"{path}: no instrument definitions in the file")
    return found
