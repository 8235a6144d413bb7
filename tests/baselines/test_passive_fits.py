"""The fits of market_maker and passive_imbalance: they read training rows only (changing
the held-out rows changes nothing), choose the candidate with the best training net PnL,
and stay out where none makes money."""

from __future__ import annotations

import dataclasses
import math

import pytest

from lobsurf.baselines.fitting import training_net_pnl
from lobsurf.baselines.market_maker import (NEVER_QUOTES, MarketMakerParams, MarketMakerPolicy,
                                            fit_market_maker, market_maker_grid)
from lobsurf.baselines.passive_imbalance import fit_passive_imbalance
from lobsurf.baselines.policies import BaselineConfig, make_baseline
from lobsurf.eval.evaluate import eval_split
from lobsurf.sim import BatchedLobEnv, SimConfig
from tests.sim.passive_books import queue_market

CFG = BaselineConfig(market_maker_inventory_limits=(1, 2), market_maker_pull_quantiles=(0.5,),
                     market_maker_stops_ticks=(math.inf,), imbalance_quantiles=(0.5, 0.9),
                     imbalance_fit_envs=8)


def sim(maker_fee: float) -> SimConfig:
    return SimConfig(window=1, stride=4, latency_rows=1, order_sizes_lots=(1, 2),
                     position_limit_lots=4, passive_orders=True, fee_per_lot=1.0, fee_bps=0.0,
                     maker_fee_per_lot=maker_fee, maker_fee_bps=0.0)


@pytest.fixture(scope="module")
def market():
    """A market of persistent levels and prints in 3 sessions; the last one is held out."""
    book = queue_market(900, 7, segments=3)
    return book, eval_split(book, 1, "heldout", (10, 30), 0.6)


def planted(book, cut: int):
    """``book`` with every row from ``cut`` on changed: bid sizes tripled (the imbalance
    moves), prints doubled."""
    changed = {}
    for name, factor in (("bid_sz", 3), ("sell_trade_sz", 2), ("buy_trade_sz", 2)):
        column = getattr(book, name).clone()
        column[cut:] *= factor
        changed[name] = column
    return dataclasses.replace(book, **changed)


def test_the_fits_read_training_rows_only(market) -> None:
    book, split = market
    other = planted(book, split.info["cut_row"])
    s = sim(-2.0)
    # the change matters where it is read: the held-out rows trade differently
    policy = MarketMakerPolicy(MarketMakerParams(2, 1.0, math.inf), CFG, BatchedLobEnv(book, 1, s))
    assert training_net_pnl(book, split.rows, [policy], s, 8) != training_net_pnl(
        other, split.rows, [policy], s, 8)
    # through the baselines' entry point, as the evaluation builds them
    mm, mm_other = (make_baseline("market_maker", BatchedLobEnv(b, 1, s), CFG, split.train_rows)
                    for b in (book, other))
    assert mm.fit.candidates == mm_other.fit.candidates and mm.params == mm_other.params
    pi, pi_other = (fit_passive_imbalance(b, split.train_rows, s, CFG) for b in (book, other))
    assert pi.candidates == pi_other.candidates and pi.threshold == pi_other.threshold
    assert len({pnl for _, pnl in mm.fit.candidates}) > 1  # the fit has something to see


@pytest.mark.slow
def test_the_best_candidate_wins_and_none_that_loses(market) -> None:
    book, split = market
    rebate = fit_market_maker(book, split.train_rows, sim(-5.0), CFG)
    assert len(rebate.candidates) == len(market_maker_grid(book, split.train_rows, CFG)) == 4
    best, best_pnl = max(rebate.candidates, key=lambda c: c[1])
    assert best_pnl > 0 and rebate.params == best
    assert len({pnl for _, pnl in rebate.candidates}) == 4  # the choice is a real one
    costly = fit_market_maker(book, split.train_rows, sim(20.0), CFG)
    assert max(pnl for _, pnl in costly.candidates) < 0 and costly.params == NEVER_QUOTES
    env = BatchedLobEnv(book, 1, sim(20.0))
    policy = make_baseline("market_maker", env, CFG, split.train_rows)
    assert policy.params == NEVER_QUOTES and policy.fitted["best_training_net_pnl"] < 0
    assert policy.fitted["stop_ticks"] is None  # JSON has no infinity
    pi = fit_passive_imbalance(book, split.train_rows, sim(20.0), CFG)
    assert max(pnl for _, pnl in pi.candidates) < 0 and pi.threshold == 1.0


def test_a_given_threshold_skips_the_fit(market) -> None:
    book, _ = market
    env = BatchedLobEnv(book, 1, sim(0.0))
    fixed = make_baseline("passive_imbalance", env,
                          dataclasses.replace(CFG, passive_imbalance_threshold=0.3), None)
    assert fixed.threshold == 0.3
    with pytest.raises(ValueError, match="needs training rows"):
        make_baseline("passive_imbalance", env, CFG, None)
    with pytest.raises(ValueError, match="needs training rows"):
        make_baseline("market_maker", env, CFG, None)
    with pytest.raises(ValueError, match="stops must be > 0"):
        BaselineConfig(market_maker_stops_ticks=(0.0,))
