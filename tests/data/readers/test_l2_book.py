"""L2Book (emptied levels kept as zeros, compaction, text caches) against a plain dict book
sorted on demand, under random level updates; and its errors on bad levels."""

from __future__ import annotations

import random

import pytest

from lobsurf.data.readers import l2_book
from lobsurf.data.readers.decimals import price_fixed, size_atoms
from lobsurf.data.readers.l2_book import L2Book


def _naive_top(levels: dict[int, int], bid: bool, depth: int) -> tuple[list[int], list[int]]:
    prices = sorted(levels, reverse=bid)[:depth]
    return prices, [levels[p] for p in prices]


def _texts(rng: random.Random, mid: int, bid: bool, count: int) -> list[list[str]]:
    out = []
    for _ in range(count):
        ticks = int(rng.expovariate(1 / 8))
        price = mid - 1 - ticks if bid else mid + 1 + ticks
        size = 0 if rng.random() < 0.45 else rng.choice([1, 2, 5, 10, rng.randrange(1, 10**6)])
        out.append([f"{price / 100:.8f}", f"{size / 10**5:.8f}"])
    return out


@pytest.mark.parametrize("slack", [0, 3, 4096])
@pytest.mark.parametrize("seed", [1, 2])
def test_same_top_as_a_plain_book(monkeypatch, slack: int, seed: int) -> None:
    monkeypatch.setattr(l2_book, "COMPACT_SLACK", slack)
    monkeypatch.setattr(l2_book, "TEXT_CACHE", 50)  # caches restart often
    rng = random.Random(seed)
    book, plain = L2Book(), {True: {}, False: {}}
    mid = 6_000_000
    for step in range(3000):
        mid += rng.choice((-3, -1, 0, 1, 3))
        if step % 1000 == 0:  # a snapshot replaces the book
            snapshot = {side: _texts(rng, mid, side, 60) for side in (True, False)}
            book.load(snapshot[True], snapshot[False])
            plain = {True: {}, False: {}}
            updates = snapshot
        else:
            updates = {side: _texts(rng, mid, side, rng.randrange(0, 12)) for side in (True, False)}
            for side in (True, False):
                book.apply(side, updates[side])
        for side in (True, False):
            for price, size in updates[side]:  # in order: a price may come twice
                if size_atoms(size):
                    plain[side][price_fixed(price)] = size_atoms(size)
                else:
                    plain[side].pop(price_fixed(price), None)
        for depth in (1, 10):
            bid_px, bid_sz = _naive_top(plain[True], True, depth)
            ask_px, ask_sz = _naive_top(plain[False], False, depth)
            assert book.top(depth) == (bid_px, bid_sz, ask_px, ask_sz), step
        assert book.best() == (bid_px[0] if bid_px else None, bid_sz[0] if bid_sz else 0,
                               ask_px[0] if ask_px else None, ask_sz[0] if ask_sz else 0)
        assert bool(book) == bool(plain[True] or plain[False])
        assert sorted(book.all_sizes()) == sorted([*plain[True].values(), *plain[False].values()])
    book.clear()
    assert not book and book.top(10) == ([], [], [], [])


def test_emptied_levels_are_dropped_not_kept_forever(monkeypatch) -> None:
    monkeypatch.setattr(l2_book, "COMPACT_SLACK", 16)
    book = L2Book()
    for price in range(1000, 3000):  # each level set, then emptied: all zeros
        book.apply(True, [[f"{price}.5", "1.0"], ["999.5", "2.0"]])
        book.apply(True, [[f"{price}.5", "0"]])
    assert book.top(10) == ([999_500_000_000], [2_000_000_000_000], [], [])
    assert len(book.bids.sizes) <= 2 * 1 + 16 + 1
    assert book.bids.keys == sorted(book.bids.sizes)


def test_a_top_skips_few_emptied_levels() -> None:
    # live levels far apart, emptied ones between them that never refill: the top drops
    # the emptied levels it scans past instead of scanning them at every row
    book = L2Book()
    book.load([[f"{p}.5", "1.0"] for p in range(100, 1000)], [])
    book.apply(True, [[f"{p}.5", "0"] for p in range(101, 999)])
    assert book.top(10) == ([999_500_000_000, 100_500_000_000], [10**12] * 2, [], [])
    assert len(book.bids.keys) < 50 and book.bids.keys == sorted(book.bids.sizes)
    assert book.top(10) == ([999_500_000_000, 100_500_000_000], [10**12] * 2, [], [])


@pytest.mark.parametrize("levels, error, message", [
    ([["1.5", "1"], ["2.5", "x"]], ValueError, "'x' is not a decimal number"),
    ([["1.5", "1"], [2.5, "1"]], ValueError, "2.5 is not a decimal string"),
    ([["1.5", "1"], ["1.5", None]], ValueError, "None is not a decimal string"),
    ([["1.5", "1"], [["1.5"], "1"]], TypeError, "unhashable type: 'list'"),
    ([["1.5", "1"], ["1.5", "1", "2"]], ValueError, "too many values to unpack"),
    ([["1.5", "1"], 7], TypeError, "cannot unpack non-iterable int object"),
])
def test_bad_levels_raise_as_before(levels, error, message) -> None:
    with pytest.raises(error, match=message):
        L2Book().apply(True, levels)
