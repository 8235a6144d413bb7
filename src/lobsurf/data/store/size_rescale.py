"""A refined size unit applied to what a store writer has written already.

A crypto instrument's size unit is inferred as the gcd of its sizes (``decimals.SizeUnit``);
when a later size is finer, the unit shrinks by an integer factor and every size stored in
the old unit is multiplied by it in place: the snapshot columns ``bid_sz``/``ask_sz`` of the
instrument's rows and the trade table's ``trade_sz`` of their trades, with the trade
summary's volumes. The result is the store the finer unit would have given from the start.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lobsurf.data.schema import MAX_SIZE, STORE_COLUMNS, TRADE_COLUMNS
from lobsurf.data.store.folders import StoreError

#: rows rescaled at a time (bounds memory)
RESCALE_ROWS = 1 << 20
#: the trade summary's fields that hold volumes (store size units)
VOLUME_FIELDS = ("volume", "buy_volume", "sell_volume", "unknown_volume", "source_volume")


def rescale_written(writer, instrument_id: int, factor: int) -> None:
    """Multiply every size ``writer`` (a ``StoreWriter``) has stored for ``instrument_id`` by
    ``factor`` (module doc). StoreError when one would exceed the store's uint32, or when
    trades of another instrument share the trade summary's volumes."""
    if factor == 1 or writer.rows_written == 0:
        return
    writer._wait_for_write()
    for f in [*writer.files.values(), *writer.trade_table.files.values()]:
        f.flush()
    ids = np.memmap(writer.tmp / "instrument_id.bin", dtype=STORE_COLUMNS["instrument_id"][0],
                    mode="r", shape=(writer.rows_written,))
    fits = all(_scale_column(writer.tmp / f"{name}.bin", STORE_COLUMNS[name], ids,
                             instrument_id, factor) for name in ("bid_sz", "ask_sz"))
    summary = writer.trade_table.summary
    if summary.entries:
        if (ids != instrument_id).any():
            raise StoreError(f"{writer._source}: the size unit of instrument {instrument_id} was "
                             "refined after trades of another instrument were stored; pass "
                             "its unit with --size-unit")
        fits &= _scale_column(writer.tmp / "trade_sz.bin", (TRADE_COLUMNS["trade_sz"], ()),
                              None, instrument_id, factor, summary.entries)
        for name in VOLUME_FIELDS:
            setattr(summary, name, getattr(summary, name) * factor)
        summary.left_out = {k: v * factor for k, v in summary.left_out.items()}
    if not fits:
        raise StoreError(f"{writer._source}: refining the size unit {factor}x finer makes an "
                         "earlier size exceed the store's uint32; pass the unit with "
                         "--size-unit")


def _scale_column(file: Path, layout: tuple, ids: np.ndarray | None, instrument_id: int,
                  factor: int, rows: int | None = None) -> bool:
    """Multiply a size column's entries (of ``instrument_id``'s rows; all with ``ids``
    None) by ``factor`` in place; False if one would exceed uint32 (nothing then matters:
    the ingest stops)."""
    dtype, shape = layout
    n = len(ids) if ids is not None else rows
    column = np.memmap(file, dtype=dtype, mode="r+", shape=(n, *shape))
    for lo in range(0, n, RESCALE_ROWS):
        block = column[lo:lo + RESCALE_ROWS]
        mine = (ids[lo:lo + RESCALE_ROWS] == instrument_id if ids is not None
                else np.ones(len(block), bool))
        scaled = block[mine].astype(np.uint64) * np.uint64(factor)
        if scaled.size and int(scaled.max()) > MAX_SIZE:
            return False
        block[mine] = scaled
    column.flush()
    return True
