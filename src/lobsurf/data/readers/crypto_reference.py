"""Slow, plain references of the Binance and Tardis book rebuilds, for tests only.

They share no code with the readers (``binance``, ``binance_sync``, ``tardis``, ``l2_book``,
``decimals``, ``text_lines``): the files are read with ``gzip``/``csv``/``json``, numbers
are ``decimal.Decimal``, each side of the book is a plain dict, and the top 10 levels are
sorted afresh after every message. Each returns every row the rebuild emits, valid or not,
so a test can hold the store to the rows these rules give:

``RefRow``: capture and exchange time (ns), whether the row starts a new series (after a
gap), and the top 10 levels of each side as (price, quantity) Decimals, best first.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

DEPTH = 10


@dataclass
class RefRow:
    ts_recv_ns: int
    ts_event_ns: int
    starts_series: bool
    bids: list[tuple[Decimal, Decimal]]
    asks: list[tuple[Decimal, Decimal]]


@dataclass
class RefResult:
    rows: list[RefRow] = field(default_factory=list)
    gaps: int = 0
    stale: int = 0
    trades: list[tuple[int, Decimal, Decimal, int]] = field(default_factory=list)
    tickers_aligned: int = 0
    tickers_agree: int = 0


def _open_text(path: Path):
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    return io.TextIOWrapper(gzip.open(path), "ascii") if gz else open(path, encoding="ascii")


def _top(side: dict, bids: bool) -> list[tuple[Decimal, Decimal]]:
    return sorted(side.items(), reverse=bids)[:DEPTH]


def _set(side: dict, levels: list) -> None:
    for price, qty in levels:
        if Decimal(qty) == 0:
            side.pop(Decimal(price), None)
        else:
            side[Decimal(price)] = Decimal(qty)


def reference_binance(paths: list[Path]) -> RefResult:
    """Binance's documented diff-depth procedure over the recordings, in order."""
    out = RefResult()
    book = None  # (bids, asks) or None
    last_id = 0
    futures = None
    snapshot = None  # (lastUpdateId, message, ts)
    waiting: list[tuple[int, dict]] = []
    tops: dict[int, tuple] = {}
    tickers: dict[int, tuple] = {}
    loaded_ts = 0
    new_series = False

    def emit(ts: int, data: dict) -> None:
        nonlocal new_series
        rows_bids, rows_asks = _top(book[0], True), _top(book[1], False)
        out.rows.append(RefRow(max(ts, loaded_ts), data["E"] * 1_000_000, new_series,
                               rows_bids, rows_asks))
        new_series = False
        best = (rows_bids[0] if rows_bids else None, rows_asks[0] if rows_asks else None)
        tops[data["u"]] = best

    def chained(data: dict) -> bool:
        return data["pu"] == last_id if futures else data["U"] == last_id + 1

    def start() -> None:
        # the waiting events against the snapshot: drop stale ones, then the first must
        # bridge it; the rest follow the chain (a break sends them back to waiting)
        nonlocal book, last_id, snapshot, waiting, loaded_ts, new_series
        if snapshot is None:
            return
        last, message, ts = snapshot
        while waiting and (waiting[0][1]["u"] < last if futures else waiting[0][1]["u"] <= last):
            waiting.pop(0)
            out.stale += 1
        if not waiting:
            return
        first = waiting[0][1]
        snapshot = None
        bridge = (first["U"] <= last <= first["u"]) if futures else (
            first["U"] <= last + 1 <= first["u"])
        if not bridge:
            return
        book = ({}, {})
        _set(book[0], message["bids"])
        _set(book[1], message["asks"])
        loaded_ts = ts
        pending, waiting = waiting, []
        ts0, data0 = pending[0]
        _set(book[0], data0["b"])
        _set(book[1], data0["a"])
        last_id = data0["u"]
        emit(ts0, data0)
        for ts_i, data_i in pending[1:]:
            event(ts_i, data_i)

    def event(ts: int, data: dict) -> None:
        nonlocal book, last_id, new_series, futures, snapshot
        if futures is None:
            futures = data.get("pu") is not None
        if book is None:
            waiting.append((ts, data))
            start()
            return
        if chained(data):
            _set(book[0], data["b"])
            _set(book[1], data["a"])
            last_id = data["u"]
            if snapshot is not None and snapshot[0] <= last_id:
                snapshot = None  # the book has passed it: never a restart point
            emit(ts, data)
        elif data["u"] > last_id:
            out.gaps += 1
            book, new_series = None, True
            waiting.append((ts, data))
            start()

    symbol = None  # the recording's: the first one named
    for path in paths:
        with _open_text(path) as text:
            for line in text:
                if not line.strip():
                    continue
                ts_text, message = line.split(" ", 1)
                message = json.loads(message)
                ts = int(ts_text)
                if "stream" in message:
                    name, data = message["stream"].split("@", 1)[1], message["data"]
                    kind = ("depth" if name.split("@")[0] == "depth" else
                            {"bookTicker": "ticker", "trade": "trade"}.get(name, ""))
                elif "lastUpdateId" in message:
                    kind, data = "snapshot", message
                else:
                    kind, data = {"depthUpdate": "depth", "trade": "trade",
                                  "bookTicker": "ticker"}.get(message.get("e"), ""), message
                named = data.get("symbol" if kind == "snapshot" else "s") if kind else None
                if named is not None:
                    symbol = symbol or str(named).upper()
                    if str(named).upper() != symbol:
                        continue  # another instrument's message
                if kind == "depth":
                    event(ts, data)
                elif kind == "snapshot":
                    if book is None or data["lastUpdateId"] > last_id:
                        snapshot = (data["lastUpdateId"], data, ts)
                        if book is None:
                            start()
                elif kind == "ticker":
                    tickers[data["u"]] = (Decimal(data["b"]), Decimal(data["B"]),
                                          Decimal(data["a"]), Decimal(data["A"]))
                elif kind == "trade":
                    out.trades.append((ts, Decimal(data["p"]), Decimal(data["q"]),
                                       -1 if data["m"] else 1))
    for update_id, ticker in tickers.items():
        if update_id in tops:
            out.tickers_aligned += 1
            bid, ask = tops[update_id]
            out.tickers_agree += (bid, ask) == ((ticker[0], ticker[1]), (ticker[2], ticker[3]))
    return out


def reference_tardis_incremental(paths: list[Path]) -> RefResult:
    """Tardis incremental_book_L2 files of one stream, in order: one row per message."""
    out = RefResult()
    bids: dict = {}
    asks: dict = {}
    stream = None  # (exchange, SYMBOL) of the first row: other rows are another instrument's
    for index, path in enumerate(paths):
        with _open_text(path) as text:
            rows = list(csv.DictReader(text))
        stream = stream or (rows[0]["exchange"], rows[0]["symbol"].upper())
        rows = [r for r in rows if (r["exchange"], r["symbol"].upper()) == stream]
        have_book = False
        skipped = False
        message: list[dict] = []
        groups: list[list[dict]] = []
        for row in rows:  # messages: runs of snapshot rows, or update rows of one time
            key = ("s",) if row["is_snapshot"] == "true" else ("u", row["local_timestamp"])
            if message and key != message[0]["_key"]:
                groups.append(message)
                message = []
            row["_key"] = key
            message.append(row)
        if message:
            groups.append(message)
        for group in groups:
            snapshot = group[0]["is_snapshot"] == "true"
            if not snapshot and not have_book:
                skipped = True
                continue
            restart = False
            if snapshot:
                restart = bool(bids or asks) and (skipped or index == 0 or have_book)
                bids, asks = {}, {}
                have_book = True
            for row in group:
                side = bids if row["side"] == "bid" else asks
                _set(side, [(row["price"], row["amount"])])
            last = group[-1]
            out.gaps += restart
            out.rows.append(RefRow(int(last["local_timestamp"]) * 1000,
                                   int(last["timestamp"]) * 1000, restart,
                                   _top(bids, True), _top(asks, False)))
    return out
