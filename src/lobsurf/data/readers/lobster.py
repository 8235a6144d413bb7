"""LOBSTER input: ``*_orderbook_N.csv`` + ``*_message_N.csv`` -> 10-level snapshots.

Role: the LOBSTER input path of ``lobsurf ingest``. Follows LOBSTER's documented format
(https://lobsterdata.com/info/DataStructure.php):

* File names: ``TICKER_YYYY-MM-DD_STARTMS_ENDMS_{orderbook|message}_LEVELS.csv`` (start and
  end in milliseconds after midnight). Ticker and date come from the name.
* Orderbook file: no header, ``4 * LEVELS`` integer columns, per level
  ``ask_px, ask_sz, bid_px, bid_sz`` (level 1 first). Prices are dollars * 10,000.
  Unoccupied levels carry the placeholder prices ``9999999999`` (ask) / ``-9999999999``
  (bid) with size 0.
* Message file: no header, 6 columns ``time, event type, order id, size, price,
  direction``; ``time`` is seconds after midnight (New York local time) with up to 9
  decimals. Row i of the orderbook file is the book after the event of row i.

Output in store units (``schema``): prices * 100,000 (1e-4 dollars -> 1e-9), placeholders
-> ``UNDEF_PRICE`` with size 0, counts 0 (LOBSTER has none), files with fewer than 10
levels padded with empty levels and deeper ones cut to 10. Times are parsed exactly from
the decimal text (no float) and converted from New York wall time to UTC with
``zoneinfo``, so daylight-saving dates come out right. ``ts_event_ns == ts_recv_ns``.

Trades (``iter_lobster_with_trades``): executions of visible (event type 4) and hidden (5)
limit orders, at the row of their message (row i's interval holds event i). LOBSTER's
direction is the side of the *resting* order executed (-1 sell, 1 buy), so the aggressor is
the other side: aggressor = -direction. Hidden executions carry no side after Nasdaq masked
it (LOBSTER: from 2014-07-14 on their direction is always 1), so files of that date or later
record them with the side unknown. Cross trades (type 6: auctions) are not trades of their
own: LOBSTER documents them as an aggregate of executions it reports anyway, so they are
left out. Hidden executions may print between the ticks (midpoint orders); the trade table
keeps their exact price.

Memory is bounded: both files are read in lockstep, ``chunk_rows`` lines at a time, and
parsed with numpy's C reader. Any malformed line raises ``UserError`` naming the file and
the line number: wrong column count, a non-integer field, a bad time, blank lines inside
a file, or the two files having different numbers of rows.
"""

from __future__ import annotations

import datetime as dt
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np

from lobsurf.data.schema import FIXED_PRICE_SCALE, LEVELS, MAX_SIZE, UNDEF_PRICE, SnapshotChunk
from lobsurf.data.store import Instrument
from lobsurf.data.trades import SIDE_UNKNOWN, TradeChunk
from lobsurf.errors import UserError

#: Fixed-point units (1e-9) per LOBSTER price unit (1e-4 dollars).
PRICE_TO_FIXED = FIXED_PRICE_SCALE // 10_000
#: Placeholder prices of unoccupied levels.
ASK_PLACEHOLDER = 9_999_999_999
BID_PLACEHOLDER = -9_999_999_999
#: Message file columns, in order.
MESSAGE_COLUMNS = ("time", "event_type", "order_id", "size", "price", "direction")
#: Columns per level of the orderbook file, in order.
LEVEL_COLUMNS = ("ask_px", "ask_sz", "bid_px", "bid_sz")
NS_PER_SECOND = 1_000_000_000
#: message times are seconds after midnight of the file's date: less than one day
SECONDS_PER_DAY = 86_400
#: largest price (1e-4 dollars) whose fixed-point value fits int64
MAX_PRICE = np.iinfo(np.int64).max // PRICE_TO_FIXED
#: message event types of executions: visible and hidden limit orders
EXECUTION_VISIBLE, EXECUTION_HIDDEN = 4, 5
#: from this date on, hidden executions carry direction 1 whatever the side (Nasdaq masks it)
HIDDEN_SIDE_MASKED_FROM = dt.date(2014, 7, 14)
_NAME = re.compile(r"^(?P<ticker>.+?)_(?P<date>\d{4}-\d{2}-\d{2})_(?P<start_ms>\d+)_(?P<end_ms>\d+)"
                   r"_(?P<kind>orderbook|message)_(?P<levels>\d+)\.csv$")


@dataclass(frozen=True)
class LobsterConfig:
    """How LOBSTER files are read."""

    chunk_rows: int = 100_000  # rows per parsed chunk: bounds memory (~0.5 KB per row)
    timezone: str = "America/New_York"  # exchange wall clock of the message times
    tick_size: float = 0.01  # dollars; US equities above $1


@dataclass(frozen=True)
class LobsterName:
    """The parts of a LOBSTER file name."""

    ticker: str
    date: dt.date
    start_ms: int  # milliseconds after midnight of the requested window
    end_ms: int
    kind: str  # "orderbook" or "message"
    levels: int


def parse_lobster_name(path: str | Path) -> LobsterName:
    """Split ``TICKER_YYYY-MM-DD_START_END_KIND_LEVELS.csv``; ``UserError`` if it is not one."""
    name = Path(path).name
    match = _NAME.match(name)
    if match is None:
        raise UserError(f"{path}: not a LOBSTER file name "
                        "(expected TICKER_YYYY-MM-DD_STARTMS_ENDMS_orderbook_LEVELS.csv)")
    try:
        date = dt.date.fromisoformat(match["date"])
    except ValueError as exc:
        raise UserError(f"{path}: bad date in file name: {exc}") from None
    return LobsterName(match["ticker"], date, int(match["start_ms"]), int(match["end_ms"]),
                       match["kind"], int(match["levels"]))


def find_message_file(orderbook_path: str | Path) -> Path:
    """The ``*_message_N.csv`` beside an ``*_orderbook_N.csv`` (``UserError`` if absent)."""
    path = Path(orderbook_path)
    name = parse_lobster_name(path)
    if name.kind != "orderbook":
        raise UserError(f"{path}: expected an *_orderbook_N.csv file")
    message = path.with_name(path.name.replace("_orderbook_", "_message_"))
    if not message.is_file():
        raise UserError(f"{path}: its message file {message.name} is missing")
    return message


def lobster_instrument(path: str | Path, config: LobsterConfig = LobsterConfig()) -> Instrument:
    """Instrument of a LOBSTER file: ticker from the name, id = CRC-32 of the ticker.

    The id is stable across files and runs so several days of one ticker share it.
    """
    ticker = parse_lobster_name(path).ticker
    return Instrument(instrument_id=zlib.crc32(ticker.encode()) & 0x7FFF_FFFF, symbol=ticker,
                      tick_size_fixed=round(config.tick_size * FIXED_PRICE_SCALE),
                      multiplier=1.0, currency="USD")


def iter_lobster(orderbook_path: str | Path, message_path: str | Path | None = None,
                 chunk_rows: int | None = None, *,
                 config: LobsterConfig = LobsterConfig()) -> Iterator[SnapshotChunk]:
    """Stream a LOBSTER orderbook/message pair as snapshot chunks in store units (the
    arguments of ``iter_lobster_with_trades``, without the trades)."""
    for chunk, _ in iter_lobster_with_trades(orderbook_path, message_path, chunk_rows,
                                             config=config):
        yield chunk


def iter_lobster_with_trades(orderbook_path: str | Path, message_path: str | Path | None = None,
                             chunk_rows: int | None = None, *,
                             config: LobsterConfig = LobsterConfig()
                             ) -> Iterator[tuple[SnapshotChunk, TradeChunk]]:
    """Stream a LOBSTER orderbook/message pair as snapshot chunks in store units, each
    with the executions of its rows (``row``: the message's row in the chunk).

    Args:
        orderbook_path: the ``*_orderbook_N.csv`` file.
        message_path: its message file; found by name when None.
        chunk_rows: rows per yielded chunk (default ``config.chunk_rows``).
        config: time zone, tick size, default chunk size.

    Yields:
        (SnapshotChunk of up to ``chunk_rows`` rows: [n] times, [n, 10] book columns;
        TradeChunk of the executions among them)
    """
    book_path = Path(orderbook_path)
    name = parse_lobster_name(book_path)
    if not book_path.is_file():
        raise UserError(f"{book_path}: no such file")
    msg_path = find_message_file(book_path) if message_path is None else Path(message_path)
    if not msg_path.is_file():
        raise UserError(f"{msg_path}: no such message file")
    rows_per_chunk = config.chunk_rows if chunk_rows is None else chunk_rows
    if rows_per_chunk < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {rows_per_chunk}")
    midnight = _Midnight(name.date, ZoneInfo(config.timezone))
    instrument_id = lobster_instrument(book_path, config).instrument_id
    # Undecodable bytes become U+FFFD, which then fails the number check with its line.
    with book_path.open(encoding="ascii", errors="replace") as book_file, \
            msg_path.open(encoding="ascii", errors="replace") as msg_file:
        books = _line_chunks(book_path, book_file, rows_per_chunk)
        messages = _line_chunks(msg_path, msg_file, rows_per_chunk)
        rows_done = 0
        for book_chunk, msg_chunk in _lockstep(books, messages, book_path, msg_path):
            (book_line, book_lines), (msg_line, msg_lines) = book_chunk, msg_chunk
            book = _parse_ints(book_path, book_line, book_lines, 4 * name.levels)
            ts_ns, messages = _parse_messages(msg_path, msg_line, msg_lines, midnight)
            _check_ranges(book_path, book_line, book)
            trades = _executions(msg_path, msg_line, messages,
                                 hidden_side_known=name.date < HIDDEN_SIDE_MASKED_FROM)
            yield _to_chunk(book, ts_ns, instrument_id), trades
            rows_done += len(book_lines)
        if rows_done == 0:
            raise UserError(f"{book_path}: no rows")


def _line_chunks(path: Path, fh, chunk_rows: int) -> Iterator[tuple[int, list[str]]]:
    # (first line number, lines) with blank lines allowed only at the end of the file, so
    # line numbers inside a chunk are consecutive.
    line_no = 0
    while True:
        lines = list(islice(fh, chunk_rows))
        if not lines:
            return
        kept = [line for line in lines if line.strip()]
        if len(kept) != len(lines):
            # Blank lines: fine only if nothing but blank lines follows them.
            first_blank = next(i for i, line in enumerate(lines) if not line.strip())
            if any(line.strip() for line in lines[first_blank:]) or any(
                    line.strip() for line in fh):
                raise UserError(f"{path}:{line_no + first_blank + 1}: blank line inside the file")
        if kept:
            yield line_no + 1, kept
        line_no += len(lines)


def _lockstep(books: Iterator, messages: Iterator, book_path: Path, msg_path: Path) -> Iterator:
    # Pairs of chunks; both files chunk at the same line numbers, so a length difference
    # means one file ended early.
    while True:
        book, msg = next(books, None), next(messages, None)
        book_rows = 0 if book is None else len(book[1])
        msg_rows = 0 if msg is None else len(msg[1])
        if book_rows != msg_rows:
            longer, shorter = (book_path, msg_path) if book_rows > msg_rows else (msg_path, book_path)
            line = (book or msg)[0] + min(book_rows, msg_rows)
            raise UserError(f"{longer}:{line}: row count mismatch: {shorter.name} has no row "
                            f"{line} (orderbook and message rows must pair up)")
        if book is None:
            return
        yield book, msg


def _parse_ints(path: Path, first_line: int, lines: list[str], columns: int,
                skip_first: bool = False) -> np.ndarray:
    # [n, columns - skip_first] int64 through numpy's C parser; on any failure find the
    # exact bad line. skip_first leaves column 1 (message times) to the caller.
    text = [line.partition(",")[2] for line in lines] if skip_first else lines
    try:
        values = np.loadtxt(text, delimiter=",", dtype=np.int64, ndmin=2, comments=None)
    except ValueError:
        values = None
    if values is None or values.shape != (len(lines), columns - skip_first):
        _raise_first_bad_line(path, first_line, lines, columns, skip_first)
        raise UserError(f"{path}:{first_line}: cannot parse the {len(lines)} lines from here "
                        f"as {columns} comma-separated integers")
    return values


def _raise_first_bad_line(path: Path, first_line: int, lines: list[str], columns: int,
                          skip_first: bool) -> None:
    for offset, line in enumerate(lines):
        fields = line.strip().split(",")
        where = f"{path}:{first_line + offset}"
        if len(fields) != columns:
            raise UserError(f"{where}: expected {columns} columns, found {len(fields)}")
        for col, text in enumerate(fields[skip_first:], start=1 + skip_first):
            if not _is_int(text):
                raise UserError(f"{where}: column {col}: {text.strip()!r} is not an integer")


def _is_int(text: str) -> bool:
    digits = text.strip()
    digits = digits[1:] if digits[:1] in "+-" else digits
    return digits.isdigit() and digits.isascii()


class _Midnight:
    """UTC nanoseconds of local wall-clock times on one date (exact, DST-aware)."""

    def __init__(self, date: dt.date, zone: ZoneInfo):
        self.date, self.zone = date, zone

    def to_utc_ns(self, seconds: np.ndarray, nanos: np.ndarray) -> np.ndarray:
        # The UTC offset is constant within a chunk unless a DST switch falls inside it:
        # check both ends and fall back to per-row offsets only then.
        offsets = [self._offset_s(int(seconds[0])), self._offset_s(int(seconds[-1]))]
        if offsets[0] == offsets[1]:
            offset = np.int64(offsets[0])
        else:
            offset = np.array([self._offset_s(int(s)) for s in seconds], np.int64)
        # UTC = wall clock - offset; the wall clock is the date's 00:00 plus ``seconds``.
        date_start_s = int(dt.datetime.combine(self.date, dt.time(), dt.timezone.utc).timestamp())
        return (date_start_s + seconds - offset) * NS_PER_SECOND + nanos

    def _offset_s(self, seconds: int) -> int:
        wall = dt.datetime.combine(self.date, dt.time()) + dt.timedelta(seconds=seconds)
        return int(wall.replace(tzinfo=self.zone).utcoffset().total_seconds())


def _parse_messages(path: Path, first_line: int, lines: list[str],
                    midnight: _Midnight) -> tuple[np.ndarray, np.ndarray]:
    # ([n] int64 UTC ns, [n, 5] int64 columns 2..6: event type, order id, size, price, direction)
    values = _parse_ints(path, first_line, lines, len(MESSAGE_COLUMNS), skip_first=True)
    seconds = np.empty(len(lines), np.int64)
    nanos = np.empty(len(lines), np.int64)
    for i, line in enumerate(lines):
        whole, _, frac = line.partition(",")[0].strip().partition(".")
        if not (whole.isdigit() and whole.isascii() and len(whole) <= len(str(SECONDS_PER_DAY))
                and int(whole) < SECONDS_PER_DAY
                and (frac == "" or (frac.isdigit() and frac.isascii() and len(frac) <= 9))):
            raise UserError(f"{path}:{first_line + i}: column 1: {whole}.{frac} is not a time "
                            "of the day (seconds after midnight, < 86400, at most 9 decimals)")
        seconds[i] = int(whole)
        nanos[i] = int(frac.ljust(9, "0")) if frac else 0
    return midnight.to_utc_ns(seconds, nanos), values


def _executions(path: Path, first_line: int, messages: np.ndarray,
                hidden_side_known: bool) -> TradeChunk:
    """The execution messages (types 4 and 5) of a chunk as trades (module docstring)."""
    column = {name: k for k, name in enumerate(MESSAGE_COLUMNS[1:])}
    kind = messages[:, column["event_type"]]
    rows = np.flatnonzero((kind == EXECUTION_VISIBLE) | (kind == EXECUTION_HIDDEN))
    size = messages[rows, column["size"]]
    price = messages[rows, column["price"]]
    direction = messages[rows, column["direction"]]
    bad = ((size <= 0) | (size > MAX_SIZE) | (np.abs(price) > MAX_PRICE)
           | ((direction != 1) & (direction != -1)))
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise UserError(f"{path}:{first_line + int(rows[k])}: an execution needs a size in "
                        f"1..{MAX_SIZE}, a price within +-{MAX_PRICE} and a direction of 1 or "
                        f"-1; got size {size[k]}, price {price[k]}, direction {direction[k]}")
    side = -direction  # direction is the resting order's side; the aggressor is the other
    if not hidden_side_known:
        side = np.where(kind[rows] == EXECUTION_HIDDEN, SIDE_UNKNOWN, side)
    return TradeChunk(row=rows.astype(np.int64), price=price * PRICE_TO_FIXED,
                      size=size.astype(np.int64), side=side.astype(np.int8))


def _check_ranges(path: Path, first_line: int, book: np.ndarray) -> None:
    """Refuse prices whose fixed-point value would overflow and sizes the store cannot hold,
    naming the first such line and column (they would otherwise wrap around silently)."""
    n = book.shape[0]
    per_level = book.reshape(n, -1, len(LEVEL_COLUMNS))
    is_px = np.array([name.endswith("_px") for name in LEVEL_COLUMNS])
    placeholder = (per_level == ASK_PLACEHOLDER) | (per_level == BID_PLACEHOLDER)
    bad_px = is_px & ~placeholder & ((per_level > MAX_PRICE) | (per_level < -MAX_PRICE))
    bad_sz = ~is_px & ((per_level < 0) | (per_level > MAX_SIZE))
    bad = (bad_px | bad_sz).reshape(n, -1)
    if bad.any():
        row, col = (int(v) for v in np.argwhere(bad)[0])
        what = "price" if is_px[col % len(LEVEL_COLUMNS)] else "size"
        raise UserError(f"{path}:{first_line + row}: column {col + 1}: {what} {book[row, col]} "
                        "is out of range")


def _to_chunk(book: np.ndarray, ts_ns: np.ndarray, instrument_id: int) -> SnapshotChunk:
    n, levels = book.shape[0], book.shape[1] // len(LEVEL_COLUMNS)
    per_level = book.reshape(n, levels, len(LEVEL_COLUMNS))[:, :LEVELS]
    out = {}
    for side, placeholder in (("ask", ASK_PLACEHOLDER), ("bid", BID_PLACEHOLDER)):
        px = per_level[:, :, LEVEL_COLUMNS.index(f"{side}_px")]
        sz = per_level[:, :, LEVEL_COLUMNS.index(f"{side}_sz")]
        empty = px == placeholder
        full_px = np.full((n, LEVELS), UNDEF_PRICE, np.int64)
        full_sz = np.zeros((n, LEVELS), np.int64)
        full_px[:, :px.shape[1]] = np.where(empty, UNDEF_PRICE, px * PRICE_TO_FIXED)
        full_sz[:, :sz.shape[1]] = np.where(empty, 0, sz)
        out[f"{side}_px"], out[f"{side}_sz"] = full_px, full_sz
        out[f"{side}_ct"] = np.zeros((n, LEVELS), np.int64)
    return SnapshotChunk(ts_event_ns=ts_ns.copy(), ts_recv_ns=ts_ns,
                         instrument_id=np.full(n, instrument_id, np.int64), **out)
