"""The exact FIFO queue of orders of ours on hand-written MBO streams, hand-computed."""

from __future__ import annotations

import numpy as np
import pytest

from lobsurf.data.readers.mbo_queue import ASK, BID, replay_queues
from lobsurf.data.schema import F_LAST, F_SNAPSHOT, MBO_DTYPE, UNDEF_PRICE

#: the aggressor id of the trades below (it is never a resting order's)
TAKER = 900


def rec(action: str, side: str = "N", oid: int = 0, price: int = 0, size: int = 0,
        flags: int = F_LAST) -> tuple:
    """One MBO record; ``price`` in fixed-point units (ticks of 1 here)."""
    price = UNDEF_PRICE if action == "R" else price
    return (14, 0xA0, 1, 7, 0, oid, price, size, flags, 0, action.encode(), side.encode(), 0,
            0, 0)


def stream(*rows: tuple) -> np.ndarray:
    return np.array([rec(*r) if isinstance(r, tuple) else r for r in rows], MBO_DTYPE)


def follow(records: np.ndarray, side: int, price: int, lots: int, post: int,
           horizon: int | None = None):
    """One order of ours posted after record ``post``, sampled after every record to the
    end: (queue ahead, cumulative filled, level lots) per record from ``post`` on, stats."""
    horizon = len(records) - 1 - post if horizon is None else horizon
    out = replay_queues(records, np.arange(len(records)), np.array([side]),
                        np.array([price]), np.array([lots]), np.array([post]), horizon)
    return out.queue[0].tolist(), out.filled[0].tolist(), out.level[0].tolist(), out


# A bid book at 100 (5 + 3 lots, orders 1 and 2) and an ask at 101 (order 50).
BOOK = [("A", "B", 1, 100, 5), ("A", "B", 2, 100, 3), ("A", "A", 50, 101, 9)]


def test_adds_join_behind_and_cancels_ahead_shrink_the_queue_behind_do_not():
    q, f, level, _ = follow(stream(
        *BOOK,
        ("A", "B", 3, 100, 4),  # behind us
        ("C", "B", 3, 100, 2),  # a cancel behind
        ("C", "B", 1, 100, 2),  # a partial cancel ahead
        ("C", "B", 2, 100, 3),  # a full cancel ahead
        ("A", "B", 4, 99, 6),  # another price
        ("C", "B", 4, 99, 6),
    ), BID, 100, 1, post=2)
    assert q == [8, 8, 8, 6, 3, 3, 3]
    assert level == [8, 12, 10, 8, 5, 5, 5]
    assert f == [0] * 7


def test_a_modify_keeps_priority_down_and_loses_it_up_or_to_another_price():
    q, _, level, _ = follow(stream(
        *BOOK, ("A", "B", 3, 100, 2),  # ahead: 1 (5), 2 (3), 3 (2)
        ("M", "B", 1, 100, 4),  # smaller: keeps its place, 1 lot less ahead
        ("M", "B", 2, 100, 6),  # larger: to the back, behind us
        ("M", "B", 3, 99, 2),  # another price: gone from the queue
        ("M", "B", 3, 100, 2),  # back at 100: behind us
        ("M", "B", 1, 100, 0),  # to size 0: removed
    ), BID, 100, 1, post=3)
    assert q == [10, 9, 6, 4, 4, 0]
    assert level == [10, 9, 12, 10, 12, 8]


def test_fills_ahead_take_the_front_and_fills_behind_us_are_ours():
    # sellers take 6 (order 1: 5, order 2: 1), then 5: order 2's last 2 and 3 of order 3,
    # which is behind us: under FIFO those 3 were ours, and we asked for 2
    q, f, _, out = follow(stream(
        *BOOK, ("A", "B", 3, 100, 6),
        ("T", "A", TAKER, 100, 6, 0), ("F", "A", 1, 100, 5, 0), ("F", "A", 2, 100, 1, 0),
        ("C", "B", 1, 100, 5, 0), ("M", "B", 2, 100, 2),
        ("T", "A", TAKER + 1, 100, 5, 0), ("F", "A", 2, 100, 2, 0), ("F", "A", 3, 100, 3, 0),
        ("C", "B", 2, 100, 2, 0), ("M", "B", 3, 100, 3),
    ), BID, 100, 2, post=2)
    # record:  A3 T  F1 F2 C1 M2 T  F2 F3 C2 M3
    assert q == [8, 8, 8, 8, 8, 3, 2, 2, 2, -1, -1, -1]
    assert f == [0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2]
    assert out.stats.out_of_order_lots == 0
    assert (out.stats.lots_at_price, out.stats.lots_through, out.stats.lots_crossed) == (2, 0, 0)


def test_a_partial_fill_leaves_the_rest_resting():
    q, f, _, _ = follow(stream(
        *BOOK, ("C", "B", 1, 100, 5), ("C", "B", 2, 100, 3),  # the queue ahead clears
        ("A", "B", 3, 100, 4),
        ("T", "A", TAKER, 100, 1, 0), ("F", "A", 3, 100, 1, 0), ("M", "B", 3, 100, 3),
    ), BID, 100, 3, post=2)
    assert q == [8, 3, 0, 0, 0, 0, 0]
    assert f == [0, 0, 0, 0, 0, 1, 1]


def test_a_fill_through_our_price_fills_us_by_its_lots():
    q, f, _, out = follow(stream(
        *BOOK, ("A", "B", 3, 99, 5),
        ("T", "A", TAKER, 100, 8, 0), ("F", "A", 1, 100, 5, 0), ("F", "A", 2, 100, 3, 0),
        ("T", "A", TAKER, 99, 2, 0), ("F", "A", 3, 99, 2, 0),
        ("C", "B", 1, 100, 5, 0), ("C", "B", 2, 100, 3, 0), ("M", "B", 3, 99, 3),
    ), BID, 100, 3, post=2)
    assert f[-1] == 2 and q[-1] == 0  # 2 lots went through 100: we fill 2 of 3
    assert f.index(2) == 6  # at the fill at 99
    assert (out.stats.lots_at_price, out.stats.lots_through, out.stats.lots_crossed) == (0, 2, 0)


def test_an_ask_through_the_price_trades_with_us_once_per_order():
    q, f, _, out = follow(stream(
        *BOOK, ("C", "B", 1, 100, 5), ("C", "B", 2, 100, 3),  # our bid alone at 100
        ("A", "A", 60, 100, 1),  # an ask at our price: it trades with us
        ("M", "A", 60, 99, 1),  # the same order further through: not twice
        ("A", "A", 61, 99, 2),  # another, through our price
    ), BID, 100, 4, post=2)
    assert f == [0, 0, 0, 1, 1, 3]
    assert out.stats.cross_fills == 2
    assert (out.stats.lots_at_price, out.stats.lots_through, out.stats.lots_crossed) == (0, 0, 3)


def test_the_aggressors_own_fill_is_not_a_resting_fill():
    # our ask at 101 behind order 50; bid 2 moves up to 101 and trades 1 lot with order 50:
    # CME sends a fill for the aggressor (id 2, side B) and one for order 50
    q, f, _, out = follow(stream(
        *BOOK, ("T", "B", 2, 101, 1, 0), ("F", "B", 2, 101, 1, 0), ("F", "A", 50, 101, 1, 0),
        ("M", "A", 50, 101, 8, 0), ("C", "B", 2, 100, 1, 0), ("M", "B", 2, 100, 2),
    ), ASK, 101, 1, post=2)
    assert f == [0] * 7
    assert q == [9, 9, 9, 9, 8, 8, 8]
    assert out.stats.aggressor_fills == 1


def test_a_post_that_reaches_the_other_side_is_refused():
    out = replay_queues(stream(*BOOK), np.arange(3), np.array([BID, ASK, BID]),
                        np.array([101, 100, 99]), np.array([1, 1, 1]), np.array([2, 2, 2]), 0)
    assert out.refused.tolist() == [True, True, False]
    assert out.queue[:, 0].tolist() == [-1, -1, 0]  # the bid at 99 improves nothing: alone


def test_the_snapshot_replay_builds_the_book_and_a_clear_stops_our_orders():
    snap = F_SNAPSHOT | F_LAST
    records = stream(("R", "N", 0, 0, 0, snap), ("A", "B", 1, 100, 5, snap),
                     ("A", "A", 50, 101, 9, snap), ("A", "B", 2, 100, 1),
                     ("R", "N", 0, 0, 0), ("A", "B", 1, 100, 2))
    q, f, _, out = follow(records, BID, 100, 1, post=3)
    assert q == [6, -1, -1] and f == [0, 0, 0]
    assert out.cleared.tolist() == [True] and out.stats.cleared_orders == 1


def test_out_of_order_fills_are_counted_at_the_packets_end():
    # order 2 fills while order 1 stays: the order of ours posted between them fills and
    # counts it, the one posted behind order 2 does not fill; then order 3 is filled while
    # order 1 is skipped and cancelled in the same packet (self-match prevention): not
    # counted
    records = stream(
        *BOOK[:1], ("A", "A", 50, 101, 9), ("A", "B", 2, 100, 3), ("A", "B", 3, 100, 3),
        ("T", "A", TAKER, 100, 1, 0), ("F", "A", 2, 100, 1, 0), ("M", "B", 2, 100, 2),
    )
    out = replay_queues(records, np.arange(len(records)), np.array([BID, BID]),
                        np.array([100, 100]), np.array([1, 1]), np.array([1, 2]), 4)
    assert out.filled[:, -1].tolist() == [1, 0] and out.stats.out_of_order_lots == 1
    records = stream(
        *BOOK[:1], ("A", "A", 50, 101, 9), ("A", "B", 3, 100, 3),
        ("T", "A", TAKER, 100, 1, 0), ("F", "A", 3, 100, 1, 0), ("C", "B", 1, 100, 5, 0),
        ("M", "B", 3, 100, 2),
    )
    out = replay_queues(records, np.arange(len(records)), np.array([BID]), np.array([100]),
                        np.array([1]), np.array([1]), 5)
    assert out.filled[0, -1] == 1 and out.stats.out_of_order_lots == 0


def test_columns_follow_the_samples_and_bad_arguments_are_refused():
    records = stream(*BOOK, ("A", "B", 3, 100, 4, 0), ("C", "B", 1, 100, 5))
    out = replay_queues(records, np.array([2, 4]), np.array([BID]), np.array([100]),
                        np.array([1]), np.array([0]), 1)
    assert out.queue.tolist() == [[8, 3]] and out.level.tolist() == [[8, 7]]
    with pytest.raises(ValueError, match="increase"):
        replay_queues(records, np.array([3, 2]), np.array([BID]), np.array([100]),
                      np.array([1]), np.array([0]), 1)
    with pytest.raises(ValueError, match="sample"):
        replay_queues(records, np.array([2, 4]), np.array([BID]), np.array([100]),
                      np.array([1]), np.array([1]), 1)
