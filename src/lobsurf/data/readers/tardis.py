"""Tardis.dev CSV files (gzip or plain) -> book rows and trade prints.

Role: the Tardis input path of ``lobsurf ingest``. Follows Tardis's documented CSV data
types (https://docs.tardis.dev/downloadable-csv-files): comma-separated, a header line,
times in microseconds since the epoch (UTC), prices and amounts as decimal text.

* ``incremental_book_L2`` (``exchange,symbol,timestamp,local_timestamp,is_snapshot,side,
  price,amount``): the book, rebuilt (``l2_book.L2Book``). ``amount`` is the level's new
  size, 0 removes it. Rows of one message share ``local_timestamp``: one 10-level row is
  stored per message. Snapshot rows (``is_snapshot`` true) after update rows replace the
  book: mid-file that is a reconnection, so the new book starts a new segment
  (``book_restart``); at the start of the next file of the same stream it is the day's
  opening snapshot of a continuous feed and the segment goes on. Updates before the first
  snapshot are skipped (``depth_no_book``), as Tardis advises.
* ``book_snapshot_25`` / ``book_snapshot_5`` (``asks[i].price, asks[i].amount,
  bids[i].price, bids[i].amount`` per level): read directly, the first 10 levels; missing
  levels (empty fields, or fewer than 10 in the file) are empty.
* ``trades`` (``id,side,price,amount``): parsed and checked (``side`` is the taker's: buy,
  sell, or unknown); a trades file has no book rows to put them between, so it gives no
  store of its own (joining it to a book file of the same instrument is not done yet).

Rows of another symbol are counted as ``other_instrument``. A malformed line is a
``UserError`` naming the file and line.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from lobsurf.data.readers.decimals import SizeUnit, price_fixed, size_atoms
from lobsurf.data.readers.l2_book import BookRows, CryptoChunk, L2Book
from lobsurf.data.readers.text_lines import NumberedLines, first_lines
from lobsurf.data.schema import LEVELS, UNDEF_PRICE
from lobsurf.data.trades import SIDE_BUY, SIDE_SELL, SIDE_UNKNOWN
from lobsurf.errors import UserError

NS_PER_US = 1_000
#: times (microseconds since the epoch) before 2096-10-02, so that they fit int64 ns
MAX_US = 4 * 10**15
INCREMENTAL, TRADES = "incremental_book_L2", "trades"
_COMMON = ("exchange", "symbol", "timestamp", "local_timestamp")
_COLUMNS = {INCREMENTAL: _COMMON + ("is_snapshot", "side", "price", "amount"),
            TRADES: _COMMON + ("id", "side", "price", "amount")}
_TAKER = {"buy": SIDE_BUY, "sell": SIDE_SELL, "unknown": SIDE_UNKNOWN}


@dataclass(frozen=True)
class TardisKey:
    """What identifies one stream of Tardis files: data type, exchange and symbol."""

    data_type: str
    exchange: str
    symbol: str

    @property
    def name(self) -> str:
        return f"{self.exchange}:{self.symbol}"

    @property
    def instrument_id(self) -> int:
        # CRC-32 of "exchange:SYMBOL": Binance recordings of the instrument get the same id
        return zlib.crc32(self.name.encode()) & 0x7FFF_FFFF


def data_type_of(header: str) -> str | None:
    """The Tardis data type a header line belongs to (None: not a Tardis CSV we read)."""
    names = header.strip().split(",")
    for data_type, columns in _COLUMNS.items():
        if tuple(names) == columns:
            return data_type
    levels = _snapshot_levels(names)
    return f"book_snapshot_{levels}" if levels else None


def _snapshot_levels(names: list[str]) -> int:
    # book_snapshot_N: the common columns, then asks/bids price and amount per level
    if tuple(names[:4]) != _COMMON or len(names) < 8 or (len(names) - 4) % 4:
        return 0
    levels = (len(names) - 4) // 4
    expected = [f"{side}[{i}].{field}" for i in range(levels)
                for side, field in (("asks", "price"), ("asks", "amount"),
                                    ("bids", "price"), ("bids", "amount"))]
    return levels if names[4:] == expected else 0


def peek_tardis(path: str | os.PathLike) -> tuple[TardisKey, int]:
    """(the file's stream, its first local timestamp in ns) from its header and first row."""
    path = Path(path)
    header = None
    for number, raw in first_lines(path, 2):
        text = _text(path, number, raw)
        if number == 1:
            header = data_type_of(text)
            if header is None:
                raise UserError(f"{path}:1: not a Tardis CSV header we read "
                                "(incremental_book_L2, book_snapshot_N, trades)")
            continue
        fields = text.split(",")
        if len(fields) < 4:
            raise UserError(f"{path}:{number}: expected comma-separated Tardis columns")
        return (TardisKey(header, fields[0], fields[1].upper()),
                _micros(path, number, fields[3]) * NS_PER_US)
    raise UserError(f"{path}: no data rows after the header")


def _text(path: Path, number: int, raw: bytes) -> str:
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        raise UserError(f"{path}:{number}: not ASCII text") from None


def _micros(path: Path, number: int, text: str) -> int:
    if not text.isdigit() or not text.isascii() or len(text) > 16 or int(text) >= MAX_US:
        raise UserError(f"{path}:{number}: {text!r} is not a time in microseconds")
    return int(text)


class TardisReader:
    """Reads the files of one Tardis stream in order (module doc); iterate for chunks."""

    def __init__(self, paths: list[Path], key: TardisKey, unit: SizeUnit, chunk_rows: int):
        self.paths, self.key, self.chunk_rows = paths, key, chunk_rows
        self.book = L2Book()
        self.rows = BookRows(key.instrument_id, unit, gives_trades=key.data_type == TRADES)
        self.counts = {"other_instrument": 0, "truncated_file": 0}
        if key.data_type == INCREMENTAL:
            self.counts.update(depth_no_book=0, book_restart=0)
        self.sizes = [p.stat().st_size for p in paths]
        self._lines: NumberedLines | None = None
        self._done_bytes = 0
        self.messages = 0

    def position(self) -> int:
        return self._done_bytes + (self._lines.position() if self._lines else 0)

    def all_counts(self) -> dict[str, int]:
        return dict(self.counts)

    def __iter__(self) -> Iterator[CryptoChunk]:
        for index, path in enumerate(self.paths):
            self._lines = NumberedLines(path)
            read = {INCREMENTAL: self._incremental, TRADES: self._trades}.get(
                self.key.data_type, self._snapshots)
            yield from read(path, self._rows(path), continuing=index > 0)
            self.counts["truncated_file"] += self._lines.truncated
            self._done_bytes += self._lines.size
            self._lines = None
        if len(self.rows) or self.rows.pending_rescale > 1:
            yield self.rows.flush()

    def _rows(self, path: Path) -> Iterator[tuple[int, list[str]]]:
        """(line number, fields) of the file's data rows of this stream's symbol."""
        columns = None
        for number, raw in self._lines:
            text = _text(path, number, raw)
            if number == 1:
                if data_type_of(text) != self.key.data_type:
                    raise UserError(f"{path}:1: header is not that of {self.key.data_type}, "
                                    "the data type of the other files of this stream")
                columns = len(text.split(","))
                continue
            if not text:
                continue
            fields = text.split(",")
            if len(fields) != columns:
                raise UserError(f"{path}:{number}: expected {columns} columns, "
                                f"found {len(fields)}")
            if fields[1].upper() != self.key.symbol or fields[0] != self.key.exchange:
                self.counts["other_instrument"] += 1
                continue
            self.messages += 1
            yield number, fields

    def _incremental(self, path: Path, rows, continuing: bool) -> Iterator[CryptoChunk]:
        # Each file must (re)start from a snapshot: updates before it are skipped. The book
        # of the previous file of the stream goes on without a break only when this file
        # opens with its snapshot; anything else is a reconnection (a new segment).
        book, name = self.book, str(path)
        batch = None  # (is snapshot, local timestamp) of the message being applied
        last = (0, 0, 0)  # (local ns, exchange ns, line) of that message's last row
        awaiting, skipped, restart = True, False, False
        for number, fields in rows:
            snapshot = _flag(path, number, fields[4])
            local = _micros(path, number, fields[3])
            key = (True, 0) if snapshot else (False, local)
            if key != batch and batch is not None:
                self.rows.add(book, last[0], last[1], name, last[2], restart)
                restart = False
                if len(self.rows) >= self.chunk_rows:
                    yield self.rows.flush()
            if snapshot and (batch is None or not batch[0]):
                restart = bool(book) and (skipped or not continuing or not awaiting)
                self.counts["book_restart"] += restart
                book.clear()
                awaiting = False
            if awaiting:
                self.counts["depth_no_book"] += 1
                skipped, batch = True, None
                continue
            batch = key
            side = fields[5]
            if side not in ("bid", "ask"):
                raise UserError(f"{path}:{number}: side {side!r} is not bid or ask")
            try:
                book.apply(side == "bid", ((fields[6], fields[7]),))
            except ValueError as exc:
                raise UserError(f"{path}:{number}: {exc}") from None
            last = (local * NS_PER_US, _micros(path, number, fields[2]) * NS_PER_US, number)
        if batch is not None:
            self.rows.add(book, last[0], last[1], name, last[2], restart)

    def _snapshots(self, path: Path, rows, continuing: bool) -> Iterator[CryptoChunk]:
        levels = min(LEVELS, int(self.key.data_type.rpartition("_")[2]))
        for number, fields in rows:
            try:
                sides = [[_level(fields, 4 + 4 * i + offset) for i in range(levels)]
                         for offset in (2, 0)]  # bids, then asks
            except ValueError as exc:
                raise UserError(f"{path}:{number}: {exc}") from None
            self.rows.add_levels(sides[0], sides[1],
                                 _micros(path, number, fields[3]) * NS_PER_US,
                                 _micros(path, number, fields[2]) * NS_PER_US, (str(path), number))
            if len(self.rows) >= self.chunk_rows:
                yield self.rows.flush()

    def _trades(self, path: Path, rows, continuing: bool) -> Iterator[CryptoChunk]:
        for number, fields in rows:
            side = _TAKER.get(fields[5])
            if side is None:
                raise UserError(f"{path}:{number}: side {fields[5]!r} is not buy, sell or unknown")
            try:
                price, size = price_fixed(fields[6]), size_atoms(fields[7])
            except ValueError as exc:
                raise UserError(f"{path}:{number}: {exc}") from None
            _micros(path, number, fields[2]), _micros(path, number, fields[3])  # checked
            self.rows.add_trade(price, size, side, (str(path), number))
            if len(self.rows) >= self.chunk_rows:
                yield self.rows.flush()


def _flag(path: Path, number: int, text: str) -> bool:
    if text not in ("true", "false"):
        raise UserError(f"{path}:{number}: is_snapshot {text!r} is not true or false")
    return text == "true"


def _level(fields: list[str], at: int) -> tuple[int, int]:
    """(price, size atoms) of a snapshot level; an empty level (no price) is (UNDEF, 0)."""
    price, amount = fields[at], fields[at + 1]
    if not price and not amount:
        return UNDEF_PRICE, 0
    return price_fixed(price), size_atoms(amount)
