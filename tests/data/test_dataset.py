"""Device dataset: exact ticks, empty-level placeholders, segments, and the window gather
against a per-row loop."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lobsurf.data.dataset import gather_window, load_book_tensors
from lobsurf.data.schema import LEVELS, UNDEF_PRICE
from lobsurf.data.store import StoreError
from tests.conftest import TICK_FIXED, random_walk_books, write_store


def test_prices_are_exact_ticks_and_segments_renumbered(tiny_store):
    book = load_book_tensors(tiny_store)
    raw = tiny_store.rows(0, len(tiny_store))
    ticks = (raw.bid_px - book.price_origin_fixed) // TICK_FIXED
    assert ((raw.bid_px - book.price_origin_fixed) % TICK_FIXED == 0).all()
    np.testing.assert_array_equal(book.bid_px_ticks.numpy(), ticks)
    np.testing.assert_array_equal(book.ask_sz.numpy(), raw.ask_sz)
    assert book.tick_size == 0.25 and book.multiplier == 50.0
    assert book.segment_start.tolist() == [0, 2000] and book.segment_stop.tolist() == [2000, 3500]
    assert book.segment_of_row[1999] == 0 and book.segment_of_row[2000] == 1
    assert int(book.bid_px_ticks.min()) >= 0
    # price() maps ticks back to currency exactly for quarter ticks
    assert book.price(book.bid_px_ticks[:1, 0])[0] == raw.bid_px[0, 0] / 1e9
    part = load_book_tensors(tiny_store, segments=[1])
    np.testing.assert_array_equal(part.ask_ct.numpy(), raw.ask_ct[2000:])
    assert part.segment_start.tolist() == [0] and len(part) == 1500


def test_empty_levels_get_sizeless_placeholders_one_tick_further(tmp_path):
    books = random_walk_books(5, seed=3)
    books.bid_px[:, 6:] = UNDEF_PRICE
    books.bid_sz[:, 6:] = 0
    books.ask_px[2, 1:] = UNDEF_PRICE
    books.ask_sz[2, 1:] = 0
    book = load_book_tensors(write_store(tmp_path / "s", [books]))
    bid = book.bid_px_ticks.numpy()
    assert (np.diff(bid[:, 5:], axis=1) == -1).all()      # placeholders step one tick down
    assert (book.bid_sz[:, 6:] == 0).all() and (book.bid_ct[:, 6:] == 0).all()
    ask = book.ask_px_ticks[2].numpy()
    assert (np.diff(ask) == 1).all() and (book.ask_sz[2, 1:] == 0).all()


def test_gather_window_equals_row_loop(tiny_store):
    book = load_book_tensors(tiny_store)
    K = 7
    end = torch.tensor([6, 100, 1999, 2006, 3499, 2500])
    w = gather_window(book, end, K)
    for b, e in enumerate(end.tolist()):
        for k in range(K):
            row = e - K + 1 + k
            assert w.ts_ns[b, k] == book.ts_ns[row]
            for name in ("bid_px_ticks", "ask_px_ticks", "bid_sz", "ask_sz", "bid_ct", "ask_ct"):
                assert torch.equal(getattr(w, name)[b, k], getattr(book, name)[row]), name
    assert w.bid_sz.shape == (len(end), K, LEVELS)
    # out-of-range cursors are clamped, never read out of bounds
    clamp = gather_window(book, torch.tensor([2, len(book) + 5]), 4)
    assert torch.equal(clamp.ts_ns[0, :2], book.ts_ns[[0, 0]])
    assert torch.equal(clamp.ts_ns[1], book.ts_ns[[-1] * 4])


def test_several_instruments_need_a_choice(tmp_path):
    a = random_walk_books(50, seed=1)
    b = random_walk_books(30, seed=2, start_ns=int(a.ts_recv_ns[-1]) + 1, instrument_id=2)
    from lobsurf.data.store import Instrument, Store, StoreWriter
    with StoreWriter(tmp_path / "s", gap_threshold_ns=10**12) as w:
        w.add_instrument(Instrument(1, "A", TICK_FIXED))
        w.add_instrument(Instrument(2, "B", TICK_FIXED * 2))
        w.begin_source("x")
        w.append(a)
        w.append(b)
        w.close()
    store = Store.open(tmp_path / "s")
    with pytest.raises(StoreError, match="instrument-id"):
        load_book_tensors(store)
    with pytest.raises(StoreError, match="off the instrument's tick 0.5"):
        load_book_tensors(store, instrument_id=2)  # quarter-tick prices, half-point tick
    one = load_book_tensors(store, instrument_id=1)
    assert len(one) == 50 and one.tick_size == 0.25


def test_sizes_beyond_int32_are_refused_not_wrapped(tmp_path):
    # A DBN size is uint32: 3e9 lots is a valid store value but would turn negative in the
    # int32 device tensors.
    books = random_walk_books(20, seed=3)
    books.ask_sz[7, 2] = 3_000_000_000
    store = write_store(tmp_path / "s", [books])
    with pytest.raises(StoreError, match=r"row 7: ask size 3000000000 is more than"):
        load_book_tensors(store)


def test_prices_whose_offset_overflows_int64_are_refused(tmp_path):
    books = random_walk_books(20, seed=4)
    books.ask_px[5] = np.iinfo(np.int64).max - TICK_FIXED * (LEVELS - np.arange(LEVELS))
    books.bid_px[3, :] -= TICK_FIXED * 10**9 * 4  # a far lower bid: the origin moves down
    store = write_store(tmp_path / "s", [books])
    with pytest.raises(StoreError, match="span more ticks than int32"):
        load_book_tensors(store)
