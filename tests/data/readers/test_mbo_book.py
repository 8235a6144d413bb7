"""MBO replay: hand-made sequences with exact books, fast vs reference, the real ES file."""

from __future__ import annotations

import functools
import struct
from pathlib import Path

import numpy as np
import pytest
import zstandard

from lobsurf.data.readers.mbo_book import F_MAYBE_BAD_BOOK, F_TOB, MboBookBuilder
from lobsurf.data.readers.mbo_reference import ReferenceMboBuilder
from lobsurf.data.schema import F_LAST, F_SNAPSHOT, LEVELS, MBO_DTYPE, UNDEF_PRICE, SnapshotChunk
from lobsurf.data.trades import TradeChunk

PX = 1_000_000_000  # one currency unit in fixed point
ES_FILE = Path("nautilus_trader") / "esh4-glbx-mdp3-20231225.mbo.dbn.zst"
BOOK_FIELDS = ("bid_px", "ask_px", "bid_sz", "ask_sz", "bid_ct", "ask_ct")
ALL_FIELDS = BOOK_FIELDS + ("ts_event_ns", "ts_recv_ns", "instrument_id")


def rec(action: str, side: str = "N", oid: int = 0, price: float = 0.0, size: int = 0, *,
        flags: int = F_LAST, ts: int = 1_000, instrument: int = 7) -> tuple:
    price_fixed = UNDEF_PRICE if action == "R" else round(price * PX)
    return (14, 0xA0, 1, instrument, ts - 5, oid, price_fixed, size, flags, 0,
            action.encode(), side.encode(), ts, 0, 0)


def records(*rows: tuple) -> np.ndarray:
    return np.array(list(rows), MBO_DTYPE)


def level_view(chunk: SnapshotChunk, row: int, name: str) -> list[tuple[float, int, int]]:
    # [(price, size, count)] of the non-empty levels of one side, best first.
    px, sz, ct = (getattr(chunk, f"{name}_{f}")[row] for f in ("px", "sz", "ct"))
    return [(p / PX, int(s), int(c)) for p, s, c in zip(px, sz, ct) if p != UNDEF_PRICE]


def assert_chunks_equal(got: SnapshotChunk, want: SnapshotChunk) -> None:
    assert len(got) == len(want)
    for name in ALL_FIELDS:
        a, b = getattr(got, name), getattr(want, name)
        bad = np.argwhere(a != b)
        assert bad.size == 0, f"{name} differs at {bad[:3].tolist()}: {a[bad[0][0]]} vs {b[bad[0][0]]}"


# ---- hand-made sequences -----------------------------------------------------------------


def test_adds_aggregate_levels_sorted_best_first_with_counts():
    chunk = MboBookBuilder().feed(records(
        rec("A", "B", 1, 100.00, 5, flags=0), rec("A", "B", 2, 100.00, 3, flags=0),
        rec("A", "B", 3, 99.75, 2, flags=0), rec("A", "A", 4, 100.50, 7, flags=0),
        rec("A", "A", 5, 100.25, 1, flags=0), rec("A", "A", 6, 100.25, 4, ts=2_000),
    ))
    assert len(chunk) == 1  # only the F_LAST record emits
    assert level_view(chunk, 0, "bid") == [(100.00, 8, 2), (99.75, 2, 1)]
    assert level_view(chunk, 0, "ask") == [(100.25, 5, 2), (100.50, 7, 1)]
    assert chunk.ts_recv_ns.tolist() == [2_000] and chunk.ts_event_ns.tolist() == [1_995]
    assert chunk.instrument_id.tolist() == [7]
    # Empty levels: UNDEF price, size 0, count 0.
    assert chunk.bid_px[0, 2:].tolist() == [UNDEF_PRICE] * (LEVELS - 2)
    assert chunk.bid_sz[0, 2:].sum() == 0 and chunk.bid_ct[0, 2:].sum() == 0
    assert chunk.bid_px.dtype == np.int64


def test_only_top_ten_levels_and_deeper_levels_move_up():
    rows = [rec("A", "B", i, 100 - 0.25 * i, i + 1, flags=0) for i in range(12)]
    rows += [rec("A", "A", 100, 101.0, 1)]  # emits
    rows += [rec("C", "B", 0, 100.0, 1)]  # best bid level gone: level 11 enters the top 10
    chunk = MboBookBuilder().feed(records(*rows))
    first, second = level_view(chunk, 0, "bid"), level_view(chunk, 1, "bid")
    assert first == [(100 - 0.25 * i, i + 1, 1) for i in range(LEVELS)]
    assert second == [(100 - 0.25 * i, i + 1, 1) for i in range(1, LEVELS + 1)]


def test_cancel_partial_then_full_and_level_removal():
    builder = MboBookBuilder()
    builder.feed(records(rec("A", "A", 1, 50.0, 10, flags=0), rec("A", "A", 2, 50.0, 4)))
    chunk = builder.feed(records(
        rec("C", "A", 1, 50.0, 3),  # partial: size 7 left, both orders still there
        rec("C", "A", 1, 50.0, 7),  # the rest: order 1 leaves
        rec("C", "A", 2, 50.0, 4),  # last order of the level: level leaves
    ))
    assert [level_view(chunk, i, "ask") for i in range(3)] == [
        [(50.0, 11, 2)], [(50.0, 4, 1)], []]
    assert builder.stats.cancel_unknown == 0 and builder.stats.cancel_oversize == 0


def test_modify_size_price_and_side_moves():
    builder = MboBookBuilder()
    builder.feed(records(rec("A", "B", 1, 10.0, 5, flags=0), rec("A", "B", 2, 10.0, 2)))
    chunk = builder.feed(records(
        rec("M", "B", 1, 10.0, 3),  # size down, same level
        rec("M", "B", 1, 10.0, 9),  # size up (priority loss), same level
        rec("M", "B", 1, 9.5, 9),  # price change: moves to a new level
        rec("M", "B", 2, 9.5, 1),  # second order follows: old level empties
    ))
    views = [level_view(chunk, i, "bid") for i in range(4)]
    assert views == [[(10.0, 5, 2)], [(10.0, 11, 2)], [(10.0, 2, 1), (9.5, 9, 1)], [(9.5, 10, 2)]]
    assert builder.stats.modify_unknown == 0


def test_modify_unknown_is_an_add_and_cancel_unknown_is_skipped():
    builder = MboBookBuilder()
    chunk = builder.feed(records(rec("M", "A", 9, 20.0, 4), rec("C", "A", 8, 20.0, 1),
                                 rec("C", "A", 9, 20.0, 6)))
    assert level_view(chunk, 0, "ask") == [(20.0, 4, 1)]
    assert level_view(chunk, 1, "ask") == [(20.0, 4, 1)]  # unknown id 8: no change
    assert level_view(chunk, 2, "ask") == []  # cancel 6 > size 4: order removed
    stats = builder.stats
    assert (stats.modify_unknown, stats.cancel_unknown, stats.cancel_oversize) == (1, 1, 1)


def test_duplicate_add_replaces_the_order():
    builder = MboBookBuilder()
    chunk = builder.feed(records(rec("A", "B", 1, 5.0, 2), rec("A", "B", 1, 5.25, 3)))
    assert level_view(chunk, 1, "bid") == [(5.25, 3, 1)]
    assert builder.stats.add_duplicate == 1


def test_clear_empties_the_book_and_trades_fills_none_do_not_change_it():
    builder = MboBookBuilder()
    chunk = builder.feed(records(
        rec("A", "B", 1, 10.0, 5, flags=0), rec("A", "A", 2, 10.5, 5),
        rec("T", "A", 0, 10.0, 2, flags=0), rec("F", "B", 1, 10.0, 2, flags=0),
        rec("N", "N"),  # the packet ends: book unchanged by T/F/N
        rec("R"),
    ))
    assert len(chunk) == 3
    assert level_view(chunk, 1, "bid") == level_view(chunk, 0, "bid") == [(10.0, 5, 1)]
    assert level_view(chunk, 1, "ask") == [(10.5, 5, 1)]
    assert level_view(chunk, 2, "bid") == [] and level_view(chunk, 2, "ask") == []
    assert (chunk.bid_px[2] == UNDEF_PRICE).all() and (chunk.ask_ct[2] == 0).all()
    assert builder.stats.clears == 1


def test_snapshot_replay_builds_the_book_but_emits_nothing():
    snap = F_SNAPSHOT | F_LAST
    builder = MboBookBuilder()
    first = builder.feed(records(
        rec("R", flags=F_SNAPSHOT), rec("A", "B", 1, 10.0, 5, flags=F_SNAPSHOT),
        rec("A", "A", 2, 11.0, 6, flags=snap)))
    assert len(first) == 0 and builder.stats.snapshot_records == 3
    live, rows = builder.feed_indexed(records(rec("A", "B", 3, 10.0, 1, flags=0),
                                              rec("A", "A", 4, 10.75, 2, ts=5_000)))
    assert rows.tolist() == [1] and live.ts_recv_ns.tolist() == [5_000]
    assert level_view(live, 0, "bid") == [(10.0, 6, 2)]
    assert level_view(live, 0, "ask") == [(10.75, 2, 1), (11.0, 6, 1)]


def test_instruments_have_separate_books():
    chunk = MboBookBuilder().feed(records(
        rec("A", "B", 1, 10.0, 5, instrument=1), rec("A", "B", 1, 20.0, 6, instrument=2),
        rec("C", "B", 1, 10.0, 5, instrument=1)))
    assert chunk.instrument_id.tolist() == [1, 2, 1]
    assert level_view(chunk, 1, "bid") == [(20.0, 6, 1)]
    assert level_view(chunk, 2, "bid") == []


def test_odd_records_are_counted_and_empty_chunks_work():
    builder = MboBookBuilder()
    chunk = builder.feed(records(rec("A", "N", 1, 10.0, 5), rec("X", "B", 2, 10.0, 5),
                                 rec("A", "B", 3, 10.0, 5, flags=F_LAST | F_TOB)))
    assert len(chunk) == 3 and level_view(chunk, 2, "bid") == [(10.0, 5, 1)]
    stats = builder.stats
    assert (stats.bad_side, stats.unknown_action, stats.top_of_book_records) == (1, 1, 1)
    empty = builder.feed(np.zeros(0, MBO_DTYPE))
    assert len(empty) == 0 and empty.bid_px.shape == (0, LEVELS)
    with pytest.raises(ValueError, match="MBO_DTYPE"):
        builder.feed(np.zeros(3, np.int64))


def random_records(seed: int, n: int) -> np.ndarray:
    # A random but valid-ish order stream over a few price levels, including unknown ids,
    # oversize cancels, clears, trades, and packets of several records.
    rng = np.random.default_rng(seed)
    rows, live = [], []
    for i in range(n):
        kind = rng.choice(["A", "A", "C", "M", "T", "R"], p=[0.3, 0.1, 0.3, 0.25, 0.04, 0.01])
        side = "B" if rng.random() < 0.5 else "A"
        price = 100 + (-1 if side == "B" else 1) * 0.25 * int(rng.integers(0, 16))
        oid = int(rng.choice(live)) if (kind in "CM" and live and rng.random() < 0.9) \
            else int(rng.integers(1, 10**6))
        size = int(rng.integers(0, 20))  # 0 now and then: modify-to-zero, zero-size add
        flags = F_LAST if rng.random() < 0.5 else 0
        flags |= F_SNAPSHOT if i < n // 10 else 0
        flags |= F_MAYBE_BAD_BOOK if rng.random() < 0.02 else 0
        rows.append(rec(kind, side, oid, price, size, flags=flags, ts=1_000 + i,
                        instrument=int(rng.integers(1, 3))))
        if kind == "A":
            live.append(oid)
    return records(*rows)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_fast_equals_reference_on_random_streams_in_chunks(seed):
    recs = random_records(seed, 3_000)
    reference = ReferenceMboBuilder()
    want, want_rows = reference.feed_indexed(recs)
    builder = MboBookBuilder()
    bounds = [0, 1, 7, 500, 1_499, 3_000]  # odd chunk edges split packets
    fed = [builder.feed_detailed(recs[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    got = SnapshotChunk.concat([f.chunk for f in fed])
    got_rows = np.concatenate([f.source + a for f, a in zip(fed, bounds[:-1])])
    assert_chunks_equal(got, want)
    assert np.array_equal(got_rows, want_rows)
    assert builder.stats == reference.stats
    want_fed = ReferenceMboBuilder().feed_detailed(recs)
    want_breaks = want_fed.breaks
    assert np.array_equal(np.concatenate([f.breaks for f in fed]), want_breaks)
    # Trades: each live T record on the next snapshot emitted; a chunk's "after its last
    # snapshot" is the next chunk's first one.
    offsets = np.cumsum([0] + [len(f.chunk) for f in fed])
    got_trades = TradeChunk.concat([f.trades.with_rows(f.trades.row + o)
                                    for f, o in zip(fed, offsets)])
    for name in ("row", "price", "size", "side", "instrument_id", "publisher"):
        np.testing.assert_array_equal(getattr(got_trades, name), getattr(want_fed.trades, name),
                                      err_msg=name)
    live_trades = (recs["action"] == b"T") & (recs["flags"] & F_SNAPSHOT == 0)
    assert len(got_trades) == int(live_trades.sum()) > 10
    assert want_breaks.any() and builder.stats.modify_to_zero > 0 and builder.stats.add_zero_size > 0
    assert builder.stats.cancel_unknown > 0 and builder.stats.clears > 0
    assert builder.stats.modify_unknown > 0 and builder.stats.cancel_oversize > 0
    assert (got.bid_ct[:, LEVELS - 1] > 0).any(), "stream never filled ten levels"


# ---- the real CME ES file --------------------------------------------------------------


def read_mbo_file(path: Path) -> np.ndarray:
    # DBN: "DBN" + version byte, u32 LE metadata length, metadata, then the records.
    with path.open("rb") as fh:
        raw = zstandard.ZstdDecompressor().stream_reader(fh).read()
    (metadata_length,) = struct.unpack("<I", raw[4:8])
    return np.frombuffer(raw[8 + metadata_length:], MBO_DTYPE)


@functools.cache
def replay_in_chunks(path: Path) -> tuple[np.ndarray, SnapshotChunk, np.ndarray, MboBookBuilder]:
    recs = read_mbo_file(path)
    builder = MboBookBuilder()
    parts = [builder.feed_indexed(recs[a:a + 10_000]) for a in range(0, len(recs), 10_000)]
    chunk = SnapshotChunk.concat([c for c, _ in parts])
    rows = np.concatenate([r + 10_000 * k for k, (_, r) in enumerate(parts)])
    return recs, chunk, rows, builder


@pytest.fixture
def es_replay(shared_data) -> tuple[np.ndarray, SnapshotChunk, np.ndarray, MboBookBuilder]:
    # Replayed once per session (about 0.3 s), shared read-only by the tests below.
    return replay_in_chunks(shared_data / ES_FILE)


def test_real_file_fast_equals_reference_on_first_20k_records(es_replay):
    recs, chunk, rows, _ = es_replay
    head = recs[:20_000]
    in_head = rows < len(head)
    # Reference recomputes ~11k orders per snapshot: all of the first 700 snapshots,
    # then every 30th: about 950 books, two seconds.
    sample = np.flatnonzero(in_head)
    sample = sample[(sample < 700) | (sample % 30 == 0)]
    want, want_rows = ReferenceMboBuilder().feed_indexed(head, emit_at=rows[sample])
    assert np.array_equal(want_rows, rows[sample])
    assert_chunks_equal(chunk.take(sample), want)
    print(f"compared {len(sample)} of {in_head.sum()} snapshots in the first 20k records")


def test_real_file_replay_counts_and_chunking(es_replay):
    recs, chunk, rows, builder = es_replay
    stats = builder.stats
    assert stats.records == len(recs) == 68_792
    assert stats.snapshot_records == int((recs["flags"] & F_SNAPSHOT != 0).sum()) > 0
    live_last = (recs["flags"] & F_LAST != 0) & (recs["flags"] & F_SNAPSHOT == 0)
    assert len(chunk) == stats.snapshots == int(live_last.sum())
    assert (stats.cancel_unknown, stats.modify_unknown, stats.top_of_book_records) == (0, 0, 0)
    whole, _ = MboBookBuilder().feed_indexed(recs)
    assert_chunks_equal(chunk, whole)


def test_real_file_books_uncrossed_after_open_and_trades_inside_the_spread(es_replay):
    recs, chunk, rows, _ = es_replay
    best_bid, best_ask = chunk.bid_px[:, 0], chunk.ask_px[:, 0]
    two_sided = (best_bid != UNDEF_PRICE) & (best_ask != UNDEF_PRICE)
    uncrossed = two_sided & (best_bid < best_ask)
    # CME's pre-open (22:00-23:00 UTC here) accepts crossing orders until the opening
    # auction, the first trade: crossed books are allowed only before it.
    trades = np.flatnonzero(recs["action"] == b"T")
    after_open = rows > trades[0]
    rate_all, rate_open = uncrossed.mean(), uncrossed[after_open].mean()
    print(f"uncrossed: {rate_all:.4f} of all {len(chunk)} snapshots, "
          f"{rate_open:.4f} of {after_open.sum()} after the open")
    assert rate_open >= 0.99
    assert two_sided.all()
    # Book just before each trade: the last snapshot emitted before the trade record.
    before = np.searchsorted(rows, trades, side="left") - 1
    trades, before = trades[before >= 0], before[before >= 0]
    price = recs["price"][trades]
    inside = (price >= best_bid[before]) & (price <= best_ask[before])
    print(f"trades inside [best bid, best ask] of the book before: {inside.mean():.4f} "
          f"of {len(trades)}")
    assert inside.mean() >= 0.95
