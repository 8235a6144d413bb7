"""Property tests (hypothesis) of the exact queue replay: it equals a literal FIFO list on
random MBO streams, the queue ahead never grows and never exceeds its level, and fills
never exceed the volume that reached the order's price."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lobsurf.data.readers.mbo_queue import replay_queues
from lobsurf.data.schema import F_LAST, MBO_DTYPE
from tests.data.readers.test_mbo_queue import rec

SIDES = {"B": 0, "A": 1}


def fifo_list_replay(rows: list[tuple], orders: list[tuple], horizon: int) -> dict:
    """The rules of lobsurf.data.readers.mbo_queue on literal queues: each price's orders
    in a list, ours as ("us", j) entries among them; the queue ahead is what stands before
    our entry. Sampled after every record."""
    levels: dict[tuple[int, int], list[list]] = defaultdict(list)  # (side, price) -> entries
    where: dict[int, tuple[int, int]] = {}
    n = len(orders)
    queue = [[-1] * (horizon + 1) for _ in range(n)]
    level = [[-1] * (horizon + 1) for _ in range(n)]
    filled = [[0] * (horizon + 1) for _ in range(n)]
    got = [0] * n
    refused, cleared = [False] * n, [False] * n
    resting: set[int] = set()
    crossed: list[set[int]] = [set() for _ in range(n)]
    aggressor = None

    def entry_of(oid: int) -> list | None:
        if oid not in where:
            return None
        return next(e for e in levels[where[oid]] if e[0] == oid)

    def drop(oid: int) -> None:
        levels[where[oid]].remove(entry_of(oid))
        del where[oid]

    def append(oid: int, side: int, price: int, size: int) -> None:
        levels[side, price].append([oid, size])
        where[oid] = (side, price)

    def fill(j: int, lots: int) -> None:
        got[j] += min(lots, orders[j][2] - got[j])

    def ahead(j: int) -> list[list]:
        side, price = orders[j][:2]
        lv = levels[side, price]
        return [e for e in lv[:lv.index(["us", j])] if e[0] != "us"]  # ours are apart

    def cross(oid: int, side: int, price: int, size: int) -> None:
        for j in resting:
            s, p, lots, _ = orders[j]
            reaches = price <= p if s == 0 else price >= p
            if s == 1 - side and got[j] < lots and oid not in crossed[j] and reaches:
                crossed[j].add(oid)
                fill(j, size)

    for i, (action, side_char, oid, price, size, _flags) in enumerate(rows):
        side = SIDES.get(side_char)
        if action != "F":
            aggressor = None
        if action == "A" or (action == "M" and oid not in where):
            if side is not None and size > 0:
                if oid in where:
                    drop(oid)
                append(oid, side, price, size)
                cross(oid, side, price, size)
        elif action == "C" and oid in where:
            e = entry_of(oid)
            e[1] -= size
            if e[1] <= 0:
                drop(oid)
        elif action == "M":
            s, p = where[oid]
            e = entry_of(oid)
            if size == 0 or price != p or size > e[1]:
                drop(oid)
                if size > 0:
                    append(oid, s, price, size)
                    if price != p:
                        cross(oid, s, price, size)
            else:
                e[1] = size
        elif action == "T":
            aggressor = oid
        elif action == "F" and not (oid == aggressor and oid != 0):
            s = where[oid][0] if oid in where else side
            for j in resting:
                js, p, lots, _ = orders[j]
                if s != js or got[j] >= lots:
                    continue
                front = [e[0] for e in ahead(j)]
                through = price < p if js == 0 else price > p
                if (price == p and oid not in front) or through:
                    fill(j, size)
        elif action == "R":
            levels.clear()
            where.clear()
            for j in resting:
                cleared[j] = True
                filled[j][i - orders[j][3]:] = [got[j]] * (horizon + 1 - i + orders[j][3])
            resting.clear()
        for j in sorted(resting):
            col = i - orders[j][3]
            filled[j][col] = got[j]
            if got[j] < orders[j][2]:
                queue[j][col] = sum(e[1] for e in ahead(j))
                level[j][col] = sum(e[1] for e in levels[orders[j][:2]] if e[0] != "us")
            if got[j] >= orders[j][2] or col == horizon:
                resting.discard(j)
                filled[j][col:] = [got[j]] * (horizon + 1 - col)
        for j, (s, p, lots, post) in enumerate(orders):
            if post != i:
                continue
            other = [q for (os, q), lv in levels.items()
                     if os == 1 - s and any(e[0] != "us" for e in lv)]  # ours: apart
            if any(q <= p if s == 0 else q >= p for q in other):
                refused[j] = True
                continue
            levels[s, p].append(["us", j])
            queue[j][0] = level[j][0] = sum(e[1] for e in levels[s, p] if e[0] != "us")
            if horizon:
                resting.add(j)
    return {"queue": queue, "level": level, "filled": filled, "refused": refused,
            "cleared": cleared}


#: actions by weight; X is a trade whose aggressor was resting: T, then the aggressor's F
ACTIONS = "AAAAAAAAACCCMMMMTXFFFFN" * 2 + "R"
#: bids at 99 and 100, asks at 100 and 101 (so some cross), side N 99 and 100; ours at the
#: same prices
PRICE = {"B": 99, "A": 100, "N": 99}
events = st.lists(st.tuples(st.sampled_from(ACTIONS), st.sampled_from("BBAAN"),
                            st.integers(0, 6), st.integers(0, 1), st.integers(0, 5),
                            st.booleans()), min_size=10, max_size=60)
ours = st.lists(st.tuples(st.integers(0, 1), st.integers(0, 1), st.integers(1, 3),
                          st.integers(0, 10**6)), min_size=1, max_size=8)


def stream_rows(events: list[tuple]) -> list[tuple]:
    """(action, side, id, price, size, flags) records of drawn events. Cancels, modifies
    and fills mostly name an order added before (``pick`` chooses which), fills mostly at
    its price, so they meet the orders ahead of and behind ours."""
    rows: list[tuple] = []
    added: dict[int, int] = {}  # id -> its last price
    for action, side, pick, offset, size, last in events:
        price = PRICE[side] + offset
        if action == "A":
            size = max(size, 1)
        if action == "A" and pick < 6:
            oid = len(rows) + 10  # a new id
        elif added:
            oid = list(added)[pick % len(added)]  # an id added before (an add: reused)
            if action == "F" and side != "N":
                price = added[oid]
        else:
            oid = pick
        if action in "AM":
            added[oid] = price
        if action == "X":
            rows.append(("T", side, oid, price, size, 0))
            action = "F"
        rows.append((action, side, oid, price, size, F_LAST if last else 0))
    return rows


@settings(max_examples=150, deadline=None)
@given(events, ours, st.integers(0, 12))
def test_the_replay_equals_a_literal_fifo_list(events, ours, horizon):
    rows = stream_rows(events)
    horizon = min(horizon, len(rows) - 1)
    orders = [(s, PRICE["BA"[s]] + offset, lots, post % (len(rows) - horizon))
              for s, offset, lots, post in ours]
    records = np.array([rec(*r) for r in rows], MBO_DTYPE)
    out = replay_queues(records, np.arange(len(rows)), *(np.array(c) for c in zip(*orders)),
                        horizon)
    want = fifo_list_replay(rows, orders, horizon)
    for name, expected in want.items():
        assert getattr(out, name).tolist() == expected, name
    stats = out.stats  # every lot filled is counted once, by what filled it
    assert stats.lots_at_price + stats.lots_through + stats.lots_crossed == out.filled[:, -1].sum()
    for j, (s, p, lots, post) in enumerate(orders):
        q, lv, f = out.queue[j], out.level[j], out.filled[j]
        resting = q >= 0
        assert (q[resting] <= lv[resting]).all()  # the queue ahead is part of its level
        steps = resting[:-1] & resting[1:]
        assert (np.diff(q)[steps] <= 0).all()  # nothing ever joins ahead of us
        assert (np.diff(f) >= 0).all() and f[-1] <= lots
        # every lot filled was printed at or through its price, or came to it from the
        # other side (of any side: an upper bound)
        life = rows[post + 1:post + horizon + 1]
        reach = sum(size for a, _, _, px, size, _ in life
                    if (a == "F" and (px <= p if s == 0 else px >= p))
                    or (a in "AM" and (px <= p if s == 0 else px >= p)))
        assert f[-1] <= reach
