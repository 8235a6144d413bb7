"""The store's trade table: aggregation, placement on written rows, the writer's bookkeeping
(every lot read is stored or counted as left out), and stores written without trades."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lobsurf.cli import main
from lobsurf.data.dataset import TRADE_FIELDS, load_book_tensors, require_trades
from lobsurf.data.schema import TRADE_COLUMNS, UNDEF_PRICE
from lobsurf.data.store import Instrument, Store, StoreError, StoreWriter
from lobsurf.data.trades import TradeChunk, aggregate, attach_to_kept, merge_waiting
from lobsurf.errors import UserError
from lobsurf.training.data import head_rows
from tests.conftest import TICK_FIXED, random_walk_books, write_store

GAP_NS = 60 * 10**9


def random_trades(rng: np.random.Generator, rows: int, count: int) -> TradeChunk:
    """``count`` trades on rows 0..rows-1 near a 4,000 price; some of size 0 or no price."""
    price = (4000 * 4 + rng.integers(-3, 4, count)) * TICK_FIXED
    price = np.where(rng.random(count) < 0.05, UNDEF_PRICE, price)
    return TradeChunk(rng.integers(0, rows, count).astype(np.int64), price.astype(np.int64),
                      rng.integers(0, 6, count).astype(np.int64),
                      rng.integers(-1, 2, count).astype(np.int8))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(0, 60))
def test_aggregate_sums_per_row_side_price_like_a_dictionary(seed, count):
    trades = random_trades(np.random.default_rng(seed), 8, count)
    expected: dict[tuple[int, int, int], int] = defaultdict(int)
    for r, p, s, d in zip(trades.row, trades.price, trades.size, trades.side):
        expected[int(r), int(d), int(p)] += int(s)
    got = aggregate(trades)
    keys = list(zip(got.row.tolist(), got.side.tolist(), got.price.tolist()))
    assert keys == sorted(expected)  # sorted by row, then side, then price; each once
    assert dict(zip(keys, got.size.tolist())) == dict(expected)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_attach_moves_each_trade_to_the_next_kept_row(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 12))
    kept = np.flatnonzero(rng.random(n) < 0.6)
    trades = random_trades(rng, n + 1, int(rng.integers(0, 20)))  # row n: after the chunk
    attached, waiting = attach_to_kept(trades, kept)
    want_rows, want_waiting = [], []
    for k, r in enumerate(trades.row):
        later = [i for i, row in enumerate(kept) if row >= r]
        (want_rows.append((later[0], k)) if later else want_waiting.append(k))
    assert attached.row.tolist() == [i for i, _ in want_rows]
    assert attached.price.tolist() == [int(trades.price[k]) for _, k in want_rows]
    assert waiting.size.tolist() == [int(trades.size[k]) for k in want_waiting]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(0, 60))
def test_waiting_trades_merge_per_side_price_and_book_keeping_the_volume(seed, count):
    rng = np.random.default_rng(seed)
    trades = random_trades(rng, 8, count)
    trades.instrument_id = rng.integers(1, 3, count)
    trades.publisher = rng.integers(1, 3, count)
    merged = merge_waiting(trades)
    expected: dict[tuple, int] = defaultdict(int)
    for k in range(count):
        key = (int(trades.side[k]), int(trades.price[k]), int(trades.instrument_id[k]),
               int(trades.publisher[k]))
        expected[key] += int(trades.size[k])
    got = {(int(d), int(p), int(i), int(b)): int(s) for d, p, i, b, s in
           zip(merged.side, merged.price, merged.instrument_id, merged.publisher, merged.size)}
    assert got == dict(expected) and len(merged) == len(expected)
    assert (merged.row == 0).all()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_store_keeps_every_lot_or_says_why_not(tmp_path_factory, seed):
    # Chunks of books with a time gap inside: trades on a segment's first row are left out,
    # every other lot with a size and a price is stored on its row, the rest is counted.
    rng = np.random.default_rng(seed)
    first = random_walk_books(int(rng.integers(1, 40)), seed)
    second = random_walk_books(int(rng.integers(1, 40)), seed + 1,
                               start_ns=int(first.ts_recv_ns[-1]) + 2 * GAP_NS)
    chunks = [first, second]
    given = [random_trades(rng, len(c), int(rng.integers(0, 30))) for c in chunks]
    path = tmp_path_factory.mktemp("store") / "s"
    with StoreWriter(path, gap_threshold_ns=GAP_NS) as writer:
        writer.add_instrument(Instrument(1, "T", TICK_FIXED))
        writer.begin_source("a")
        for chunk, trades in zip(chunks, given):
            writer.append(chunk, trades=trades)
        manifest = writer.close()
    store = Store.open(path)
    starts = {s.start for s in manifest.segments}
    assert starts == {0, len(first)}
    want: dict[int, int] = defaultdict(int)
    left, left_records = defaultdict(int), defaultdict(int)
    for offset, trades in zip((0, len(first)), given):
        for r, p, s in zip(trades.row + offset, trades.price, trades.size):
            reason = ("no_size" if s == 0 else "undefined_price" if p == UNDEF_PRICE
                      else "before_segment_start" if r in starts else None)
            if reason:
                left[reason] += int(s)
                left_records[reason] += 1
            else:
                want[int(r)] += int(s)
    got: dict[int, int] = defaultdict(int)
    for r, s in zip(store.trades["trade_row"], store.trades["trade_sz"]):
        got[int(r)] += int(s)
    assert dict(got) == {r: v for r, v in want.items() if v}
    summary = manifest.trades
    assert summary.left_out == dict(left) and summary.left_out_records == dict(left_records)
    assert summary.source_volume == sum(t.volume for t in given)
    assert summary.source_volume == summary.volume + sum(summary.left_out.values())
    assert summary.source_records == sum(len(t) for t in given)
    assert summary.volume == summary.buy_volume + summary.sell_volume + summary.unknown_volume
    assert summary.rows == len(got) and summary.entries == len(store.trades["trade_row"])
    assert (np.diff(store.trades["trade_row"]) >= 0).all()


def test_a_source_without_trades_makes_a_store_without_trades(tmp_path):
    store = write_store(tmp_path / "s", [random_walk_books(50, 1)])  # append(chunk): no trades
    assert not store.has_trades and store.manifest.trades is None
    assert not any((tmp_path / "s" / f"{name}.bin").exists() for name in TRADE_COLUMNS)
    assert len(store.trades_of_rows(0, 50)) == 0


def old_store(tmp_path):
    """A store as lobsurf wrote it before trades: manifest version 1, no trade files."""
    store = write_store(tmp_path / "old", [random_walk_books(300, 1)])
    manifest = json.loads((store.path / "manifest.json").read_text())
    del manifest["trades"]
    manifest["version"] = 1
    (store.path / "manifest.json").write_text(json.dumps(manifest))
    return Store.open(store.path)


def test_a_store_written_before_trades_loads_and_refuses_passive_orders(tmp_path, capsys):
    store = old_store(tmp_path)
    assert store.manifest.version == 1 and not store.has_trades
    book = load_book_tensors(store)
    assert not book.has_trades
    assert all(getattr(book, name) is None for name in TRADE_FIELDS)
    assert len(head_rows(book, 100)) == 100
    for data, where in ((store, str(store.path)), (book, None)):
        with pytest.raises(UserError) as caught:
            require_trades(data)
        message = str(caught.value)
        assert "\n" not in message and "re-ingest" in message and "passive orders" in message
        assert where is None or message.startswith(f"{where}: ")
    assert main(["info", str(store.path)]) == 0
    assert "trades       none recorded" in capsys.readouterr().out


def test_require_trades_passes_a_store_with_trades(tmp_path):
    with StoreWriter(tmp_path / "s", gap_threshold_ns=GAP_NS) as writer:
        writer.add_instrument(Instrument(1, "T", TICK_FIXED))
        writer.begin_source("a")
        writer.append(random_walk_books(20, 1), trades=TradeChunk.empty())
        writer.close()
    store = Store.open(tmp_path / "s")
    require_trades(store)
    require_trades(load_book_tensors(store))
    assert store.manifest.trades.entries == 0


def test_a_trade_file_of_the_wrong_size_or_an_unknown_version_is_refused(tmp_path):
    with StoreWriter(tmp_path / "s", gap_threshold_ns=GAP_NS) as writer:
        writer.add_instrument(Instrument(1, "T", TICK_FIXED))
        writer.begin_source("a")
        books = random_walk_books(20, 1)
        writer.append(books, trades=TradeChunk(np.array([3]), books.bid_px[:1, 0],
                                                np.array([2]), np.array([-1], np.int8)))
        writer.close()
    (tmp_path / "s" / "trade_sz.bin").write_bytes(b"\0" * 3)
    with pytest.raises(StoreError, match="trade_sz.bin: missing or wrong size for 1 trade"):
        Store.open(tmp_path / "s")
    manifest = json.loads((tmp_path / "s" / "manifest.json").read_text())
    manifest["version"] = 3
    (tmp_path / "s" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(StoreError, match="store version 3 is not supported .*reads versions 1, 2"):
        Store.open(tmp_path / "s")
