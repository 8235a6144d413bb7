"""Tardis.dev CSV files into the store: incremental_book_L2 rebuilt (held to the plain
reference), book_snapshot_N read directly, trades parsed, and the one-line errors."""

from __future__ import annotations

from decimal import Decimal

import pytest

from lobsurf.data.readers.crypto_reference import reference_tardis_incremental
from lobsurf.data.schema import UNDEF_PRICE
from lobsurf.data.store import Store
from lobsurf.data.store.ingest import IngestConfig, ingest
from lobsurf.errors import UserError
from tests.data.crypto_files import tardis_incremental, tardis_snapshots, tardis_trades
from tests.data.readers.test_binance import kept_rows, store_levels

US = 1_723_161_000 * 10**6  # 2024-08-08 23:50 UTC in microseconds


def book_rows(t: int, mid: float, levels: int = 12) -> list[tuple]:
    rows = [(t, t + 50, True, "bid", f"{mid - 0.5 - k * 0.5:.1f}", f"{0.01 * (k + 1):.3f}")
            for k in range(levels)]
    rows += [(t, t + 50, True, "ask", f"{mid + 0.5 + k * 0.5:.1f}", f"{0.02 * (k + 1):.3f}")
             for k in range(levels)]
    return rows


def build(tmp_path, paths, **cfg) -> Store:
    ingest([str(p) for p in paths], tmp_path / "store", IngestConfig(**cfg), overwrite=True)
    return Store.open(tmp_path / "store")


def assert_store_is_reference(store: Store, paths) -> None:
    expected = kept_rows(reference_tardis_incremental(paths).rows)
    got = store_levels(store)
    assert [(ts, b, a) for ts, b, a in got] == [(r.ts_recv_ns, r.bids, r.asks) for r in expected]


def test_incremental_book_is_rebuilt_one_row_per_message(tmp_path):
    rows = [(US - 10, US - 5, False, "bid", "99.0", "1")]  # before the first snapshot: skipped
    rows += book_rows(US, 100.0)
    rows += [(US + 100, US + 150, False, "bid", "99.5", "0.05"),   # one message: 2 rows
             (US + 100, US + 150, False, "ask", "100.5", "0"),
             (US + 200, US + 260, False, "ask", "100.7", "0.123")]
    path = tardis_incremental(tmp_path / "binance_incremental_book_L2_2024-08-08_BTCUSDT.csv",
                              rows)
    store = build(tmp_path, [path])
    assert_store_is_reference(store, [path])
    assert len(store) == 3 and store.manifest.skipped["depth_no_book"] == 1
    inst = store.manifest.instruments[0]
    assert inst.symbol == "binance:BTCUSDT" and inst.size_unit == 0.001
    assert inst.market_hours == "24/7" and inst.multiplier_known
    assert store.columns["ts_recv_ns"][1] == (US + 150) * 1000


def test_a_new_snapshot_mid_file_restarts_the_book_in_a_new_segment(tmp_path):
    rows = book_rows(US, 100.0) + [(US + 100, US + 150, False, "bid", "99.5", "0.05")]
    rows += book_rows(US + 1_000, 101.0)  # a reconnection: the book is replaced
    rows += [(US + 2_000, US + 2_050, False, "ask", "101.5", "0.5")]
    path = tardis_incremental(tmp_path / "a.csv", rows)
    store = build(tmp_path, [path])
    assert_store_is_reference(store, [path])
    assert [len(s) for s in store.manifest.segments] == [2, 2]
    assert store.manifest.skipped["book_restart"] == 1


def test_the_next_days_file_continues_the_series_across_midnight(tmp_path):
    day1 = book_rows(US, 100.0) + [(US + 100, US + 150, False, "bid", "99.5", "0.05")]
    midnight = US + 600 * 10**6
    day2 = book_rows(midnight, 100.0) + [(midnight + 100, midnight + 120, False, "ask",
                                          "100.5", "0.07")]
    second = tardis_incremental(tmp_path / "binance_incremental_book_L2_2024-08-09_BTCUSDT.csv",
                                day2)
    first = tardis_incremental(tmp_path / "binance_incremental_book_L2_2024-08-08_BTCUSDT.csv",
                               day1)
    store = build(tmp_path, [second, first], gap_threshold_s=3600)
    assert_store_is_reference(store, [first, second])
    assert len(store.manifest.segments) == 1 and len(store) == 4
    assert store.manifest.skipped.get("book_restart", 0) == 0


def test_book_snapshot_5_is_read_directly_with_the_missing_levels_empty(tmp_path):
    asks = [("100.5", "1.5"), ("101", "2"), ("101.5", "0.25"), ("102", "1"), ("102.5", "3")]
    bids = [("99.5", "4"), ("99", "0.5"), ("98.5", "1")]  # only 3 bid levels
    path = tardis_snapshots(tmp_path / "s.csv", 5, [(US, US + 10, asks, bids),
                                                    (US + 20, US + 30, asks[:2], bids[:1])])
    store = build(tmp_path, [path])
    levels = store_levels(store)
    assert levels[0][1] == [(Decimal(p), Decimal(a)) for p, a in bids]
    assert levels[0][2] == [(Decimal(p), Decimal(a)) for p, a in asks]
    assert levels[1][1] == [(Decimal("99.5"), Decimal("4"))]
    bid_px = store.columns["bid_px"]
    assert (bid_px[0][3:] == UNDEF_PRICE).all() and (store.columns["ask_px"][0][5:] ==
                                                     UNDEF_PRICE).all()
    assert store.manifest.instruments[0].size_unit == 0.25


def test_trades_are_parsed_a_trades_file_alone_gives_no_store(tmp_path):
    from lobsurf.data.readers.decimals import SizeUnit
    from lobsurf.data.readers.tardis import TardisReader, peek_tardis

    path = tardis_trades(tmp_path / "t.csv", [(US, US + 5, "buy", "100.5", "0.01"),
                                              (US + 1, US + 6, "sell", "100", "0.25"),
                                              (US + 2, US + 7, "unknown", "100", "1")])
    key, _ = peek_tardis(path)
    trades = next(iter(TardisReader([path], key, SizeUnit(), 100))).trades
    assert trades.side.tolist() == [1, -1, 0] and trades.size.tolist() == [1, 25, 100]
    with pytest.raises(UserError, match=r"t.csv: a trades file \(3 trades\): it holds no "
                                        "order book"):
        build(tmp_path, [path])


@pytest.mark.parametrize("bad_row, message", [
    ("binance,BTCUSDT,1,2,maybe,bid,1,1", r"a.csv:26: is_snapshot 'maybe'"),
    ("binance,BTCUSDT,1,2,false,buy,1,1", r"a.csv:26: side 'buy' is not bid or ask"),
    ("binance,BTCUSDT,1,2,false,bid,1", r"a.csv:26: expected 8 columns, found 7"),
    ("binance,BTCUSDT,1,2,false,bid,1e,1", r"a.csv:26: '1e' is not a decimal number"),
    ("binance,BTCUSDT,x,2,false,bid,1,1", r"a.csv:26: 'x' is not a time in microseconds"),
])
def test_a_bad_row_is_a_one_line_error_naming_file_and_line(tmp_path, bad_row, message):
    path = tardis_incremental(tmp_path / "a.csv", book_rows(US, 100.0))
    path.write_text(path.read_text() + bad_row + "\n")
    with pytest.raises(UserError, match=message):
        build(tmp_path, [path])


def test_a_csv_that_is_not_tardis_is_refused_by_its_header(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(UserError, match=r"x.csv:1: not a Tardis CSV header"):
        ingest([path], tmp_path / "s", IngestConfig(), fmt="tardis")


def test_an_exchange_whose_amounts_may_be_contracts_gets_no_multiplier_claimed(tmp_path, capsys):
    from lobsurf.api import ingest as api_ingest

    path = tardis_incremental(tmp_path / "d.csv", book_rows(US, 6000.0), exchange="deribit",
                              symbol="BTC-PERPETUAL")
    inst = api_ingest(path, tmp_path / "s").manifest.instruments[0]
    assert not inst.multiplier_known and inst.currency == "unknown"
    err = capsys.readouterr().err
    assert "deribit:BTC-PERPETUAL" in err and "amounts may be contracts" in err
