"""A seeded FIFO market written as CME-style MBO records, for the queue check's tests.

Every event packet ends with a valid book (two-sided, uncrossed), so each packet is one
store row. Packets add orders near the touch, cancel or modify orders, or trade: an
aggressor walks the other side's FIFO queues from the best level on (a ``T`` per price,
an ``F`` per resting order filled, then the book changes: ``C`` for a filled order, ``M``
to the rest for a partial fill). With ``fresh_only`` every cancel and modify hits an order
added since the last ``post_rows`` row, so it is behind every order that any check posts
at those rows (the case where the ``risk_averse`` queue is exact).
"""

from __future__ import annotations

import numpy as np

from lobsurf.data.schema import F_LAST

TICK = 0.25
BID, ASK = 0, 1


def fifo_stream(packets: int, seed: int, post_rows: set[int], fresh_only: bool = True
                ) -> list[tuple]:
    """(action, side, order id, price in currency, size, flags) records, ``packets`` packets."""
    rng = np.random.default_rng(seed)
    book: tuple[dict[int, list[list[int]]], ...] = ({}, {})  # side: price -> [[id, size]]
    fresh: set[int] = set()
    out: list[tuple] = []
    ids = iter(range(1, 10**9))

    def emit(action: str, side: int | None, oid: int, price: int, size: int) -> None:
        out.append((action, "N" if side is None else "BA"[side], oid, price * TICK, size, 0))

    def add(side: int, price: int, size: int) -> None:
        oid = next(ids)
        book[side].setdefault(price, []).append([oid, size])
        fresh.add(oid)
        emit("A", side, oid, price, size)

    def best(side: int) -> int:
        return max(book[BID]) if side == BID else min(book[ASK])

    def locate(oid: int) -> tuple[int, int, list[int]]:
        for side in (BID, ASK):
            for price, queue in book[side].items():
                for entry in queue:
                    if entry[0] == oid:
                        return side, price, entry
        raise KeyError(oid)

    def take_out(side: int, price: int, entry: list[int]) -> None:
        book[side][price].remove(entry)
        if not book[side][price]:
            del book[side][price]

    def near_price(side: int) -> int:
        if side == BID:
            return best(ASK) - int(rng.integers(1, 4))
        return best(BID) + int(rng.integers(1, 4))

    def trade() -> None:
        side = int(rng.integers(2))  # the side the aggressor takes
        depth = sum(s for q in book[side].values() for _, s in q)
        lots = int(rng.integers(1, min(depth, 12)))
        taker = next(ids)
        changes = []
        for price in sorted(book[side], reverse=side == BID):
            if not lots:
                break
            queue = book[side][price]
            at_price = []
            for entry in queue:
                got = min(entry[1], lots)
                if not got:
                    break
                at_price.append((entry, got))
                lots -= got
            emit("T", 1 - side, taker, price, sum(g for _, g in at_price))
            for entry, got in at_price:
                emit("F", side, entry[0], price, got)
                changes.append((price, entry, got))
        for price, entry, got in changes:
            if got == entry[1]:
                emit("C", side, entry[0], price, got)
                take_out(side, price, entry)
            else:
                entry[1] -= got
                emit("M", side, entry[0], price, entry[1])

    def cancel_or_modify(kind: str) -> bool:
        pool = sorted(fresh) if fresh_only else [e[0] for s in (BID, ASK)
                                                  for q in book[s].values() for e in q]
        live = [oid for oid in pool if any(e[0] == oid for s in (BID, ASK)
                                          for q in book[s].values() for e in q)]
        if not live:
            return False
        side, price, entry = locate(int(rng.choice(live)))
        if len(book[side]) < 4 and len(book[side][price]) == 1:
            return False  # keep the book deep
        oid, size = entry
        if kind == "cancel":
            lots = size if rng.random() < 0.6 else int(rng.integers(1, size + 1))
            emit("C", side, oid, price, lots)
            if lots == size:
                take_out(side, price, entry)
            else:
                entry[1] -= lots
            return True
        choice = rng.random()
        if choice < 0.4 and size > 1:  # smaller: keeps its place
            entry[1] = int(rng.integers(1, size))
            emit("M", side, oid, price, entry[1])
        elif choice < 0.7:  # larger: to the back of its level
            take_out(side, price, entry)
            entry[1] = size + int(rng.integers(1, 4))
            book[side].setdefault(price, []).append(entry)
            emit("M", side, oid, price, entry[1])
        else:  # another price: to the back there
            take_out(side, price, entry)
            new = near_price(side)
            book[side].setdefault(new, []).append(entry)
            emit("M", side, oid, new, size)
        return True

    for side, start in ((BID, 400), (ASK, 401)):
        for level in range(6):
            for _ in range(int(rng.integers(1, 4))):
                add(side, start - level if side == BID else start + level,
                    int(rng.integers(1, 6)))
    out[-1] = out[-1][:5] + (F_LAST,)
    for row in range(1, packets):
        kind = rng.choice(["add", "add", "cancel", "cancel", "modify", "trade"])
        if kind == "trade":
            trade()
        elif kind == "add" or not cancel_or_modify(str(kind)):
            side = int(rng.integers(2))
            add(side, near_price(side), int(rng.integers(1, 6)))
        for side in (BID, ASK):  # refill a thin side at its back
            while sum(len(q) for q in book[side].values()) < 8 or len(book[side]) < 4:
                far = min(book[BID]) - 1 if side == BID else max(book[ASK]) + 1
                add(side, far, int(rng.integers(1, 6)))
        out[-1] = out[-1][:5] + (F_LAST,)
        if row in post_rows:
            fresh.clear()
    return out
