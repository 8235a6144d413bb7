"""The synthetic market's trades: the books are bit for bit those of before trades were
recorded, the trades agree with the books, and the DBN files carry the same trades as the
store written directly."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from lobsurf.data.schema import STORE_COLUMNS, SnapshotChunk
from lobsurf.data.store import Store
from lobsurf.data.store.ingest import ingest
from lobsurf.data.synth import (
    SynthConfig,
    generate_day,
    synth_ingest_config,
    write_synth,
    write_synth_store,
)
from lobsurf.presets import PRESETS
from tests.data.synth.test_synth import day_books, day_trades

#: sha256 of the book columns (``book_hash``) of each preset at 2 days x 3,000 snapshots in
#: chunks of 1,024, computed on the generator before it recorded trades.
SMALL_PRESET_HASHES = {
    "tradeable": "10a4c28bc4def67fd0252f74e8adea5b93909ef5aae065701808284b6738367e",
    "tradeable-null": "626c13f16a609e23e3557031a4e02ce6535f4a512ef02b47e8ccfd6f5f37559f",
    "tradeable-fast": "9a4f99fd331da3b8a24b1dcdb5a3ae507790f641902544d3aca98f16c6968944",
}
#: the same of the whole presets, and of the store the bundled default data set is
#: (``tradeable`` through its DBN files and ``lobsurf ingest``).
PRESET_HASHES = {
    "tradeable": "89270088aa97b8cc08d13beecca91b766a77377ae9049ea1c473305426e14012",
    "tradeable-null": "1f6b8add643ff7b6f1cc418c9f589dad171e315e27943369e91bf2643865d697",
    "tradeable-fast": "2f33142f895119b23a8803b0c2d959ec3db22c1906bf1644999a64d2d258375e",
    "tradeable-fast-null": "387dede78d73d6189e2b1b94ba37e081a8051ac705177cbbac0c027c6632bcb6",
}
TRADEABLE_STORE_HASH = "c9ce3381b69b6301918a8b9002273a93562286401ff0f69d63d6f16a69573029"


def book_hash(chunks) -> str:
    """sha256 over every book column (``STORE_COLUMNS`` order) as little-endian int64."""
    digest = hashlib.sha256()
    for chunk in chunks:
        for name in STORE_COLUMNS:
            digest.update(np.ascontiguousarray(getattr(chunk, name), dtype="<i8").tobytes())
    return digest.hexdigest()


def preset_hash(cfg: SynthConfig) -> str:
    return book_hash(c for day in range(cfg.days) for c in generate_day(cfg, day))


@pytest.mark.parametrize("name", sorted(SMALL_PRESET_HASHES))
def test_preset_books_are_bit_for_bit_those_of_before_trades(name):
    cfg = replace(PRESETS[name], snapshots_per_day=3000, days=2, chunk_rows=1024)
    assert preset_hash(cfg) == SMALL_PRESET_HASHES[name]
    # Whatever the trade settings: trades draw from streams of their own.
    other = replace(cfg, partial_trade_prob=0.9, partial_trade_mean_lots=20.0,
                    partial_trade_lean=1.0 - cfg.partial_trade_lean)
    assert preset_hash(other) == SMALL_PRESET_HASHES[name]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PRESET_HASHES))
def test_whole_preset_books_are_bit_for_bit_those_of_before_trades(name):
    assert preset_hash(PRESETS[name]) == PRESET_HASHES[name]


@pytest.mark.slow
def test_the_bundled_store_is_bit_for_bit_that_of_before_trades(tmp_path):
    cfg = PRESETS["tradeable"]
    paths = write_synth(tmp_path / "dbn", cfg)
    manifest = ingest(paths, tmp_path / "s", synth_ingest_config(cfg))
    store = Store.open(tmp_path / "s")
    assert book_hash([store.rows(0, len(store))]) == TRADEABLE_STORE_HASH
    assert store.has_trades and manifest.trades.volume > 0


def test_trades_agree_with_the_books():
    cfg = SynthConfig(snapshots_per_day=30_000, seed=8, edge=0.5, partial_trade_prob=0.3,
                      partial_trade_lean=0.5, chunk_rows=7_000)
    books, trades = day_books(cfg), day_trades(cfg)
    tick = cfg.tick_size_fixed
    bid, ask = books.bid_px[:, 0] // tick, books.ask_px[:, 0] // tick
    trades = trades.take(trades.row > 0)  # row 0's book before is the opening book
    r = trades.row
    buyer = trades.side == 1
    assert set(trades.side.tolist()) == {1, -1}
    # Every trade prints at the previous best price of the side it hits, at most its size.
    np.testing.assert_array_equal(trades.price // tick, np.where(buyer, ask[r - 1], bid[r - 1]))
    shown = np.where(buyer, books.ask_sz[r - 1, 0], books.bid_sz[r - 1, 0])
    assert (trades.size >= 1).all() and (trades.size <= shown).all()
    # Where that side's best price moved, the trade cleared the level: a mid move toward it.
    moved = np.where(buyer, ask[r] != ask[r - 1], bid[r] != bid[r - 1])
    mid_step = (bid[r] + ask[r]) - (bid[r - 1] + ask[r - 1])
    assert np.where(buyer, mid_step > 0, mid_step < 0)[moved].all()
    np.testing.assert_array_equal(trades.size[moved], shown[moved])
    # ... and every such mid move is a trade (a two-sided widening is not: mid unchanged).
    rise = np.flatnonzero((np.diff(ask) > 0) & (np.diff(bid + ask) > 0)) + 1
    fall = np.flatnonzero((np.diff(bid) < 0) & (np.diff(bid + ask) < 0)) + 1
    assert set(rise) == set(r[moved & buyer]) and set(fall) == set(r[moved & ~buyer])
    widen = np.flatnonzero((np.diff(ask) > 0) & (np.diff(bid) < 0)) + 1
    assert len(widen) > 0 and not np.isin(widen, r).any()
    # Partial trades: at about their rate among the events whose level stands.
    partial = ~moved
    rate = partial.sum() / len(bid)
    assert 0.2 < rate < 0.3, rate
    assert 1.5 < trades.size[partial].mean() < 3.0  # geometric mean 3, capped by the queue


def test_trades_do_not_depend_on_the_chunk_size():
    small = day_trades(SynthConfig(snapshots_per_day=5000, seed=4, edge=0.5, chunk_rows=333))
    large = day_trades(SynthConfig(snapshots_per_day=5000, seed=4, edge=0.5, chunk_rows=5000))
    for name in ("row", "price", "size", "side"):
        np.testing.assert_array_equal(getattr(small, name), getattr(large, name), err_msg=name)


@pytest.mark.parametrize("lean", [0.0, 1.0])
def test_partial_trade_buyers_lean_with_the_imbalance(lean):
    cfg = SynthConfig(snapshots_per_day=60_000, seed=3, partial_trade_prob=0.5,
                      partial_trade_lean=lean)
    books, trades = day_books(cfg), day_trades(cfg)
    tick = cfg.tick_size_fixed
    r = trades.row[trades.row > 0]
    side = trades.side[trades.row > 0]
    size_before = books.bid_sz[r - 1, 0], books.ask_sz[r - 1, 0]
    imbalance = (size_before[0] - size_before[1]) / (size_before[0] + size_before[1])
    stood = np.where(side == 1, books.ask_px[r, 0] == books.ask_px[r - 1, 0],
                     books.bid_px[r, 0] == books.bid_px[r - 1, 0])
    assert tick > 0 and stood.sum() > 10_000
    buys_up = (side[stood & (imbalance > 0.5)] == 1).mean()
    buys_down = (side[stood & (imbalance < -0.5)] == 1).mean()
    if lean == 0:
        assert abs(buys_up - 0.5) < 0.03 and abs(buys_down - 0.5) < 0.03
    else:  # P(buyer) = 0.5 + 0.5 * I: about 0.85 above I = 0.5 (fewer partial buys where
        assert buys_up > 0.75 and buys_down < 0.25  # the ask moves, as it does there)


def test_dbn_files_and_the_direct_store_hold_the_same_trades(tmp_path: Path):
    cfg = replace(PRESETS["tradeable"], snapshots_per_day=4000, days=2, chunk_rows=1500)
    direct = write_synth_store(tmp_path / "direct", cfg)
    ingest(write_synth(tmp_path / "dbn", cfg), tmp_path / "ingested",
           synth_ingest_config(cfg, chunk_records=999))
    ingested = Store.open(tmp_path / "ingested")
    for name in SnapshotChunk.__dataclass_fields__:
        np.testing.assert_array_equal(ingested.columns[name], direct.columns[name], err_msg=name)
    assert direct.has_trades and len(direct.trades["trade_row"]) > 1000
    for name in direct.trades:
        np.testing.assert_array_equal(ingested.trades[name], direct.trades[name], err_msg=name)
    assert ingested.manifest.trades == direct.manifest.trades
    # A day's first row starts a segment: what traded at it is the only trade left out.
    assert set(direct.manifest.trades.left_out) <= {"before_segment_start"}
