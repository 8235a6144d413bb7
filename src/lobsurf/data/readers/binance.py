"""Binance recordings: ``<receive time ns> <JSON>`` lines (gzip or plain) -> book rows.

Role: the Binance input path of ``lobsurf ingest`` (spot and USD-M futures). A recording is
what hftbacktest's collector and most recorders write: one line per websocket message of
the combined stream (``{"stream": "btcusdt@depth@100ms", "data": {...}}``) prefixed by the
capture time in UNIX nanoseconds, plus the REST depth snapshot as a raw line
(``{"lastUpdateId": ..., "bids": [...], "asks": [...]}``). Unwrapped events (``"e":
"depthUpdate"``) are read too. Streams used:

* diff depth (``@depth``, ``@depth@100ms``, ``@depth@0ms``, ...): the book, rebuilt by
  Binance's documented procedure (``binance_sync``); one 10-level row per applied event,
  stamped with its capture time (or the snapshot's, for events received before the
  snapshot that bridged them) and its event time ``E``;
* ``bookTicker``: the independent check of the rebuilt best levels (``top_of_book_check``);
* ``trade``: the trades between rows (``lobsurf.data.trades``; ``m`` true: the buyer was
  the maker, so the seller was the aggressor); a recording without the trade stream says
  nothing of what traded, and its store holds no trades.

Partial-depth streams (``@depth20``), ``aggTrade`` and anything else are counted as
``unused_messages``. One instrument per recording: the first symbol seen; lines of another
symbol are counted as ``other_instrument``. COIN-M (inverse) futures are refused: their
sizes are contracts of a USD amount, which no multiplier turns into a linear PnL.

Several files of one stream (a recording split at midnight) are read as one: the book and
its update ids carry over from file to file. A malformed line is a ``UserError`` naming the
file and line.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from lobsurf.data.readers.binance_sync import APPLY, GAP, LOAD, DiffDepthSync
from lobsurf.data.readers.decimals import SizeUnit, price_fixed, size_atoms
from lobsurf.data.readers.l2_book import BookRows, CryptoChunk, L2Book, best_of
from lobsurf.data.readers.text_lines import NumberedLines, first_lines
from lobsurf.data.readers.top_of_book_check import TopOfBookCheck
from lobsurf.data.schema import LEVELS
from lobsurf.data.trades import SIDE_BUY, SIDE_SELL
from lobsurf.errors import UserError

SPOT, FUTURES = "binance", "binance-futures"
#: receive times must be UNIX nanoseconds between 2001-09-09 and 2096-10-02
MIN_NS, MAX_NS = 10**18, 4 * 10**18
NS_PER_MS = 1_000_000
MAX_MS = MAX_NS // NS_PER_MS  # event and trade times (ms) must fit the store's int64 ns
#: lines read from the start of a file to find its symbol and market
PEEK_LINES = 10_000


@dataclass(frozen=True)
class BinanceConfig:
    """How Binance recordings are read."""

    chunk_rows: int = 65_536
    """rows (plus trades) gathered before they go to the store (bounds memory)."""
    buffer_limit: int = 100_000
    """depth events kept while waiting for a snapshot to bridge them (older ones dropped)."""


@dataclass(frozen=True)
class StreamKey:
    """What identifies one recorded stream: venue (spot or USD-M) and symbol."""

    venue: str
    symbol: str

    @property
    def name(self) -> str:
        return f"{self.venue}:{self.symbol}"

    @property
    def instrument_id(self) -> int:
        # The same id a Tardis file of the instrument gets: CRC-32 of "venue:SYMBOL".
        return zlib.crc32(self.name.encode()) & 0x7FFF_FFFF


def peek_stream(path: str | os.PathLike) -> tuple[StreamKey, int]:
    """(the recording's stream, its first receive time) from its first lines."""
    path = Path(path)
    venue = symbol = None
    first_ns = None
    for number, raw in first_lines(path, PEEK_LINES):
        ns, kind, data = _parse_line(path, number, raw)
        first_ns = ns if first_ns is None else first_ns
        if kind == "unused":
            continue
        venue = venue or _venue_of(kind, data)
        symbol = symbol or (data.get("s") if kind != "snapshot" else data.get("symbol"))
        if venue and symbol:
            return StreamKey(venue, str(symbol).upper()), first_ns
    raise UserError(f"{path}: no Binance depth, bookTicker or trade message with a symbol in "
                    f"its first {PEEK_LINES:,} lines (expected '<receive time ns> <JSON>' lines)")


def records_trades(path: str | os.PathLike) -> bool:
    """Whether the recording has the trade stream (a trade among its first lines): only
    then do its rows say what traded between them (else the store holds no trades)."""
    path = Path(path)
    return any(_parse_line(path, number, raw)[1] == "trade"
               for number, raw in first_lines(path, PEEK_LINES) if raw.strip())


def _venue_of(kind: str, data: dict) -> str | None:
    # USD-M messages carry fields spot ones lack: pu (depth), e (bookTicker), T (snapshot, trade
    # has X); a trade alone is ambiguous only in theory (spot has M, USD-M X).
    if "ps" in data or "pair" in data:
        return "coin-m"
    if kind == "depth":
        return FUTURES if "pu" in data else SPOT
    if kind == "ticker":
        return FUTURES if "e" in data else SPOT
    if kind == "snapshot":
        return FUTURES if "T" in data else SPOT
    return FUTURES if "X" in data else SPOT


_DECODER = json.JSONDecoder(parse_float=str)  # a number written as JSON stays exact text
_SCAN = _DECODER.scan_once


def _decode(text: str):
    """The JSON value of ``text``. A line is one JSON value with nothing around it, so the
    decoder's scanner reads it directly (``decode`` adds two whitespace matches); anything
    else (surrounding whitespace, extra data, no value) goes through ``decode``, which
    raises exactly what it always did."""
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:  # no value at 0: leading whitespace, or not JSON
        return _DECODER.decode(text)
    return value if end == len(text) else _DECODER.decode(text)


def _parse_line(path: Path, number: int, raw: bytes) -> tuple[int, str, dict]:
    """(receive ns, kind, message) of one line; kind: depth, snapshot, ticker, trade, unused."""
    ts_text, _, body = raw.partition(b" ")
    ns = int(ts_text) if ts_text.isdigit() else 0
    if not MIN_NS <= ns < MAX_NS:
        raise UserError(f"{path}:{number}: expected '<receive time in UNIX ns> <JSON>', "
                        f"found {raw[:40]!r}")
    try:
        message = _decode(body.decode())
    except (ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}:{number}: not a JSON message ({exc})") from None
    if type(message) is not dict:
        raise UserError(f"{path}:{number}: not a JSON object")
    stream = message.get("stream")
    if stream is not None:
        data = message.get("data")
        if type(stream) is str and type(data) is dict:
            kind = _STREAM_KINDS.get(stream.partition("@")[2])
            return ns, kind or _stream_kind(stream), data
    if "lastUpdateId" in message:
        return ns, "snapshot", message
    event = message.get("e")
    if event == "depthUpdate":
        return ns, "depth", message
    if event in ("trade", "bookTicker"):
        return ns, "trade" if event == "trade" else "ticker", message
    if event is None and {"u", "b", "B", "a", "A"} <= message.keys():
        return ns, "ticker", message
    return ns, "unused", message


_STREAM_KINDS = {"depth": "depth", "depth@100ms": "depth", "depth@0ms": "depth",
                 "bookTicker": "ticker", "trade": "trade"}


def _stream_kind(stream: str) -> str:
    name = stream.partition("@")[2]
    if name == "depth" or name.startswith("depth@"):
        return "depth"  # diff depth at any speed; depth5/10/20 are partial books: unused
    return {"bookTicker": "ticker", "trade": "trade"}.get(name, "unused")


class BinanceReader:
    """Reads the files of one stream in order (module doc); iterate for ``CryptoChunk``s."""

    def __init__(self, paths: list[Path], key: StreamKey, unit: SizeUnit,
                 config: BinanceConfig = BinanceConfig()):
        if key.venue == "coin-m":
            raise UserError(f"{paths[0]}: a Binance COIN-M (inverse) futures recording; only spot "
                            "and USD-M futures are supported (inverse contracts' sizes are "
                            "USD contracts, and their PnL is not linear in the price)")
        self.paths, self.key, self.config = paths, key, config
        self.book = L2Book()
        self.sync = DiffDepthSync(config.buffer_limit)
        self.check = TopOfBookCheck()
        self.rows = BookRows(key.instrument_id, unit, records_trades(paths[0]))
        self.counts = {"unused_messages": 0, "other_instrument": 0, "truncated_file": 0}
        self.sizes = [p.stat().st_size for p in paths]
        self._lines: NumberedLines | None = None
        self._done_bytes = 0
        self._loaded_ns = 0  # capture time of the snapshot the book was loaded from
        self._break = False
        self.messages = 0

    def position(self) -> int:
        """Bytes of the group's files read so far."""
        return self._done_bytes + (self._lines.position() if self._lines else 0)

    def __iter__(self) -> Iterator[CryptoChunk]:
        rows, chunk_rows, symbol = self.rows, self.config.chunk_rows, self.key.symbol
        for path in self.paths:
            name = str(path)  # the rows' file, and the messages' (once, not per line)
            self._lines = NumberedLines(path)
            for number, raw in self._lines:
                if not raw or raw.isspace():
                    continue
                ns, kind, data = _parse_line(path, number, raw)
                if kind == "depth" and data.get("s") == symbol:  # the bulk of a recording
                    self.messages += 1
                    self._depth(ns, data, name, number)
                else:
                    self._line(name, number, ns, kind, data)
                if len(rows) >= chunk_rows:
                    yield rows.flush()
            self.counts["truncated_file"] += self._lines.truncated
            self._done_bytes += self._lines.size
            self._lines = None
        self.sync.finish()
        if len(self.rows) or self.rows.pending_rescale > 1:
            yield self.rows.flush()

    def all_counts(self) -> dict[str, int]:
        """Messages and events not used, by reason (the manifest's skipped counts)."""
        used = ("snapshot_used",)
        return {**self.counts, **{k: v for k, v in self.sync.counts.items() if k not in used}}

    def checks(self) -> dict[str, int]:
        """The bookTicker check's counts and the snapshots the book (re)started from."""
        return {**self.check.counts, "book_starts": self.sync.counts["snapshot_used"]}

    def _line(self, path: str, number: int, ns: int, kind: str, data: dict) -> None:
        if kind == "unused":
            self.counts["unused_messages"] += 1
            return
        self.messages += 1
        symbol = data.get("s") if kind != "snapshot" else data.get("symbol")
        if symbol is not None and symbol != self.key.symbol and (
                str(symbol).upper() != self.key.symbol):
            self.counts["other_instrument"] += 1
            return
        try:
            if kind == "depth":
                self._depth(ns, data, path, number)
            elif kind == "snapshot":
                self._snapshot(ns, data, (path, number))
            elif kind == "ticker":
                texts = tuple(data[k] for k in ("b", "B", "a", "A"))
                self.check.on_ticker(_int(data, "u"), texts, f"{path}:{number}")
            else:
                self._trade(ns, data, (path, number))
        except (KeyError, TypeError, ValueError) as exc:
            what = f"no field {exc}" if isinstance(exc, KeyError) else str(exc)
            raise UserError(f"{path}:{number}: bad {kind} message: {what}") from None

    def _depth(self, ns: int, data: dict, path: str, number: int) -> None:
        try:
            first, last, event_ms = data["U"], data["u"], data["E"]
            bids, asks = data["b"], data["a"]
        except KeyError as exc:
            raise UserError(f"{path}:{number}: bad depth message: no field {exc}") from None
        prev = data.get("pu")
        if not (type(first) is int and type(last) is int and type(event_ms) is int
                and 0 <= event_ms < MAX_MS and (prev is None or type(prev) is int) and first <= last
                and type(bids) is list and type(asks) is list) or "ps" in data:
            try:
                _check_depth(data)
            except (KeyError, ValueError) as exc:
                raise UserError(f"{path}:{number}: bad depth message: {exc}") from None
        if self.sync.advance(first, last, prev):  # in sync: the bulk of a recording
            self._apply(bids, asks, last, ns, event_ms * NS_PER_MS, path, number)
        else:
            payload = (bids, asks, last, ns, event_ms * NS_PER_MS, path, number)
            self._steps(self.sync.on_event(first, last, prev, payload))

    def _snapshot(self, ns: int, data: dict, where: tuple[str, int]) -> None:
        if not isinstance(data["bids"], list) or not isinstance(data["asks"], list):
            raise ValueError("bids/asks not lists")
        self._steps(self.sync.on_snapshot(_int(data, "lastUpdateId"), (data, ns, where)))

    def _trade(self, ns: int, data: dict, where: tuple[str, int]) -> None:
        if not isinstance(data["m"], bool):
            raise ValueError(f"m {data['m']!r} is not true or false")
        side = SIDE_SELL if data["m"] else SIDE_BUY  # m: the buyer was the maker
        self.rows.add_trade(price_fixed(data["p"]), size_atoms(data["q"]), side, where)

    def _apply(self, bids: list, asks: list, last: int, ns: int, event_ns: int, path: str,
               number: int) -> None:
        """Apply one depth event (after ``sync`` said so) and emit its row."""
        book = self.book
        try:
            book.apply(True, bids)
            book.apply(False, asks)
        except (TypeError, ValueError) as exc:
            raise UserError(f"{path}:{number}: bad depth level: {exc}") from None
        loaded = self._loaded_ns
        top = book.top_keys(LEVELS)
        self.rows.add_top(top, ns if ns > loaded else loaded, event_ns, path, number,
                          self._break)
        self._break = False
        self.check.on_depth(last, best_of(top))

    def _steps(self, steps: list) -> None:
        for step, payload in steps:
            if step == APPLY:
                self._apply(*payload)
            elif step == LOAD:
                data, ns, where = payload
                try:
                    self.book.load(data["bids"], data["asks"])
                except (TypeError, ValueError) as exc:
                    raise UserError(f"{where[0]}:{where[1]}: bad snapshot level: {exc}") from None
                self.rows.observe_sizes(self.book.all_sizes(), where)
                self._loaded_ns = ns
            elif step == GAP:
                self.book.clear()
                self.check.drop_book()
                self._break = True


def _check_depth(data: dict) -> None:
    """Raise the ValueError that says what is wrong with a depth event."""
    if "ps" in data:
        raise ValueError("a COIN-M (inverse) futures event; only spot and USD-M are read")
    for key in ("U", "u", "E", *(("pu",) if "pu" in data else ())):
        _int(data, key)
    if not 0 <= data["E"] < MAX_MS:
        raise ValueError(f"E {data['E']} is not a time in UNIX milliseconds")
    if data["U"] > data["u"]:
        raise ValueError(f"U {data['U']} > u {data['u']}")
    raise ValueError("b and a must be lists of [price, quantity]")


def _int(data: dict, key: str) -> int:
    value = data[key]
    if type(value) is not int:
        raise ValueError(f"{key} {value!r} is not an integer")
    return value
