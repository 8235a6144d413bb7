"""The device trade columns against a reference written with plain loops over the store's
raw files (no lobsurf code between the bytes on disk and the expected columns)."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lobsurf.data.dataset import ROW_FIELDS, TRADE_NONE_BUY, TRADE_NONE_SELL, load_book_tensors
from lobsurf.data.store import Instrument, Store, StoreWriter
from lobsurf.data.trades import TradeChunk
from lobsurf.training.data import head_rows
from tests.conftest import TICK_FIXED, random_walk_books

GAP_NS = 60 * 10**9


def reference_columns(path: Path, origin: int, tick: int, rows: list[int]) -> dict[str, list[int]]:
    """The four columns of store ``rows``, by reading the raw files and looping."""
    n = json.loads((path / "manifest.json").read_text())["snapshots"]
    best_bid = np.fromfile(path / "bid_px.bin", "<i8").reshape(n, 10)[:, 0].tolist()
    best_ask = np.fromfile(path / "ask_px.bin", "<i8").reshape(n, 10)[:, 0].tolist()
    table = zip(*(np.fromfile(path / f"trade_{name}.bin", dtype).tolist()
                  for name, dtype in (("row", "<i8"), ("px", "<i8"), ("sz", "<u4"), ("side", "i1"))))
    lowest_sell: dict[int, list[int]] = {}
    highest_buy: dict[int, list[int]] = {}
    for row, price, size, side in table:
        if side == 0:  # classified against the previous row's quotes, or left out
            if price >= best_ask[row - 1]:
                side = 1
            elif price <= best_bid[row - 1]:
                side = -1
            else:
                continue
        if (price - origin) % tick != 0:
            continue
        ticks = (price - origin) // tick
        if not -2**31 <= ticks < 2**31:
            continue
        best = lowest_sell if side == -1 else highest_buy
        if row not in best:
            best[row] = [ticks, size]
        elif ticks == best[row][0]:
            best[row][1] += size
        elif (ticks < best[row][0]) == (side == -1):  # lower for sellers, higher for buyers
            best[row] = [ticks, size]
    out: dict[str, list[int]] = {name: [] for name in ("sell_trade_px_ticks", "sell_trade_sz",
                                                       "buy_trade_px_ticks", "buy_trade_sz")}
    for row in rows:
        sell = lowest_sell.get(row, [TRADE_NONE_SELL, 0])
        buy = highest_buy.get(row, [TRADE_NONE_BUY, 0])
        out["sell_trade_px_ticks"].append(sell[0])
        out["sell_trade_sz"].append(sell[1])
        out["buy_trade_px_ticks"].append(buy[0])
        out["buy_trade_sz"].append(buy[1])
    return out


def store_with_trades(path: Path, seed: int) -> Store:
    """Three segments of random books; trades near the quotes of every kind: both sides and
    unknown, several at one price, off the tick grid, and absurdly far away."""
    rng = np.random.default_rng(seed)
    chunks, start = [], 1_700_000_000 * 10**9
    for k in range(3):
        books = random_walk_books(int(rng.integers(5, 60)), seed + k, start_ns=start)
        chunks.append(books)
        start = int(books.ts_recv_ns[-1]) + 2 * GAP_NS
    with StoreWriter(path, gap_threshold_ns=GAP_NS) as writer:
        writer.add_instrument(Instrument(1, "T", TICK_FIXED))
        writer.begin_source("random")
        for books in chunks:
            m = int(rng.integers(0, 4 * len(books)))
            row = rng.integers(0, len(books), m)
            mid = (books.bid_px[row, 0] + books.ask_px[row, 0]) // 2 // TICK_FIXED
            price = (mid + rng.integers(-3, 4, m)) * TICK_FIXED
            price = np.where(rng.random(m) < 0.1, price + TICK_FIXED // 2, price)  # off grid
            price = np.where(rng.random(m) < 0.02, price + 3 * 10**9 * TICK_FIXED, price)
            writer.append(books, trades=TradeChunk(row.astype(np.int64), price.astype(np.int64),
                                                   rng.integers(1, 9, m).astype(np.int64),
                                                   rng.integers(-1, 2, m).astype(np.int8)))
        writer.close()
    return Store.open(path)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31), chunk_rows=st.sampled_from([1, 7, 1 << 20]),
       segments=st.sampled_from([None, [1, 2], [0, 2]]))
def test_device_trade_columns_equal_the_plain_loop(tmp_path_factory, seed, chunk_rows, segments):
    store = store_with_trades(tmp_path_factory.mktemp("s") / "store", seed)
    book = load_book_tensors(store, segments=segments, chunk_rows=chunk_rows)
    assert book.has_trades
    chosen = range(3) if segments is None else segments
    rows = [r for i in chosen for r in range(store.manifest.segments[i].start,
                                               store.manifest.segments[i].stop)]
    want = reference_columns(store.path, book.price_origin_fixed, book.tick_size_fixed, rows)
    for name, values in want.items():
        got = getattr(book, name)
        assert got.dtype.is_floating_point is False and got.shape == (len(rows),)
        np.testing.assert_array_equal(got.numpy(), np.asarray(values), err_msg=name)
    assert (book.sell_trade_sz > 0).any() and (book.buy_trade_sz > 0).any()


def test_the_training_rows_keep_their_trade_columns(tmp_path):
    book = load_book_tensors(store_with_trades(tmp_path / "s", 3))
    head = head_rows(book, 20)
    per_row = [f.name for f in fields(book) if isinstance(getattr(book, f.name), torch.Tensor)
               and getattr(book, f.name).shape[0] == len(book)]
    assert set(per_row) == set(ROW_FIELDS) and "buy_trade_sz" in per_row
    for name in per_row:
        assert getattr(head, name).shape[0] == 20, name
        np.testing.assert_array_equal(getattr(head, name).numpy(), getattr(book, name)[:20].numpy())
    assert head.has_trades


@pytest.mark.gpu
def test_trade_columns_on_the_gpu_equal_the_cpu_ones(tmp_path):
    store = store_with_trades(tmp_path / "s", 5)
    cpu, gpu = load_book_tensors(store), load_book_tensors(store, device="cuda")
    for name in ROW_FIELDS:
        assert getattr(gpu, name).is_cuda, name
        np.testing.assert_array_equal(getattr(gpu, name).cpu().numpy(), getattr(cpu, name).numpy())
    assert gpu.to("cpu").has_trades
