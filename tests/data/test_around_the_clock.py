"""A 24/7 store that crosses midnight: nothing assumes a trading day.

Segments come from gaps only (a recording split at midnight is one series), labels reach
across midnight, the held-out cut is not moved to a gap, walk-forward folds are equal
blocks of rows, the daily Sharpe ratio counts 365 days a year, order sizes can be given in
the base asset, and the fee warning speaks per base unit.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from lobsurf.backtest.metrics import BacktestRecord, compute_metrics
from lobsurf.data.dataset import load_book_tensors
from lobsurf.data.folds import fold_block, max_folds
from lobsurf.data.labels import LabelConfig, compute_labels
from lobsurf.data.split import choose_cut, time_split
from lobsurf.data.store import Instrument, Store, StoreWriter
from lobsurf.errors import UserError
from lobsurf.sim.config import SimConfig
from lobsurf.sim.fees import Fees, fee_warning
from lobsurf.sim.lots import resolve_lot_size, units_per_lot
from tests.conftest import TICK_FIXED, random_walk_books

MIDNIGHT_NS = 1_723_161_600 * 10**9  # 2024-08-09 00:00 UTC


def crypto_store(path, hours: str, size_unit: float = 0.00001) -> Store:
    """Rows from 23:59:52 to past midnight (about 2.5 ms apart) with one short gap (a
    reconnection) early on: segments of 300 and 2,700 rows."""
    first = random_walk_books(300, 1, start_ns=MIDNIGHT_NS - 8 * 10**9)
    second = random_walk_books(2700, 2, start_ns=int(first.ts_recv_ns[-1]) + 3 * 10**9)
    with StoreWriter(path, gap_threshold_ns=10**9) as writer:
        writer.add_instrument(Instrument(1, "binance:BTCUSDT", TICK_FIXED, multiplier=size_unit,
                                         size_unit=size_unit, market_hours=hours, fee_bps=5.0,
                                         fee_per_lot=0.0))
        writer.begin_source("recording")
        writer.append(first)
        writer.append(second)
        writer.close()
    return Store.open(path)


@pytest.fixture
def book_24_7(tmp_path):
    return load_book_tensors(crypto_store(tmp_path / "s", "24/7"), "cpu")


@pytest.fixture
def book_sessions(tmp_path):
    return load_book_tensors(crypto_store(tmp_path / "t", "sessions"), "cpu")


def test_the_store_crosses_midnight_in_one_segment_after_the_gap(book_24_7):
    assert book_24_7.num_segments == 2 and book_24_7.market_hours == "24/7"
    days = (book_24_7.ts_ns[300:] // (86_400 * 10**9)).unique()
    assert len(days) == 2  # the second segment spans midnight
    assert book_24_7.size_unit == 0.00001


def test_labels_reach_across_midnight_inside_a_segment(book_24_7):
    labels = compute_labels(book_24_7, LabelConfig(horizons_snapshots=(10,)))
    crossing = (book_24_7.ts_ns < MIDNIGHT_NS) & (torch.roll(book_24_7.ts_ns, -10) >= MIDNIGHT_NS)
    rows = torch.nonzero(crossing).flatten()
    rows = rows[rows >= 300]
    assert len(rows) and bool(labels.bucket_valid[rows, 0].all())


def test_the_held_out_cut_is_not_moved_to_a_gap_in_a_24_7_market(book_24_7, book_sessions):
    # target 0.8 x 3,000 = row 2,400; the only segment start is row 300 (the gap)
    assert choose_cut(book_sessions, 0.8, at_segment=True) == 300
    assert choose_cut(book_24_7, 0.8, at_segment=True) == 2400
    split = time_split(book_24_7, 16, 10, 50, 0.8)
    assert int(split.train_rows.max()) + 50 < 2400 <= int(split.test_rows.min()) - 15


def test_walk_forward_blocks_are_equal_row_runs_for_24_7_and_segments_otherwise(
        book_24_7, book_sessions):
    assert max_folds(book_24_7) is None and max_folds(book_sessions) == 1
    assert [fold_block(book_24_7, k, 3) for k in range(4)] == [
        (0, 750), (750, 1500), (1500, 2250), (2250, 3000)]
    assert fold_block(book_sessions, 1, 1) == (300, 3000)
    with pytest.raises(UserError, match="at most 1 fold"):
        fold_block(book_sessions, 1, 3)


def test_walk_forward_fold_data_trains_before_its_block_and_trades_inside_it(book_24_7):
    from lobsurf.training.config import resolve_run_config
    from lobsurf.eval.walk_forward import fold_data

    cfg = resolve_run_config(None, ["sim.window=16", "labels.horizons_snapshots=[10, 50]"])
    data = fold_data(cfg, book_24_7, "store", 2, folds=3)
    test = data.split.test_rows
    assert int(test.min()) == 1500 + 15 and int(test.max()) < 2250
    assert int(data.split.train_rows.max()) + 50 < 1500 == data.train_stop + 50


def test_the_daily_sharpe_ratio_counts_365_days_for_24_7():
    rng = np.random.default_rng(0)
    rec = BacktestRecord(trade_pnl=rng.normal(size=20), trade_holding_steps=np.ones(20, int),
                         step_pnl=rng.normal(size=40), step_day=np.repeat(np.arange(8), 5),
                         step_hold=np.zeros(40, bool), gross_pnl=0.0, fees=0.0,
                         turnover_lots=0, unfilled_lots=0)
    sessions = compute_metrics(rec)["sharpe_per_day"]
    all_days = compute_metrics(replace(rec, around_the_clock=True))["sharpe_per_day"]
    assert all_days == pytest.approx(sessions * math.sqrt(365 / 252))


def test_a_sweep_on_a_24_7_book_records_it(book_24_7):
    from lobsurf.baselines.policies import BaselineConfig, make_baselines
    from lobsurf.backtest.sweep import sweep
    from lobsurf.sim.env import BatchedLobEnv

    sim = SimConfig(window=16, stride=10)
    rows = torch.arange(400, 900)
    env = BatchedLobEnv(book_24_7, 1, sim)
    policies = make_baselines(["hold"], env, BaselineConfig(), rows, rows, 4)
    records, _ = sweep(book_24_7, rows, policies, sim)
    assert records["hold"].around_the_clock


def test_order_sizes_in_the_base_asset_become_exact_size_units(book_24_7):
    assert units_per_lot(0.001, 0.00001) == 100 and units_per_lot(0.1, 0.1) == 1
    sim, note = resolve_lot_size(SimConfig(lot_size_base=0.001), book_24_7)
    assert sim.order_sizes_lots == (100, 200, 300, 400, 500)
    assert sim.position_limit_lots == 1000 and sim.lot_size_base is None
    assert "= 100 size units" in note
    assert resolve_lot_size(sim, book_24_7) == (sim, None)  # resolved once, recorded
    with pytest.raises(UserError, match="not a whole number of the store's size unit"):
        resolve_lot_size(SimConfig(lot_size_base=0.000015), book_24_7)


def test_the_fee_warning_compares_per_base_unit(book_24_7):
    warning = fee_warning(Fees(0.0, 5.0, "store"), book_24_7, 50, "the fee")
    assert warning is not None and "per 1 unit of the base asset" in warning
    # the same book in whole lots: the comparison does not depend on the unit
    lots = replace(book_24_7, size_unit=1.0, multiplier=1.0)
    assert (fee_warning(Fees(0.0, 5.0, "store"), lots, 50, "the fee") is None) == (
        warning is None)


def test_an_episode_runs_through_midnight_and_ends_only_at_its_limit(book_24_7):
    from lobsurf.sim.env import BatchedLobEnv

    env = BatchedLobEnv(book_24_7, 1, SimConfig(window=16, stride=10, max_episode_steps=100))
    env.reset()
    before = int(torch.nonzero(book_24_7.ts_ns < MIDNIGHT_NS).max()) - 200  # in segment 2
    env.state.cursor.fill_(before)
    env.state.stop.fill_(int(book_24_7.segment_stop[1]))
    env.state.episode_steps.zero_()
    ends = [bool(env.step(torch.ones(1, dtype=torch.int64)).episode_end) for _ in range(100)]
    assert not any(ends[:99]) and ends[99]  # midnight (20 steps in) ended nothing
