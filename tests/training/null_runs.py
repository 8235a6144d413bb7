"""Simulated validation results of many training runs, for testing the model-choice rule
itself (tests/training/test_choice.py) and measuring its false-edge rate and power
(benchmarks/choice_false_positives.py).

A run validates ``looks`` times. Each look's per-trade PnL has mean ``edge`` (in units of
its sd) and heavy, skewed tails: a standardised lognormal, sign -1 by default (many small
wins and rare large losses, the side on which a test of the mean calls noise an edge too
often; sigma 0.6 gives skew -2.3 and excess kurtosis 9, near the trades of
baseline:random on a tradeable-null store: skew -2.1, excess kurtosis 8.6). Checkpoints of
one run are alike: each look repeats each of the previous look's trades with probability
``keep`` and draws the rest afresh. A look's trades lie in time order in ``pieces`` equal
pieces, as a validation sweep's envs (even pieces choose, odd ones confirm). The edge lies
on every look, or on ``edge_looks`` of them from the third on (a learner that peaks, then
decays).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from lobsurf.training.selection.choice import halves

#: the first look with the edge when only ``Market.edge_looks`` have it
PEAK_START = 2


@dataclass(frozen=True)
class Market:
    """What the simulated runs trade (module doc)."""

    looks: int = 20
    """validations per run."""
    trades: tuple[int, int] = (60, 300)
    """a look's trades on the whole validation slice: uniform in [lo, hi]."""
    pieces: int = 4
    """pieces of a look's sweep (4: 60, 100 and 300 trades split evenly)."""
    keep: float = 0.7
    """probability that a look repeats a trade of the previous look."""
    sigma: float = 0.6
    """lognormal shape: skew and kurtosis of the tails (0: normal trades)."""
    sign: int = -1
    """-1: a long left tail (rare large losses); +1: a long right tail."""
    edge: float = 0.0
    """mean PnL per trade in units of its sd."""
    edge_looks: int | None = None
    """looks with the edge, from the third on (None: every look)."""


def standard_trades(rng: np.random.Generator, n: int, market: Market) -> np.ndarray:
    """[n] draws with mean 0 and sd 1 of the market's trade PnL law (before its edge)."""
    z = rng.standard_normal(n)
    if market.sigma == 0:
        return z
    s2 = market.sigma ** 2
    x = np.exp(market.sigma * z) - np.exp(s2 / 2)
    return market.sign * x / np.sqrt((np.exp(s2) - 1) * np.exp(s2))


def look_metrics(pnl: np.ndarray, pieces: int) -> dict:
    """What the model choice reads of one look: the whole slice's net PnL and trades, and
    the two halves (the trades laid in ``pieces`` equal pieces of time)."""
    piece_steps = -(-len(pnl) // pieces)
    return {"net_pnl": float(pnl.sum()), "trades": len(pnl), "pnl_per_trade_ci": None,
            **halves(pnl, np.arange(len(pnl)), piece_steps)}


def simulate_runs(market: Market, runs: int, seed: int) -> Iterator[list[np.ndarray]]:
    """Each run's looks: a list of ``market.looks`` [n] trade-PnL arrays (module doc)."""
    rng = np.random.default_rng(seed)
    lo, hi, k = *market.trades, market.looks
    on = np.ones(k, bool) if market.edge_looks is None else np.isin(
        np.arange(k), np.arange(PEAK_START, PEAK_START + market.edge_looks))
    for _ in range(runs):
        draws = standard_trades(rng, (k + 1) * hi, market).reshape(k + 1, hi)
        fresh = rng.random((k, hi)) >= market.keep
        counts = rng.integers(lo, hi + 1, k)
        slots, looks = draws[0], []
        for j in range(k):
            slots = np.where(fresh[j], draws[j + 1], slots)
            looks.append(slots[:counts[j]] + (market.edge if on[j] else 0.0))
        yield looks
