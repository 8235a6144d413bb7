"""Where fees come from (given > recorded in the store > default bps) and the warning when a
round trip costs more than the typical move."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from lobsurf.data.schema import LEVELS
from lobsurf.sim import BatchedLobEnv, SimConfig
from lobsurf.sim.books import book_from_arrays, random_walk_book
from lobsurf.sim.fees import (
    DEFAULT_FEE_BPS,
    Fees,
    fee_warning,
    holding_rows,
    resolve_fees,
    typical_move,
)
from lobsurf.sim.reference import ReferenceEnv
from lobsurf.sim.reference_passive import PassiveReferenceEnv

NOT_GIVEN = SimConfig(fee_per_lot=None, fee_bps=None)
HOLD, BUY1, SELL1 = 0, 1, 6


def test_given_beats_recorded_beats_default():
    plain = random_walk_book(200, 1)
    recorded = dataclasses.replace(plain, fee_per_lot=2.0, fee_bps=0.5)
    assert resolve_fees(NOT_GIVEN, plain) == Fees(0.0, DEFAULT_FEE_BPS, "default")
    assert resolve_fees(NOT_GIVEN, recorded) == Fees(2.0, 0.5, "store")
    # either field given gives the fee (the other is 0), whatever the store recorded
    assert resolve_fees(SimConfig(fee_per_lot=0.3, fee_bps=None), recorded) == Fees(
        0.3, 0.0, "config")
    assert resolve_fees(SimConfig(fee_per_lot=None, fee_bps=1.5), recorded) == Fees(
        0.0, 1.5, "config")
    assert resolve_fees(SimConfig(), recorded) == Fees(0.0, 0.0, "config")  # SimConfig: 0
    # the simulator charges what resolves: per lot 2.0 + 0.5 bps at the price origin (0)
    env = BatchedLobEnv(recorded, 1, NOT_GIVEN)
    assert env.fees.source == "store" and env.fee_model.per_lot == 2.0
    assert env.fee_model.per_value_tick == pytest.approx(0.5e-4 * 0.25 * 50)
    reference = ReferenceEnv.from_book(recorded, NOT_GIVEN)  # the same fees, the same way
    assert (reference.fee_per_lot, reference.fee_per_value_tick) == (
        env.fee_model.per_lot, env.fee_model.per_value_tick)


def _flat_book(price_ticks: int, rows: int, tick_size: float, multiplier: float):
    bid = price_ticks - np.arange(LEVELS)[None, :].repeat(rows, 0)
    ask = price_ticks + 1 + np.arange(LEVELS)[None, :].repeat(rows, 0)
    sizes = np.full((rows, LEVELS), 10)
    return book_from_arrays(bid, ask, sizes, sizes, tick_size=tick_size, multiplier=multiplier)


def _round_trip_fees(book, sim: SimConfig) -> float:
    env = BatchedLobEnv(book, 1, dataclasses.replace(sim, window=1, latency_rows=0))
    env.reset()
    for action in (BUY1, SELL1):
        env.step(torch.tensor([action]))
    assert int(env.stats.trades.sum()) == 1
    return float(env.stats.fees.sum())


def test_an_equity_store_gets_the_bps_default_not_one_per_lot():
    """A $300 share (tick 0.01, multiplier 1) with no fee given or recorded pays the default
    bps of notional: about $0.003 a share each way, not the 1.0 per lot of an ES contract."""
    share = _flat_book(30_000, 200, tick_size=0.01, multiplier=1.0)  # bid 300.00, ask 300.01
    fees = resolve_fees(NOT_GIVEN, share)
    assert fees == Fees(0.0, DEFAULT_FEE_BPS, "default")
    want = DEFAULT_FEE_BPS * 1e-4 * (300.00 + 300.01)  # buy at the ask, sell at the bid
    assert _round_trip_fees(share, NOT_GIVEN) == pytest.approx(want)
    assert 0.005 < want < 0.007
    # the same default on an ES-like book (4,500 x 50): 2.25 per lot each way
    es = _flat_book(18_000, 200, tick_size=0.25, multiplier=50.0)
    assert fees.per_lot_at(4500.0, 50.0) == pytest.approx(2.25)
    assert _round_trip_fees(es, NOT_GIVEN) == pytest.approx(
        DEFAULT_FEE_BPS * 1e-4 * 50 * (4500.25 + 4500.0))
    said = fees.describe(share, "given")
    assert said.startswith("fee 0.00 per lot + 0.1 bps of notional (= 0.003 per lot at price "
                           "300.0") and "(the default: none given" in said


def _ramp_book(segment_lengths: list[int], tick_size: float = 0.25, multiplier: float = 50.0):
    # the best bid climbs one tick a row inside each segment; each segment starts 1000 ticks
    # above the last, a jump no horizon may cross
    mids = np.concatenate([1000 * k + np.arange(n) for k, n in enumerate(segment_lengths)])
    bid = 10_000 + mids[:, None] - np.arange(LEVELS)[None, :]
    ask = bid + 1 + 2 * np.arange(LEVELS)[None, :]
    sizes = np.full(bid.shape, 5)
    return book_from_arrays(bid, ask, sizes, sizes, segment_lengths, tick_size, multiplier)


def test_typical_move_is_the_mean_mid_change_inside_segments():
    book = _ramp_book([30, 25])
    tick_value = 0.25 * 50
    assert typical_move(book, 5) == pytest.approx(5 * tick_value)  # jumps never counted
    assert typical_move(book, 24) == pytest.approx(24 * tick_value)
    assert math.isnan(typical_move(book, 30))  # no row has 30 rows ahead in its segment
    assert holding_rows(200, 10) == 200 and holding_rows(8, 10) == 10


def test_the_warning_fires_when_the_round_trip_is_above_the_typical_move():
    book = _ramp_book([40, 40])  # the mid moves 10 ticks = 125 over 10 rows
    move = 10 * 0.25 * 50
    above = fee_warning(Fees(move / 2 + 0.01, 0.0, "store"), book, 10, "--fee-per-lot")
    assert above is not None and "round-trip fee 125.02 is above the typical move 125.00" in above
    assert "over 10 snapshots: no policy may be able to win; check --fee-per-lot" in above
    assert fee_warning(Fees(move / 2 - 0.01, 0.0, "store"), book, 10, "--fee-per-lot") is None
    # bps count too: 1 bps of the mean mid (~2,630) x 50 is 13.15 a side, 26.3 a round
    # trip: above a 2-tick move (25), below a 3-tick one (37.5)
    assert fee_warning(Fees(0.0, 1.0, "default"), book, 2, "x") is not None
    assert fee_warning(Fees(0.0, 1.0, "default"), book, 3, "x") is None
    assert fee_warning(Fees(1e9, 0.0, "store"), book, 40, "x") is None  # nothing to measure


def test_the_maker_fee_resolves_on_its_own_and_defaults_to_the_taker_fee():
    plain = random_walk_book(200, 1)
    recorded = dataclasses.replace(plain, fee_per_lot=2.0, fee_bps=0.5, maker_fee_per_lot=-0.2,
                                   maker_fee_bps=0.0)
    # none recorded or given: resting orders pay the taker fee, whatever it resolved to
    default = resolve_fees(NOT_GIVEN, plain)
    assert default.maker == (0.0, DEFAULT_FEE_BPS) and default.maker_source == "default"
    assert default.record() == {"per_lot": 0.0, "bps": DEFAULT_FEE_BPS, "source": "default"}
    assert resolve_fees(SimConfig(fee_per_lot=3.0), plain).maker == (3.0, 0.0)
    # recorded in the store: the store's, even when the run gives a taker fee
    fees = resolve_fees(SimConfig(fee_per_lot=3.0), recorded)
    assert (fees.per_lot, fees.maker, fees.maker_source) == (3.0, (-0.2, 0.0), "store")
    assert fees.record()["maker_per_lot"] == -0.2
    # given for the run: the run's (one field given: the other is 0)
    given = resolve_fees(SimConfig(maker_fee_bps=-0.1), recorded)
    assert (given.maker, given.maker_source) == ((0.0, -0.1), "config")
    # written into a config, a default maker fee stays unset (it follows the taker fee)
    assert default.applied_to(NOT_GIVEN).maker_fee_per_lot is None
    assert fees.applied_to(NOT_GIVEN).maker_fee_per_lot == -0.2
    # the simulator and the reference charge what resolves
    cfg = SimConfig(passive_orders=True, fee_per_lot=None, fee_bps=None)
    book = dataclasses.replace(random_walk_book(200, 1, trades=True), maker_fee_per_lot=-0.2,
                               maker_fee_bps=0.5)
    env = BatchedLobEnv(book, 1, cfg)
    assert env.maker_fee_model.per_lot == -0.2
    assert env.maker_fee_model.per_value_tick == pytest.approx(0.5e-4 * 0.25 * 50)
    reference = PassiveReferenceEnv.from_book(book, cfg)
    assert (reference.maker_fee_per_lot, reference.maker_fee_per_value_tick) == (
        env.maker_fee_model.per_lot, env.maker_fee_model.per_value_tick)
    said = resolve_fees(cfg, book).describe_maker(book, "given")
    assert said.startswith("maker fee -0.20 per lot + 0.5 bps of notional") and "store" in said
    assert "the taker fee" in default.describe_maker(plain, "given")


def test_the_warning_counts_the_cheaper_passive_round_trip_with_passive_orders():
    book = _ramp_book([40, 40])  # the mid moves 10 ticks = 125 over 10 rows
    fees = Fees(100.0, 0.0, "store", maker_per_lot=-0.5, maker_source="store")
    assert fee_warning(fees, book, 10, "x") is not None  # market orders: 200 > 125
    assert fee_warning(fees, book, 10, "x", passive=True) is None  # a rebate each way
    dear = dataclasses.replace(fees, maker_per_lot=70.0)
    said = fee_warning(dear, book, 10, "x", passive=True)
    assert said is not None and "cheapest round-trip fee" in said and "140.00" in said
