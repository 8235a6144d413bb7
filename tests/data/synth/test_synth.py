"""The synthetic market: DBN round trip, determinism, sessions, validity, statistics, edge."""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

import numpy as np
import pytest

from lobsurf.commands import synth as synth_command
from lobsurf.data.schema import F_LAST, FIXED_PRICE_SCALE, LEVELS, SnapshotChunk
from lobsurf.data.synth import (
    SynthConfig,
    generate_day,
    generate_day_with_trades,
    mid_ticks,
    session_date,
    session_open_ns,
    top_imbalance,
    write_synth,
    write_synth_store,
)
from lobsurf.data.trades import TradeChunk
from lobsurf.errors import UserError
from tests.data.readers.test_dbn_encode import assert_records_equal_books, decode_file

HOUR_NS = 3600 * 10**9


def day_books(cfg: SynthConfig, day: int = 0) -> SnapshotChunk:
    return SnapshotChunk.concat(list(generate_day(cfg, day)))


def book_and_trade_records(records: list) -> tuple[list, list, np.ndarray]:
    """(book records, trade records, [M] row of each trade record: the book records before it)."""
    is_trade = np.array([r.action == "T" for r in records], bool)
    rows = np.cumsum(~is_trade)[is_trade]
    return ([r for r, t in zip(records, is_trade) if not t],
            [r for r, t in zip(records, is_trade) if t], rows)


def day_trades(cfg: SynthConfig, day: int = 0) -> TradeChunk:
    """The day's trades with ``row`` = the day's row."""
    parts, offset = [], 0
    for chunk, trades in generate_day_with_trades(cfg, day):
        parts.append(trades.with_rows(trades.row + offset))
        offset += len(chunk)
    return TradeChunk.concat(parts)


def test_dbn_files_decode_to_the_generated_books(tmp_path: Path) -> None:
    cfg = SynthConfig(snapshots_per_day=2500, days=2, seed=5, edge=0.3, chunk_rows=1000)
    paths = write_synth(tmp_path, cfg)
    assert [p.name for p in paths] == ["SYN-20240102.mbp-10.dbn.zst", "SYN-20240103.mbp-10.dbn.zst"]
    for day, path in enumerate(paths):
        books = day_books(cfg, day)
        metadata, records = decode_file(path)
        book_records, trade_records, trade_rows = book_and_trade_records(records)
        assert_records_equal_books(book_records, books)
        assert metadata.dataset == cfg.dataset and metadata.symbols == [cfg.symbol]
        assert metadata.start == session_open_ns(cfg, day) < records[0].ts_recv
        assert metadata.end == records[-1].ts_recv + 1
        assert [r.sequence for r in records] == list(range(1, len(records) + 1))
        # Trade records: the generated trades, each just before its row's book record, in
        # the same packet (no F_LAST), carrying the book before it.
        expected = day_trades(cfg, day)
        np.testing.assert_array_equal(trade_rows, expected.row)
        np.testing.assert_array_equal([r.price for r in trade_records], expected.price)
        np.testing.assert_array_equal([r.size for r in trade_records], expected.size)
        sides = np.array([{"B": 1, "A": -1}[r.side] for r in trade_records])
        np.testing.assert_array_equal(sides, expected.side)
        assert all(r.flags == 0 for r in trade_records)
        assert all(r.flags == F_LAST for r in book_records)
        later = trade_rows > 0
        assert_records_equal_books([r for r, k in zip(trade_records, later) if k],
                                   books.take(trade_rows[later] - 1), timestamps=False)
        # Book events agree with the books: a removed level ('C') is a best price of the
        # previous snapshot, every other event sits on one of the snapshot's prices.
        actions = np.array([r.action for r in book_records])
        prices = np.array([r.price for r in book_records])
        assert set(actions) <= {"A", "C", "M"}
        previous = np.concatenate([books.bid_px[:1], books.bid_px[:-1]]), \
            np.concatenate([books.ask_px[:1], books.ask_px[:-1]])
        on_book = (prices[:, None] == books.bid_px) | (prices[:, None] == books.ask_px)
        was_best = (prices == previous[0][:, 0]) | (prices == previous[1][:, 0])
        assert (on_book.any(axis=1) | ((actions == "C") & was_best)).all()


def test_deterministic_by_seed_and_day() -> None:
    cfg = SynthConfig(snapshots_per_day=3000, days=2, seed=11, chunk_rows=1024)
    first, again = day_books(cfg, 0), day_books(cfg, 0)
    for name in ("ts_recv_ns", "bid_px", "ask_sz", "bid_ct"):
        np.testing.assert_array_equal(getattr(first, name), getattr(again, name))
    other_seed = day_books(SynthConfig(snapshots_per_day=3000, seed=12, chunk_rows=1024), 0)
    other_day = day_books(cfg, 1)
    assert not np.array_equal(first.bid_sz, other_seed.bid_sz)
    assert not np.array_equal(first.bid_sz, other_day.bid_sz)
    assert all(len(c) <= 1024 for c in generate_day(cfg, 0))  # bounded chunks


def test_chunk_size_does_not_change_the_data() -> None:
    # Every process has its own random stream, so chunking only changes memory use.
    small = day_books(SynthConfig(snapshots_per_day=5000, seed=4, edge=0.5, chunk_rows=333))
    large = day_books(SynthConfig(snapshots_per_day=5000, seed=4, edge=0.5, chunk_rows=5000))
    for name in ("ts_event_ns", "ts_recv_ns", "bid_px", "ask_px", "bid_sz", "ask_sz", "bid_ct",
                 "ask_ct"):
        np.testing.assert_array_equal(getattr(small, name), getattr(large, name), err_msg=name)


def test_books_are_valid() -> None:
    cfg = SynthConfig(snapshots_per_day=30_000, seed=3, edge=1.0, chunk_rows=7000)
    books = day_books(cfg)
    tick = cfg.tick_size_fixed
    levels = np.arange(LEVELS)
    assert (books.bid_px[:, 0] < books.ask_px[:, 0]).all()
    # Dense 10-level ladders on the tick grid.
    np.testing.assert_array_equal(books.bid_px, books.bid_px[:, :1] - levels * tick)
    np.testing.assert_array_equal(books.ask_px, books.ask_px[:, :1] + levels * tick)
    assert (books.bid_px % tick == 0).all() and (books.bid_px[:, -1] > 0).all()
    for side in ("bid", "ask"):
        size, count = getattr(books, f"{side}_sz"), getattr(books, f"{side}_ct")
        assert (size >= 1).all() and (count >= 1).all() and (count <= size).all()
    assert (np.diff(books.ts_event_ns) > 0).all() and (np.diff(books.ts_recv_ns) > 0).all()
    assert (books.ts_recv_ns >= books.ts_event_ns + cfg.recv_latency_min_ns).all()
    assert (books.instrument_id == cfg.instrument_id).all()


def test_price_moves_follow_the_documented_rules() -> None:
    # docs/synth.md: a one-tick spread change moves one side by a tick, a two-tick change
    # both sides outwards or inwards, otherwise the book shifts by at most one tick.
    cfg = SynthConfig(snapshots_per_day=30_000, seed=8, edge=0.5)
    books = day_books(cfg)
    bid = np.diff(books.bid_px[:, 0]) // cfg.tick_size_fixed
    ask = np.diff(books.ask_px[:, 0]) // cfg.tick_size_fixed
    spread = ask - bid
    one = np.abs(spread) == 1
    assert ((np.abs(bid) + np.abs(ask))[one] == 1).all()
    two = np.abs(spread) == 2
    assert two.any() and (ask[two] == -bid[two]).all() and (np.abs(bid[two]) == 1).all()
    same = spread == 0
    assert (np.abs(bid[same]) <= 1).all() and (bid[same] != 0).any()
    assert (one | two | same).all()


def test_days_are_separate_sessions_on_weekdays(tmp_path: Path) -> None:
    cfg = SynthConfig(snapshots_per_day=2000, days=3, seed=2, first_day="2024-01-05")
    store = write_synth_store(tmp_path / "store", cfg)
    segments = store.manifest.segments
    assert [len(s) for s in segments] == [2000] * 3
    dates = [dt.datetime.fromtimestamp(s.ts_start_ns / 1e9, dt.UTC).date() for s in segments]
    assert dates == [dt.date(2024, 1, 5), dt.date(2024, 1, 8), dt.date(2024, 1, 9)]  # Fri, Mon, Tue
    for day, segment in enumerate(segments):
        assert segment.ts_start_ns > session_open_ns(cfg, day)
        # The session lasts about its nominal duration (the mean gap is scaled to it).
        length_h = (segment.ts_end_ns - segment.ts_start_ns) / HOUR_NS
        assert 3.0 < length_h < 10.0
    assert segments[1].ts_start_ns - segments[0].ts_end_ns > 48 * HOUR_NS  # the weekend
    assert segments[2].ts_start_ns - segments[1].ts_end_ns > 12 * HOUR_NS  # overnight
    (instrument,) = store.manifest.instruments
    assert instrument.tick_size_fixed == cfg.tick_size_fixed and instrument.multiplier == 50.0
    np.testing.assert_array_equal(store.rows(2000, 4000).bid_px, day_books(cfg, 1).bid_px)


@pytest.fixture(scope="module")
def edge_pair() -> dict[float, SnapshotChunk]:
    """One session at edge 0 and at edge 0.5 (same seed, so only move directions differ)."""
    return {edge: day_books(SynthConfig(snapshots_per_day=100_000, seed=7, edge=edge))
            for edge in (0.0, 0.5)}


def _excess_kurtosis(x: np.ndarray) -> float:
    d = x.astype(np.float64) - x.mean()
    return float((d**4).mean() / (d**2).mean() ** 2 - 3)


@pytest.mark.parametrize("snapshots", [1, 2, 5, 40])
def test_few_snapshots_a_day_stay_on_the_session_date(snapshots: int) -> None:
    # Few events mean long random gaps: their sum used to run past midnight (21 of 30 seeds
    # at 5 a day), putting a day's data on the next date.
    for seed in range(12):
        cfg = SynthConfig(snapshots_per_day=snapshots, days=1, seed=seed, chunk_rows=3)
        books = day_books(cfg)
        times = np.concatenate([books.ts_event_ns, books.ts_recv_ns])
        dates = {dt.datetime.fromtimestamp(int(t) // 10**9, tz=dt.UTC).date() for t in times}
        assert dates == {session_date(cfg, 0)}, (seed, dates)
        assert (np.diff(books.ts_recv_ns) > 0).all() and (np.diff(books.ts_event_ns) > 0).all()
        assert (books.ts_recv_ns >= books.ts_event_ns).all()
        assert books.ts_event_ns[0] > session_open_ns(cfg, 0)


def test_realistic_statistics(edge_pair: dict[float, SnapshotChunk]) -> None:
    books = edge_pair[0.0]
    tick = SynthConfig().tick_size_fixed
    spread = (books.ask_px[:, 0] - books.bid_px[:, 0]) // tick
    share = {s: float((spread == s).mean()) for s in (1, 2, 3)}
    print("spread shares", share)
    assert share[1] > 0.5 and share[2] > 0.01 and share[3] > 0.005
    assert sum(share.values()) == pytest.approx(1.0)
    # Heavy tails: deep sizes are lognormal, the top depth too (excess kurtosis of a normal is 0).
    deep = _excess_kurtosis(books.bid_sz[:, 4])
    top = _excess_kurtosis(books.bid_sz[:, 0] + books.ask_sz[:, 0])
    print(f"excess kurtosis deep {deep:.1f} top {top:.1f}")
    assert deep > 5 and top > 3
    # Over-dispersed clustered arrivals: gap CV > 1 (1 for Poisson), counts per second with
    # variance far above their mean (Fano factor 1 for Poisson).
    gaps = np.diff(books.ts_event_ns).astype(np.float64)
    counts = np.bincount((books.ts_event_ns - books.ts_event_ns[0]) // 10**9)
    cv, fano = gaps.std() / gaps.mean(), counts.var() / counts.mean()
    print(f"gap CV {cv:.2f}, Fano factor {fano:.1f}")
    assert cv > 1.3 and fano > 3


def test_imbalance_mean_reverts(edge_pair: dict[float, SnapshotChunk]) -> None:
    imbalance = top_imbalance(edge_pair[0.0])
    acf = {lag: float(np.corrcoef(imbalance[:-lag], imbalance[lag:])[0, 1]) for lag in (1, 20, 300)}
    print("imbalance autocorrelation", acf)
    assert 0.8 < acf[1] < 0.995  # persistent ...
    assert acf[20] < acf[1] - 0.2  # ... but decaying ...
    assert abs(acf[300]) < 0.1  # ... to nothing: mean-reverting, not a random walk
    assert abs(imbalance.mean()) < 0.1 and imbalance.std() > 0.3


@pytest.mark.parametrize("edge", [0.0, 0.5])
def test_predictable_component(edge_pair: dict[float, SnapshotChunk], edge: float) -> None:
    books = edge_pair[edge]
    imbalance = top_imbalance(books)
    mid = mid_ticks(books, SynthConfig().tick_size_fixed)
    step = np.diff(mid)
    moved = step != 0
    # The documented law: P(up | move) = 0.5 + 0.5 * edge * I_before, so the least-squares
    # slope of the up indicator on I_before is 0.5 * edge.
    slope = np.polyfit(imbalance[:-1][moved], (step[moved] > 0).astype(np.float64), 1)[0]
    horizon = 10
    corr = float(np.corrcoef(imbalance[:-horizon], mid[horizon:] - mid[:-horizon])[0, 1])
    print(f"edge {edge}: {moved.sum()} moves, slope {slope:.3f}, "
          f"corr(I, {horizon}-step return) {corr:.3f}")
    assert moved.sum() > 2000
    assert abs(slope - 0.5 * edge) < 0.06
    if edge == 0.0:
        assert abs(corr) < 0.04
    else:
        assert corr > 0.1


def test_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="edge"):
        SynthConfig(edge=1.5)
    with pytest.raises(ValueError, match="start_price"):
        SynthConfig(start_price_fixed=4500 * FIXED_PRICE_SCALE + 1)
    with pytest.raises(ValueError, match="imbalance_phi"):
        SynthConfig(imbalance_phi=1.0)


def _command_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    synth_command.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_command_writes_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _command_args("--out", str(tmp_path / "out"), "--snapshots", "400", "--days", "2",
                         "--seed", "9", "--edge", "0.2")
    assert synth_command.run(args) == 0
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    # the day files and the generator's record beside them (lobsurf.data.store.generator)
    assert names == ["SYN-20240102.mbp-10.dbn.zst", "SYN-20240103.mbp-10.dbn.zst",
                     "lobsurf-synth.json"]
    assert "800 snapshots" in capsys.readouterr().out
    _, records = decode_file(tmp_path / "out" / names[1])
    expected = day_books(SynthConfig(snapshots_per_day=400, days=2, seed=9, edge=0.2), 1)
    assert_records_equal_books(book_and_trade_records(records)[0], expected)


@pytest.mark.parametrize("argv", [["--edge", "1.5"], ["--snapshots", "0"], ["--seed", "-1"]])
def test_command_rejects_bad_input(tmp_path: Path, argv: list[str]) -> None:
    with pytest.raises(UserError):
        synth_command.run(_command_args("--out", str(tmp_path), *argv))
