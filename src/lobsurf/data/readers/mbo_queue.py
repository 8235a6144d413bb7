"""The exact FIFO queue of hypothetical resting orders, replayed from MBO order ids.

Role: the check of the simulator's L2 queue models (``lobsurf.sim.queue``), which only
see level sizes. Here every resting order is known by its id, so a hypothetical order of
ours can be placed in its level's queue exactly and followed through the stream. Plain
Python over one book's records; it shares no code with the simulator or the book builder.

An order of ours is posted right after a sample record (in practice: the record that
emitted a store row), at a given side and price, and joins behind every order resting at
that price at that moment (``ahead``: their ids). Then, record by record (CME Globex as
Databento normalizes it; https://databento.com/docs/schemas-and-data-formats/mbo and the
"limit order book" example):

* ``A`` add: joins behind us. An add of a live id replaces that order (behind us).
* ``C`` cancel of an order ahead: the queue ahead shrinks by the lots cancelled (the order
  leaves it at 0). Cancels behind us change nothing.
* ``M`` modify of an order ahead: a price change or a size increase loses priority (the
  order goes behind us or elsewhere: it leaves the queue ahead); a size decrease keeps it
  (the queue ahead shrinks by the decrease); a modify to size 0 removes it. A modify of an
  unknown id is an add. (Databento's example book: "changing price loses priority",
  "increasing size loses priority", otherwise "update in place"; CME's rule for futures.)
* ``T`` trade: names the aggressor (its order id, 0 in the opening auction) and prints.
* ``F`` fill of a resting order: CME sends one per resting order filled, plus one for an
  aggressor that was itself resting (a modify that crossed); that one has the aggressor's
  id and is skipped. A fill of an order ahead of us takes the front of the queue: it
  changes nothing for us by itself (the book change follows as ``C`` / ``M`` and shrinks the
  queue). A fill at our price of an order *behind* us (not in ``ahead``) means the
  aggressor reached past us: under FIFO those lots were ours, so we fill up to them. A fill
  at a price through ours (a bid filled below our bid's price, an ask above our ask's)
  fills us likewise: the aggressor would have met our better price first. Which side a
  fill's order rests on comes from the book (the auction's fills have side ``N``); a fill
  of an id the book does not hold uses the record's side, and is skipped without one.
* An order of the other side that arrives (``A``) or moves (``M``) to our price or through
  it would have traded with us: it fills us up to its size, once per order id.
* ``R`` clear: our orders' book is gone; they stop there and are marked ``cleared``.
* Records flagged ``F_SNAPSHOT`` (the initial replay) build the book like any other.

Within one event packet (records up to ``F_LAST``) the fills are not listed in priority
order, and CME's self-match prevention cancels a resting order that the aggressor skips
(the cancel comes in the same packet). So a fill behind us is judged at the packet's end:
if lots are still ahead of us then, the venue did not fill in the order we track; we fill
anyway (we were before the filled order) and count the lots (``out_of_order_lots``), so a
misread of the venue's priority shows.

No impact: our order is not in the recorded stream. The lots we take were, in the record,
taken by the orders behind us, and they stay in the record as it is (so the same print
fills us and still shows the level behind us shrinking); no one reacts to our order; an
order of ours that improves the best price fills only when prints go through it or the
other side comes to it. These are the simulator's assumptions too.

Posting is post-only: an order whose price reaches the other side's best at that moment
is refused (``refused``), as the simulator refuses it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from lobsurf.data.schema import F_LAST, MBO_DTYPE

#: our sides, numbered as the simulator's resting orders (0 a bid, 1 an ask)
BID, ASK = 0, 1
_SIDE_OF = {ord("B"): BID, ord("A"): ASK}
_ADD, _CANCEL, _MODIFY, _CLEAR, _TRADE, _FILL = (ord(c) for c in "ACMRTF")


@dataclass
class QueueReplayStats:
    """What the replay met beyond the rules (module docstring)."""

    records: int = 0
    aggressor_fills: int = 0  # F records of the aggressor itself: skipped
    unknown_order_fills: int = 0  # F of an id not in the book: its side from the record
    unplaced_fills: int = 0  # F of an unknown id without a side: skipped
    out_of_order_lots: int = 0  # lots filled behind us in packets that left lots ahead of us
    cross_fills: int = 0  # our fills from an order of the other side at or through our price
    # our lots filled, by what filled them: prints at our price that reached past the queue
    # ahead (the only fills a queue model decides), prints through our price, and orders of
    # the other side that came to it
    lots_at_price: int = 0
    lots_through: int = 0
    lots_crossed: int = 0
    cleared_orders: int = 0  # our orders stopped by a book clear

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass
class QueueTraces:
    """Per order of ours, [n, horizon + 1]: column k after sample ``post + k`` (column 0:
    right after posting).

    queue: lots ahead of it (-1 where it no longer rests: filled, refused or cleared).
    level: lots resting at its price, ahead and behind (-1 likewise).
    filled: lots filled so far (cumulative).
    refused: [n] bool, its price reached the other side's best when posted.
    cleared: [n] bool, a book clear stopped it.
    stats: the replay's counts.
    """

    queue: np.ndarray
    level: np.ndarray
    filled: np.ndarray
    refused: np.ndarray
    cleared: np.ndarray
    stats: QueueReplayStats = field(default_factory=QueueReplayStats)


class _Ours:
    """One order of ours while it rests."""

    __slots__ = ("index", "side", "price", "remaining", "ahead", "ahead_lots", "post",
                 "crossed_by", "behind_lots")

    def __init__(self, index: int, side: int, price: int, lots: int, post: int,
                 ahead: dict[int, None], ahead_lots: int):
        self.index, self.side, self.price, self.remaining = index, side, price, lots
        self.post = post
        self.ahead = ahead  # ids of the orders ahead (insertion-ordered set)
        self.ahead_lots = ahead_lots
        self.crossed_by: set[int] = set()  # ids of the other side's orders that crossed us
        self.behind_lots = 0  # lots filled this packet from fills of orders behind us

    def beyond(self, price: int) -> bool:
        """``price`` lies through ours: below a bid's, above an ask's."""
        return price < self.price if self.side == BID else price > self.price

    def reached_by(self, price: int) -> bool:
        """An order of the other side at ``price`` reaches ours."""
        return price <= self.price if self.side == BID else price >= self.price


class _Book:
    """Resting orders by id, and per side each price's orders (in arrival order) and lots."""

    def __init__(self) -> None:
        self.orders: dict[int, list[int]] = {}  # id -> [side, price, size]
        self.ids: tuple[dict[int, dict[int, None]], ...] = ({}, {})  # side: price -> ids
        self.lots: tuple[dict[int, int], ...] = ({}, {})  # side: price -> lots

    def add(self, oid: int, side: int, price: int, size: int) -> None:
        self.orders[oid] = [side, price, size]
        self.ids[side].setdefault(price, {})[oid] = None
        self.lots[side][price] = self.lots[side].get(price, 0) + size

    def remove(self, oid: int) -> None:
        side, price, size = self.orders.pop(oid)
        level = self.ids[side][price]
        del level[oid]
        if level:
            self.lots[side][price] -= size
        else:
            del self.ids[side][price], self.lots[side][price]

    def shrink(self, oid: int, lots: int) -> None:
        order = self.orders[oid]
        order[2] -= lots
        self.lots[order[0]][order[1]] -= lots

    def clear(self) -> None:
        self.orders.clear()
        for side in (BID, ASK):
            self.ids[side].clear()
            self.lots[side].clear()

    def reaches(self, side: int, price: int) -> bool:
        """The other side's best reaches ``price`` of an order on ``side``."""
        other = self.lots[1 - side]
        if not other:
            return False
        return min(other) <= price if side == BID else max(other) >= price


def replay_queues(records: np.ndarray, sample_at: np.ndarray, side: np.ndarray,
                  price: np.ndarray, lots: np.ndarray, post: np.ndarray,
                  horizon: int) -> QueueTraces:
    """Follow orders of ours through one book's MBO records (module docstring).

    Args:
        records: [R] MBO records of one (publisher, instrument) book, in file order.
        sample_at: [S] increasing positions in ``records``: sample k is the book right
            after record ``sample_at[k]``.
        side, price, lots, post: [n] each order's side (BID / ASK), fixed-point price,
            lots (>= 1) and the sample it is posted after; post + horizon < S.
        horizon: samples each order rests after its post (its columns 1 .. horizon).
    """
    if not set(MBO_DTYPE.names) <= set(records.dtype.names or ()):
        raise ValueError(f"expected MBO records, got {records.dtype}")
    n = len(side)
    sample_at = np.asarray(sample_at, np.int64)
    if len(sample_at) > 1 and not (np.diff(sample_at) > 0).all():
        raise ValueError("sample_at must increase")
    if len(sample_at) and not 0 <= sample_at[0] <= sample_at[-1] < len(records):
        raise ValueError("sample_at must be positions in records")
    if n and (int(np.max(post)) + horizon >= len(sample_at) or int(np.min(post)) < 0):
        raise ValueError("every post + horizon must be a sample")
    if n and int(np.min(lots)) < 1:
        raise ValueError("orders need at least one lot")
    out = QueueTraces(queue=np.full((n, horizon + 1), -1, np.int64),
                      level=np.full((n, horizon + 1), -1, np.int64),
                      filled=np.zeros((n, horizon + 1), np.int64),
                      refused=np.zeros(n, bool), cleared=np.zeros(n, bool))
    order = np.argsort(np.asarray(post), kind="stable")
    posts = [(int(post[i]), int(i)) for i in order]
    next_post = 0
    book = _Book()
    active: tuple[list[_Ours], ...] = ([], [])
    filled = [0] * n
    stats = out.stats
    sample_of = {int(r): k for k, r in enumerate(sample_at.tolist())}
    aggressor = None
    behind_fills: list[_Ours] = []  # our orders filled from behind in the current packet
    columns = zip(records["action"].view(np.uint8).tolist(), records["flags"].tolist(),
                  records["side"].view(np.uint8).tolist(), records["order_id"].tolist(),
                  records["price"].tolist(), records["size"].tolist())

    def take(o: _Ours, size: int) -> int:
        got = min(o.remaining, size)
        o.remaining -= got
        filled[o.index] += got
        return got

    def crossing(oid: int, s: int, px: int, size: int) -> None:
        for o in active[1 - s]:
            if o.remaining and oid not in o.crossed_by and o.reached_by(px):
                o.crossed_by.add(oid)
                stats.cross_fills += 1
                stats.lots_crossed += take(o, size)

    def leaves(oid: int, cut: int | None) -> None:
        """The order ``oid`` loses ``cut`` lots ahead of whoever has it ahead (None: all
        of it, it leaves those queues)."""
        s, px, size = book.orders[oid]
        for o in active[s]:
            if o.price == px and oid in o.ahead:
                if cut is None or cut >= size:
                    o.ahead_lots -= size
                    del o.ahead[oid]
                else:
                    o.ahead_lots -= cut

    for i, (action, flags, side_byte, oid, px, size) in enumerate(columns):
        if action != _FILL:
            aggressor = None
        if action == _ADD or (action == _MODIFY and oid not in book.orders):
            s = _SIDE_OF.get(side_byte)
            if s is not None and size > 0:
                if oid in book.orders:
                    leaves(oid, None)
                    book.remove(oid)
                book.add(oid, s, px, size)
                crossing(oid, s, px, size)
        elif action == _CANCEL:
            if oid in book.orders:
                leaves(oid, size)
                if size >= book.orders[oid][2]:
                    book.remove(oid)
                else:
                    book.shrink(oid, size)
        elif action == _MODIFY:
            s, old_px, old_size = book.orders[oid]
            if size == 0 or px != old_px or size > old_size:
                leaves(oid, None)
                book.remove(oid)
                if size > 0:
                    book.add(oid, s, px, size)
                    if px != old_px:
                        crossing(oid, s, px, size)
            elif size < old_size:
                leaves(oid, old_size - size)
                book.shrink(oid, old_size - size)
        elif action == _TRADE:
            aggressor = oid
        elif action == _FILL:
            if oid == aggressor and oid != 0:
                stats.aggressor_fills += 1
            else:
                resting = book.orders.get(oid)
                s = resting[0] if resting is not None else _SIDE_OF.get(side_byte)
                if resting is None:
                    stats.unknown_order_fills += s is not None
                    stats.unplaced_fills += s is None
                if s is not None:
                    for o in active[s]:
                        if not o.remaining:
                            continue
                        if px == o.price and oid not in o.ahead:
                            if not o.behind_lots:
                                behind_fills.append(o)
                            o.behind_lots += min(size, o.remaining)
                            stats.lots_at_price += take(o, size)
                        elif o.beyond(px):
                            stats.lots_through += take(o, size)
        elif action == _CLEAR:
            book.clear()
            for s in (BID, ASK):
                for o in active[s]:
                    if o.remaining:  # (a filled one may wait for its packet's end)
                        out.cleared[o.index] = True
                        stats.cleared_orders += 1
                active[s].clear()
            behind_fills.clear()
        if flags & F_LAST:
            for o in behind_fills:
                stats.out_of_order_lots += o.behind_lots * (o.ahead_lots > 0)
                o.behind_lots = 0
            behind_fills.clear()
        k = sample_of.get(i)
        if k is None:
            continue
        for s in (BID, ASK):
            keep = []
            for o in active[s]:
                col = k - o.post
                out.filled[o.index, col] = filled[o.index]
                if o.remaining:
                    out.queue[o.index, col] = o.ahead_lots
                    out.level[o.index, col] = book.lots[s].get(o.price, 0)
                if col < horizon and (o.remaining or o.behind_lots):
                    keep.append(o)  # a filled order stays to its packet's end (its check)
            active[s][:] = keep
        while next_post < len(posts) and posts[next_post][0] == k:
            j = posts[next_post][1]
            next_post += 1
            s, p = int(side[j]), int(price[j])
            if book.reaches(s, p):
                out.refused[j] = True
                continue
            ahead = dict(book.ids[s].get(p, {}))
            o = _Ours(j, s, p, int(lots[j]), k, ahead, book.lots[s].get(p, 0))
            out.queue[j, 0], out.level[j, 0] = o.ahead_lots, o.ahead_lots
            if horizon:
                active[s].append(o)
    np.maximum.accumulate(out.filled, axis=1, out=out.filled)  # past its last sample
    stats.records += len(records)
    return out
