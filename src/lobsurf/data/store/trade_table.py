"""The store's trade table: its summary in the manifest, its writer and its reader.

Files (``schema.TRADE_COLUMNS``)::

    STORE/trade_row.bin    int64   snapshot row whose interval (row - 1, row] holds the trade
    STORE/trade_px.bin     int64   fixed-point price (1e-9 currency units)
    STORE/trade_sz.bin     uint32  volume in store size units, summed per (row, price, side)
    STORE/trade_side.bin   int8    aggressor: +1 buyer, -1 seller, 0 not given by the source

One entry per (row, price, side), sorted by row, then side, then price. The manifest's
``trades`` says how many entries there are and what was left out and why; a manifest
without it (a store written before trades were recorded, or from a source that gives none)
means the store holds no trades.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lobsurf.data.schema import MAX_SIZE, TRADE_COLUMNS, UNDEF_PRICE
from lobsurf.data.trades import SIDE_BUY, SIDE_SELL, SIDE_UNKNOWN, TradeChunk, aggregate

#: why a trade of a source is not in the table (the keys of ``TradeSummary.left_out``)
LEFT_OUT_REASONS = {
    "before_segment_start": "in the interval before a segment's first row (no row before it "
                            "in its segment)",
    "after_last_row": "after the last row its file kept",
    "other_instrument": "of another instrument than the file's book",
    "other_publisher": "of the file's instrument from another publisher",
    "no_size": "size 0",
    "undefined_price": "no price (UNDEF)",
}


@dataclass
class TradeSummary:
    """What the trade table holds and what the sources reported (sizes in store units).

    Attributes:
        entries: rows of the table (one per snapshot row, price and side).
        rows: snapshot rows with at least one trade.
        volume, buy_volume, sell_volume, unknown_volume: volume in the table, and by side.
        source_records: trade records the sources reported (before aggregation).
        source_volume: their volume: ``volume`` plus everything in ``left_out``.
        left_out: reason (``LEFT_OUT_REASONS``) -> volume not in the table.
        left_out_records: reason -> trade records not in the table.
    """

    entries: int = 0
    rows: int = 0
    volume: int = 0
    buy_volume: int = 0
    sell_volume: int = 0
    unknown_volume: int = 0
    source_records: int = 0
    source_volume: int = 0
    left_out: dict[str, int] = field(default_factory=dict)
    left_out_records: dict[str, int] = field(default_factory=dict)

    def leave_out(self, reason: str, records: int, volume: int) -> None:
        """Count trades of the sources that do not enter the table."""
        if reason not in LEFT_OUT_REASONS:
            raise ValueError(f"unknown reason {reason!r} for leaving trades out")
        self.source_records += int(records)
        self.source_volume += int(volume)
        if records:
            self.left_out[reason] = self.left_out.get(reason, 0) + int(volume)
            self.left_out_records[reason] = self.left_out_records.get(reason, 0) + int(records)


class TradeTableWriter:
    """Appends a store's trade table chunk by chunk (used by ``StoreWriter``).

    ``complete`` turns False as soon as a chunk comes without trades (its source does not
    say what traded): the store then holds no trades at all, since rows without any would
    read as "nothing traded".
    """

    def __init__(self, folder: Path):
        self.files = {name: open(folder / f"{name}.bin", "wb") for name in TRADE_COLUMNS}
        self.summary = TradeSummary()
        self.complete = True

    def columns(self, trades: TradeChunk | None, starts: np.ndarray, first_row: int
                ) -> list[tuple]:
        """(file, array) pairs to write for one appended chunk of snapshots.

        Args:
            trades: the chunk's trades, ``row`` an index into its N rows; None: the source
                does not give trades.
            starts: [N] bool, rows that start a segment: a trade there has no row before it
                in its segment, so it is left out.
            first_row: store row of the chunk's row 0.
        """
        if trades is None:
            self.complete = False
        if not self.complete or trades is None or len(trades) == 0:
            return []
        if not np.isin(trades.side, (SIDE_BUY, SIDE_SELL, SIDE_UNKNOWN)).all():
            raise ValueError("trade sides must be +1, -1 or 0")
        if len(trades) and not (0 <= trades.row.min() and trades.row.max() < len(starts)):
            raise ValueError("trade rows must index the appended chunk's rows")
        size = np.asarray(trades.size, np.int64)
        reasons = {"no_size": size <= 0, "undefined_price": trades.price == UNDEF_PRICE,
                   "before_segment_start": starts[trades.row]}
        keep = np.ones(len(trades), bool)
        for reason, hit in reasons.items():
            out = hit & keep
            self.summary.leave_out(reason, out.sum(), size[out].sum())
            keep &= ~hit
        kept = trades.take(keep)
        table = aggregate(kept)
        if len(table) and table.size.max() > MAX_SIZE:
            raise ValueError(f"trade volume at one row and price above {MAX_SIZE} (uint32)")
        s = self.summary
        s.source_records += len(kept)
        s.source_volume += kept.volume
        s.entries += len(table)
        s.rows += len(np.unique(table.row))
        s.volume += table.volume
        by_side = {side: int(table.size[table.side == side].sum()) for side in
                   (SIDE_BUY, SIDE_SELL, SIDE_UNKNOWN)}
        s.buy_volume += by_side[SIDE_BUY]
        s.sell_volume += by_side[SIDE_SELL]
        s.unknown_volume += by_side[SIDE_UNKNOWN]
        values = {"trade_row": table.row + first_row, "trade_px": table.price,
                  "trade_sz": table.size, "trade_side": table.side}
        return [(self.files[name], np.ascontiguousarray(values[name], dtype=dtype))
                for name, dtype in TRADE_COLUMNS.items()]

    def close(self, folder: Path) -> TradeSummary | None:
        """Close the files; without complete trades remove them. Returns the summary or None."""
        for f in self.files.values():
            f.close()
        if self.complete:
            return self.summary
        for name in TRADE_COLUMNS:
            (folder / f"{name}.bin").unlink(missing_ok=True)
        return None

    def abort(self) -> None:
        for f in self.files.values():
            f.close()


def open_trade_table(path: Path, entries: int) -> dict[str, np.ndarray]:
    """The trade table's columns as memory maps; ValueError naming a file of the wrong size."""
    columns = {}
    for name, dtype in TRADE_COLUMNS.items():
        file = path / f"{name}.bin"
        itemsize = np.dtype(dtype).itemsize
        if not file.is_file() or file.stat().st_size != itemsize * entries:
            raise ValueError(f"{file}: missing or wrong size for {entries} trade entries")
        columns[name] = (np.zeros(0, dtype) if entries == 0
                         else np.memmap(file, dtype=dtype, mode="r", shape=(entries,)))
    return columns


def trades_of_rows(table: dict[str, np.ndarray], start: int, stop: int) -> TradeChunk:
    """The table's entries of snapshot rows [start, stop) (``row`` stays the store row)."""
    rows = table["trade_row"]
    lo, hi = np.searchsorted(rows, [start, stop], side="left")
    return TradeChunk(np.asarray(rows[lo:hi], np.int64),
                      np.asarray(table["trade_px"][lo:hi], np.int64),
                      np.asarray(table["trade_sz"][lo:hi], np.int64),
                      np.asarray(table["trade_side"][lo:hi], np.int8))


def summary_from_json(raw: dict | None) -> TradeSummary | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise TypeError(f"trades must be an object, not {type(raw).__name__}")
    counts = ("left_out", "left_out_records")
    summary = TradeSummary(**{k: v for k, v in raw.items() if k not in counts})
    for name in counts:
        setattr(summary, name, {str(k): int(v) for k, v in dict(raw.get(name, {})).items()})
    for name in ("entries", "rows", "volume", "buy_volume", "sell_volume", "unknown_volume",
                 "source_records", "source_volume"):
        value = getattr(summary, name)
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"trades.{name} must be an integer >= 0, got {value!r}")
    return summary

