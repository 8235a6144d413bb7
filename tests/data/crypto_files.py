"""Small Binance recordings and Tardis CSV files written by the tests.

Binance lines are ``<receive ns> <JSON>`` as hftbacktest's collector writes them: diff
events wrapped in the combined stream, the REST snapshot raw. ``random_recording`` makes a
consistent stream (a random-walk book, bookTickers at some event ids, trades) of any
length for end-to-end tests.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

#: 2024-08-08 23:50:00 UTC: recordings start ten minutes before midnight
T0 = 1_723_161_000 * 10**9
MS = 1_000_000


def px(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}000000"


def qty(units: int, decimals: int = 5) -> str:
    """``units`` of 10**-decimals as Binance spot writes a quantity (8 decimals)."""
    text = f"{units / 10**decimals:.{decimals}f}"
    return text + "0" * (8 - decimals)


def depth(first: int, last: int, bids: list, asks: list, ts: int, symbol: str = "BTCUSDT",
          prev: int | None = None) -> tuple[int, dict]:
    data = {"e": "depthUpdate", "E": ts // MS, "s": symbol, "U": first, "u": last,
            "b": bids, "a": asks}
    if prev is not None:
        data = {**data, "T": ts // MS, "pu": prev}
    return ts, {"stream": f"{symbol.lower()}@depth@100ms", "data": data}


def snapshot(last_id: int, bids: list, asks: list, ts: int) -> tuple[int, dict]:
    return ts, {"lastUpdateId": last_id, "bids": bids, "asks": asks}


def ticker(update_id: int, bid: str, bid_qty: str, ask: str, ask_qty: str, ts: int,
           symbol: str = "BTCUSDT") -> tuple[int, dict]:
    return ts, {"stream": f"{symbol.lower()}@bookTicker",
                "data": {"u": update_id, "s": symbol, "b": bid, "B": bid_qty, "a": ask,
                         "A": ask_qty}}


def trade(price: str, quantity: str, buyer_maker: bool, ts: int,
          symbol: str = "BTCUSDT") -> tuple[int, dict]:
    return ts, {"stream": f"{symbol.lower()}@trade",
                "data": {"e": "trade", "E": ts // MS, "s": symbol, "t": 1, "p": price,
                         "q": quantity, "T": ts // MS, "m": buyer_maker, "M": True}}


def write_recording(path: Path, lines: list[tuple[int, dict]], gz: bool = True) -> Path:
    text = "".join(f"{ts} {json.dumps(message, separators=(',', ':'))}\n"
                   for ts, message in lines)
    path.write_bytes(gzip.compress(text.encode(), mtime=0) if gz else text.encode())
    return path


def book_levels(mid: int, levels: int = 12) -> tuple[list, list]:
    """A snapshot's levels around ``mid`` cents: sizes 1..levels x 0.001."""
    bids = [[px(mid - 1 - k), qty(100 * (k + 1))] for k in range(levels)]
    asks = [[px(mid + 1 + k), qty(100 * (k + 1))] for k in range(levels)]
    return bids, asks


def random_recording(events: int, seed: int, start_ns: int = T0, futures: bool = False,
                     every_ns: int = 100 * MS, first_id: int = 1_000) -> list[tuple[int, dict]]:
    """A consistent recording: a snapshot, then ``events`` diff events of a random-walk
    book (never crossed), a bookTicker after every third event, a trade after every
    fifth. The snapshot line comes after the first two events (as recorders write it)."""
    rng = np.random.default_rng(seed)
    mid = 6_000_000
    bids = {mid - 1 - k: int(rng.integers(1, 3000)) for k in range(20)}
    asks = {mid + 1 + k: int(rng.integers(1, 3000)) for k in range(20)}
    snap = snapshot(first_id, [[px(p), qty(s)] for p, s in sorted(bids.items(), reverse=True)],
                    [[px(p), qty(s)] for p, s in sorted(asks.items())], start_ns + 150 * MS)
    lines, update_id, prev = [], first_id, first_id
    for i in range(events):
        ts = start_ns + (i + 1) * every_ns
        step = int(rng.integers(-1, 2))
        mid += step
        changes = {"b": [], "a": []}
        for key, side in (("b", bids), ("a", asks)):
            if side.pop(mid, None) is not None:  # the level the mid stepped onto goes
                changes[key].append([px(mid), qty(0)])
        for _ in range(int(rng.integers(1, 6))):
            key = "b" if rng.random() < 0.5 else "a"
            side = bids if key == "b" else asks
            price = mid - 1 - int(rng.integers(0, 15)) if key == "b" else (
                mid + 1 + int(rng.integers(0, 15)))
            size = 0 if rng.random() < 0.3 else int(rng.integers(1, 3000))
            if size:
                side[price] = size
            else:
                side.pop(price, None)
            changes[key].append([px(price), qty(size)])
        for key, side, near in (("b", bids, mid - 1), ("a", asks, mid + 1)):
            if not side:  # keep both sides alive
                side[near] = 100
                changes[key].append([px(near), qty(100)])
        n = len(changes["b"]) + len(changes["a"])
        lines.append(depth(update_id + 1, update_id + n, changes["b"], changes["a"], ts,
                           prev=prev if futures else None))
        prev, update_id = update_id + n, update_id + n
        if i % 3 == 0:
            best_bid, best_ask = max(bids), min(asks)
            lines.append(ticker(update_id, px(best_bid), qty(bids[best_bid]), px(best_ask),
                                qty(asks[best_ask]), ts + MS))
        if i % 5 == 0:
            lines.append(trade(px(min(asks)), qty(int(rng.integers(1, 500))),
                               bool(rng.random() < 0.5), ts + 2 * MS))
    lines.insert(min(2, len(lines)), snap)
    return lines


def tardis_incremental(path: Path, rows: list[tuple], exchange: str = "binance",
                       symbol: str = "BTCUSDT") -> Path:
    """rows: (timestamp us, local us, is_snapshot, side, price text, amount text)."""
    lines = ["exchange,symbol,timestamp,local_timestamp,is_snapshot,side,price,amount"]
    lines += [f"{exchange},{symbol},{ts},{local},{'true' if snap else 'false'},{side},{p},{a}"
              for ts, local, snap, side, p, a in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def tardis_snapshots(path: Path, levels: int, rows: list[tuple],
                     exchange: str = "binance-futures", symbol: str = "BTCUSDT") -> Path:
    """rows: (timestamp us, local us, [(ask px, amt)...], [(bid px, amt)...]) as texts;
    missing levels are written as empty fields."""
    header = ["exchange", "symbol", "timestamp", "local_timestamp"]
    for i in range(levels):
        header += [f"asks[{i}].price", f"asks[{i}].amount", f"bids[{i}].price",
                   f"bids[{i}].amount"]
    lines = [",".join(header)]
    for ts, local, asks, bids in rows:
        fields = [exchange, symbol, str(ts), str(local)]
        for i in range(levels):
            for side in (asks, bids):
                fields += list(side[i]) if i < len(side) else ["", ""]
        lines.append(",".join(fields))
    path.write_text("\n".join(lines) + "\n")
    return path


def tardis_trades(path: Path, rows: list[tuple], exchange: str = "binance-futures",
                  symbol: str = "BTCUSDT") -> Path:
    """rows: (timestamp us, local us, side, price text, amount text)."""
    lines = ["exchange,symbol,timestamp,local_timestamp,id,side,price,amount"]
    lines += [f"{exchange},{symbol},{ts},{local},{i},{side},{p},{a}"
              for i, (ts, local, side, p, a) in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n")
    return path
