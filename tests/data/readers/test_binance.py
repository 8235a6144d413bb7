"""Binance recordings into the store: the diff-depth procedure, the size unit, the
bookTicker check and the errors, on real excerpts and on small files written here.

Every store is held to the plain Decimal reference (``crypto_reference``), which shares no
code with the reader: its rows, minus those validation skips, are the store's rows exactly.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from lobsurf.data.readers.crypto_reference import RefRow, reference_binance
from lobsurf.data.schema import UNDEF_PRICE
from lobsurf.data.store import Store
from lobsurf.data.store.ingest import IngestConfig, ingest
from lobsurf.errors import UserError
from tests.data.crypto_files import (MS, T0, book_levels, depth, px, qty, random_recording,
                                     snapshot, ticker, trade, write_recording)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "binance"
SPOT = FIXTURES / "spot_btcusdt_20240808_head2000.gz"
USDM = FIXTURES / "usdm_btcusdt_20240808_head2000.gz"


def kept_rows(rows: list[RefRow]) -> list[RefRow]:
    """The reference rows validation keeps: two-sided, uncrossed, time not going back."""
    out, latest = [], -1
    for row in rows:
        ok = (row.bids and row.asks and row.bids[0][0] < row.asks[0][0]
              and row.ts_recv_ns >= latest)
        latest = max(latest, row.ts_recv_ns)
        if ok:
            out.append(row)
    return out


def store_levels(store: Store) -> list[tuple[int, list, list]]:
    """Each store row as (capture ns, bids, asks) of Decimal (price, base amount)."""
    unit = Decimal(repr(store.manifest.instruments[0].size_unit))
    c = store.rows(0, len(store))
    out = []
    for i in range(len(store)):
        sides = []
        for p, s in ((c.bid_px[i], c.bid_sz[i]), (c.ask_px[i], c.ask_sz[i])):
            sides.append([(Decimal(int(a)) / 10**9, int(b) * unit) for a, b in zip(p, s)
                          if a != UNDEF_PRICE])
        out.append((int(c.ts_recv_ns[i]), *sides))
    return out


def assert_store_is_reference(store: Store, paths: list[Path]) -> None:
    expected = kept_rows(reference_binance(paths).rows)
    got = store_levels(store)
    assert len(got) == len(expected)
    for (ts, bids, asks), row in zip(got, expected):
        assert (ts, bids, asks) == (row.ts_recv_ns, row.bids, row.asks)


def build(tmp_path: Path, paths: list[Path], **cfg) -> Store:
    out = tmp_path / "store"
    ingest([str(p) for p in paths], out, IngestConfig(**cfg), overwrite=True)
    return Store.open(out)


def checked_store(tmp_path: Path, lines: list, **cfg) -> Store:
    """The store of a recording of ``lines``, held to the reference."""
    path = write_recording(tmp_path / "r.gz", lines)
    store = build(tmp_path, [path], **cfg)
    assert_store_is_reference(store, [path])
    return store


@pytest.mark.parametrize("path, unit, venue", [(SPOT, 0.00001, "binance"),
                                               (USDM, 0.001, "binance-futures")])
def test_real_recordings_rebuild_as_the_reference_and_agree_with_book_ticker(
        tmp_path, path, unit, venue):
    store = build(tmp_path, [path])
    assert_store_is_reference(store, [path])
    m = store.manifest
    inst = m.instruments[0]
    assert inst.symbol == f"{venue}:BTCUSDT" and inst.size_unit == unit
    assert inst.market_hours == "24/7" and inst.currency == "USDT"
    assert inst.multiplier == pytest.approx(unit) and inst.multiplier_known
    checks = m.cross_checks
    assert checks["book_ticker_aligned"] >= 16
    assert checks["book_ticker_agree"] == checks["book_ticker_aligned"]
    assert m.skipped.get("depth_gap", 0) == 0 and checks["book_starts"] == 1
    assert m.skipped["depth_stale"] == (2 if venue == "binance" else 4)
    trades = m.trades  # what traded between the rows, in the trade table
    assert trades.source_records > 200 and trades.volume > 0 and trades.entries > 100
    assert trades.buy_volume + trades.sell_volume == trades.volume


def test_event_before_the_snapshot_line_bridges_it_and_rows_wait_for_the_snapshot(tmp_path):
    bids, asks = book_levels(6_000_000)
    lines = [depth(95, 100, [], [], T0),                          # stale: u <= 100
             depth(101, 103, [[px(5_999_999), qty(7)]], [], T0 + MS),  # bridges 100
             snapshot(100, bids, asks, T0 + 5 * MS),
             depth(104, 105, [], [[px(6_000_001), qty(9)]], T0 + 9 * MS)]
    store = checked_store(tmp_path, lines)
    ts = store.columns["ts_recv_ns"]
    assert list(ts) == [T0 + 5 * MS, T0 + 9 * MS]  # the bridged event waits for the snapshot
    assert store.manifest.skipped["depth_stale"] == 1
    assert store.columns["bid_sz"][0][0] == 7 and store.columns["ask_sz"][1][0] == 9


def test_a_gap_ends_the_segment_and_the_book_restarts_only_at_the_next_snapshot(tmp_path):
    bids, asks = book_levels(6_000_000)
    lines = [snapshot(100, bids, asks, T0), depth(101, 102, [], [], T0 + MS),
             depth(103, 104, [], [], T0 + 2 * MS),
             depth(110, 111, [], [], T0 + 3 * MS),   # gap: 105..109 missing
             depth(112, 113, [], [], T0 + 4 * MS),   # no book: waits
             snapshot(112, bids, asks, T0 + 5 * MS),  # bridged by 112..113
             depth(114, 115, [], [], T0 + 6 * MS)]
    store = checked_store(tmp_path, lines)
    m = store.manifest
    assert [len(s) for s in m.segments] == [2, 2]
    assert m.skipped["depth_gap"] == 1 and m.cross_checks["book_starts"] == 2
    assert m.skipped["depth_stale"] == 1  # 110..111 is inside the second snapshot


def test_spot_chain_needs_u_plus_one_an_overlap_is_a_gap_an_old_event_is_ignored(tmp_path):
    bids, asks = book_levels(6_000_000)
    lines = [snapshot(100, bids, asks, T0), depth(101, 104, [], [], T0 + MS),
             depth(103, 103, [], [], T0 + 2 * MS),  # already applied: ignored
             depth(104, 106, [], [], T0 + 3 * MS),  # overlaps 104: the chain is broken
             depth(107, 108, [], [], T0 + 4 * MS)]
    store = checked_store(tmp_path, lines)
    assert len(store) == 1
    assert store.manifest.skipped["depth_gap"] == 1
    assert store.manifest.skipped["depth_duplicate"] == 1


def test_usdm_chain_follows_pu_and_a_broken_pu_is_a_gap(tmp_path):
    bids, asks = book_levels(6_000_000)
    lines = [snapshot(100, bids, asks, T0), depth(90, 105, [], [], T0 + MS, prev=80),
             depth(108, 109, [], [], T0 + 2 * MS, prev=105),  # U jumps, pu chains: applied
             depth(111, 112, [], [], T0 + 3 * MS, prev=110)]  # pu 110 != 109: a gap
    store = checked_store(tmp_path, lines)
    assert len(store) == 2 and store.manifest.skipped["depth_gap"] == 1


def test_a_snapshot_no_event_bridges_is_counted_and_the_next_one_used(tmp_path):
    bids, asks = book_levels(6_000_000)
    lines = [snapshot(100, bids, asks, T0), depth(105, 106, [], [], T0 + MS),  # starts late
             depth(107, 108, [], [], T0 + 2 * MS), snapshot(107, bids, asks, T0 + 3 * MS),
             depth(109, 110, [], [], T0 + 4 * MS)]
    store = checked_store(tmp_path, lines)
    assert store.manifest.skipped["snapshot_unbridged"] == 1 and len(store) == 2


def test_no_bridged_snapshot_at_all_is_a_one_line_error_saying_why(tmp_path):
    bids, asks = book_levels(6_000_000)
    path = write_recording(tmp_path / "r.gz", [snapshot(100, bids, asks, T0),
                                               depth(105, 106, [], [], T0 + MS)])
    with pytest.raises(UserError, match=r"r.gz: no depth snapshot that a depth event bridges"):
        build(tmp_path, [path])


def test_a_crossed_book_row_is_skipped_and_counted(tmp_path):
    bids, asks = book_levels(6_000_000)
    lines = [snapshot(100, bids, asks, T0),
             depth(101, 101, [[px(6_000_005), qty(3)]], [], T0 + MS),  # bid above the ask
             depth(102, 102, [[px(6_000_005), qty(0)]], [], T0 + 2 * MS)]
    store = checked_store(tmp_path, lines)
    assert store.manifest.skipped["crossed_book"] == 1 and len(store) == 1


def test_an_out_of_order_receive_time_skips_the_row_but_not_the_update(tmp_path):
    bids, asks = book_levels(6_000_000)
    lines = [snapshot(100, bids, asks, T0), depth(101, 101, [], [], T0 + 10 * MS),
             depth(102, 102, [[px(5_999_999), qty(42)]], [], T0 + 5 * MS),  # earlier
             depth(103, 103, [], [], T0 + 11 * MS)]
    store = checked_store(tmp_path, lines)
    assert store.manifest.skipped["ts_backwards"] == 1
    assert store_levels(store)[-1][1][0] == (Decimal("59999.99"), Decimal("0.00042"))


def test_a_recording_split_at_midnight_is_one_series_read_in_time_order(tmp_path):
    lines = random_recording(120, seed=3, start_ns=T0 + 590 * 10**9)  # 23:59:50 ..
    cut = next(i for i, (ts, _) in enumerate(lines) if ts >= T0 + 600 * 10**9)
    first = write_recording(tmp_path / "btcusdt_20240808.gz", lines[:cut])
    second = write_recording(tmp_path / "btcusdt_20240809.gz", lines[cut:])
    store = build(tmp_path, [second, first])  # given out of order: sorted by time
    assert_store_is_reference(store, [first, second])
    m = store.manifest
    assert len(m.segments) == 1 and m.segments[0].source.startswith("btcusdt_20240808.gz ..")
    day = np.asarray(store.columns["ts_recv_ns"]) // (86_400 * 10**9)
    assert len(set(day.tolist())) == 2  # the segment crosses midnight
    assert m.cross_checks["book_ticker_agree"] == m.cross_checks["book_ticker_aligned"] > 30


def test_a_wrong_book_ticker_is_reported_with_its_line(tmp_path, capsys):
    from lobsurf.api import ingest as api_ingest

    bids, asks = book_levels(6_000_000)
    lines = [snapshot(100, bids, asks, T0), depth(101, 102, [], [], T0 + MS),
             ticker(102, px(5_999_999), qty(100), px(6_000_001), qty(101), T0 + 2 * MS)]
    path = write_recording(tmp_path / "r.gz", lines)
    api_ingest(path, tmp_path / "s", overwrite=True)
    err = capsys.readouterr().err
    assert "1 of 1 id-aligned bookTicker messages disagree" in err and "r.gz:3" in err
    checks = Store.open(tmp_path / "s").manifest.cross_checks
    assert (checks["book_ticker_aligned"], checks["book_ticker_agree"]) == (1, 0)


def test_trades_belong_to_the_next_row_with_the_aggressor_in_size_units(tmp_path):
    from lobsurf.data.readers.binance import BinanceReader, peek_stream
    from lobsurf.data.readers.decimals import SizeUnit

    bids, asks = book_levels(6_000_000)
    lines = [snapshot(100, bids, asks, T0), depth(101, 101, [], [], T0 + MS),
             trade(px(6_000_001), qty(250), True, T0 + 2 * MS),
             trade(px(6_000_002), qty(5), False, T0 + 3 * MS),
             depth(102, 102, [], [], T0 + 4 * MS)]
    path = write_recording(tmp_path / "r.gz", lines)
    unit = SizeUnit()
    chunks = list(BinanceReader([path], peek_stream(path)[0], unit))
    trades = chunks[-1].trades
    assert trades.row.tolist() == [1, 1]  # between rows 0 and 1: in row 1's interval
    assert trades.side.tolist() == [-1, 1]  # m true: the buyer was the maker, the seller hit
    assert unit.text() == "0.00005"  # 0.0025, 0.00005 and the snapshot's 0.001 .. 0.012
    assert trades.size.tolist() == [50, 1]
    assert trades.price.tolist() == [60_000_010_000_000, 60_000_020_000_000]
    store = build(tmp_path, [path])
    table = store.trades_of_rows(0, len(store))
    assert table.row.tolist() == [1, 1] and sorted(table.size.tolist()) == [1, 50]


def test_a_recording_without_the_trade_stream_gives_a_store_without_trades(tmp_path):
    bids, asks = book_levels(6_000_000)
    store = checked_store(tmp_path, [snapshot(100, bids, asks, T0),
                                     depth(101, 101, [], [], T0 + MS)])
    assert store.manifest.trades is None and not store.has_trades


def test_a_finer_size_later_refines_the_unit_and_rescales_what_was_written(tmp_path):
    bids, asks = book_levels(6_000_000)
    lines = [snapshot(100, bids, asks, T0)]
    for i in range(30):  # coarse sizes first, in several chunks, with trades between rows
        lines.append(depth(101 + i, 101 + i, [[px(5_999_999), qty(1000 + 100 * i)]], [],
                           T0 + (i + 1) * MS))
        lines.append(trade(px(6_000_001), qty(500), i % 2 == 0, T0 + (i + 1) * MS + 1))
    lines.append(depth(131, 131, [[px(5_999_999), qty(7)]], [], T0 + 40 * MS))  # 0.00007
    lines.append(trade(px(6_000_001), qty(3), False, T0 + 41 * MS))  # 0.00003
    lines.append(depth(132, 132, [], [], T0 + 42 * MS))
    store = checked_store(tmp_path, lines, chunk_records=8)
    assert store.manifest.instruments[0].size_unit == 0.00001
    table = store.trades_of_rows(0, len(store))
    assert table.size.tolist() == [500] * 30 + [3]  # units of 0.00001, every chunk's alike
    assert table.row.tolist() == list(range(1, 32))
    summary = store.manifest.trades
    assert summary.volume == summary.source_volume == 30 * 500 + 3


def test_a_given_size_unit_is_used_and_a_size_off_it_named(tmp_path):
    bids, asks = book_levels(6_000_000)
    ok = write_recording(tmp_path / "ok.gz", [snapshot(100, bids, asks, T0),
                                              depth(101, 101, [], [], T0 + MS)])
    store = build(tmp_path, [ok], size_unit="0.0001")
    assert store.manifest.instruments[0].size_unit == 0.0001
    assert int(store.columns["bid_sz"][0][0]) == 10  # 0.001 = 10 units of 0.0001
    bad = write_recording(tmp_path / "bad.gz", [
        snapshot(100, bids, asks, T0), depth(101, 101, [[px(5_999_999), qty(3)]], [], T0 + MS)])
    with pytest.raises(UserError, match=r"bad.gz:2: .*not a whole number of --size-unit 0.0001"):
        build(tmp_path, [bad], size_unit="0.0001")


def test_a_size_beyond_uint32_units_is_a_clear_error(tmp_path):
    bids, asks = book_levels(6_000_000)
    huge = [[px(5_999_999), "50000.00001000"]]  # 5,000,000,001 units of 0.00001
    path = write_recording(tmp_path / "r.gz", [snapshot(100, bids, asks, T0),
                                               depth(101, 101, huge, [], T0 + MS)])
    with pytest.raises(UserError, match=r"r.gz:2: size 50000.00001 is 5,000,000,001 units "
                                        r"of 0.00001, more than the store holds"):
        build(tmp_path, [path])


@pytest.mark.parametrize("line, message", [
    (b"notatime {}", r"bad.gz:2: expected '<receive time in UNIX ns> <JSON>'"),
    (b"1723161000000000000 {not json", r"bad.gz:2: not a JSON message"),
    (b'1723161000000000000 {"stream":"btcusdt@depth@100ms","data":{"e":"depthUpdate",'
     b'"E":1,"s":"BTCUSDT","U":101,"u":101,"b":[["1.2.3","1"]],"a":[]}}',
     r"bad.gz:2: bad depth level: '1.2.3' is not a decimal number"),
    (b'1723161000000000000 {"stream":"btcusdt@depth@100ms","data":{"e":"depthUpdate",'
     b'"E":1,"s":"BTCUSDT","U":101,"b":[],"a":[]}}', r"bad.gz:2: bad depth message: no field 'u'"),
    (b'1723161000000000000 {"stream":"btcusdt@depth@100ms","data":{"e":"depthUpdate",'
     b'"E":1,"s":"BTCUSDT","U":101,"u":101,"b":[[60000.5,1]],"a":[]}}',
     r"bad.gz:2: bad depth level: .*not a decimal string"),
    (b'1723161000000000000 {"stream":"btcusd_perp@depth@100ms","data":{"e":"depthUpdate",'
     b'"E":1,"s":"BTCUSDT","ps":"BTCUSD","U":101,"u":101,"pu":100,"b":[],"a":[]}}',
     r"bad.gz:2: bad depth message: a COIN-M"),
])
def test_a_bad_line_is_a_one_line_error_naming_file_and_line(tmp_path, line, message):
    bids, asks = book_levels(6_000_000)
    path = tmp_path / "bad.gz"
    write_recording(path, [snapshot(100, bids, asks, T0)], gz=False)
    path.write_bytes(path.read_bytes() + line + b"\n")
    with pytest.raises(UserError, match=message):
        ingest([path], tmp_path / "s", IngestConfig(), fmt="binance")


def test_a_recording_cut_off_mid_write_keeps_the_lines_before_the_cut(tmp_path):
    lines = random_recording(400, seed=5)
    path = write_recording(tmp_path / "r.gz", lines)
    data = path.read_bytes()
    cut = tmp_path / "cut.gz"
    cut.write_bytes(data[: len(data) * 2 // 3])
    store = build(tmp_path, [cut])
    assert store.manifest.skipped["truncated_file"] == 1
    assert 50 < len(store) < 400
