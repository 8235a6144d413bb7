"""The top-of-book imbalance baseline: signal and actions by hand, and the threshold fit
(no trading on edge-free data, a profitable threshold on an edge preset)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from lobsurf.baselines.imbalance import (NEVER_TRADES, ImbalancePolicy, contiguous_sample,
                                         fit_imbalance_threshold, order_actions, top_imbalance)
from lobsurf.baselines.policies import BASELINES, BaselineConfig, make_baseline
from lobsurf.data.dataset import load_book_tensors
from lobsurf.data.split import time_split
from lobsurf.data.synth import write_synth_store
from lobsurf.presets import PRESETS
from lobsurf.sim import SimConfig
from lobsurf.sim.books import book_from_arrays, random_walk_book
from lobsurf.sim.env import BatchedLobEnv


def test_signal_and_actions_by_hand() -> None:
    lv = np.arange(10)
    bid_px, ask_px = np.array([[100]] * 3) - lv, np.array([[101]] * 3) + lv
    bid_sz, ask_sz = np.full((3, 10), 5), np.full((3, 10), 5)
    bid_sz[:, 0], ask_sz[:, 0] = [30, 10, 10], [10, 10, 30]  # I = +0.5, 0, -0.5
    book = book_from_arrays(bid_px, ask_px, bid_sz, ask_sz)
    assert top_imbalance(book, torch.arange(3)).tolist() == [0.5, 0.0, -0.5]
    env = BatchedLobEnv(book, 3, SimConfig(window=1, latency_rows=0, order_sizes_lots=(1, 2)))
    policy = ImbalancePolicy(0.4, BaselineConfig(), env)
    env.state.cursor.copy_(torch.tensor([0, 1, 2]))
    assert policy.act(env).tolist() == [1, 0, 3]  # buy 1, hold, sell 1 (actions 1..2 buy)
    env.state.position.copy_(torch.tensor([-1, 1, -1]))
    # from short 1 the buy target +1 needs 2 lots (action 2); in between: keep; already short
    assert policy.act(env).tolist() == [2, 0, 0]


def test_order_table() -> None:
    # sizes 1 and 3; orders -4..4 -> sell 3, sell 3, sell 1, sell 1, hold, buy 1, buy 1, buy 3, buy 3
    assert order_actions((1, 3), 4, torch.device("cpu")).tolist() == [4, 4, 3, 3, 0, 1, 1, 2, 2]


def test_contiguous_sample_keeps_runs() -> None:
    rows = torch.arange(1000)
    sample = contiguous_sample(rows, 100, 4)
    assert len(sample) == 100 and sample[:25].tolist() == list(range(25))
    assert sample[25] == 250 and torch.equal(contiguous_sample(rows[:50], 100, 4), rows[:50])


def test_no_edge_no_trading() -> None:
    book = random_walk_book(4000, 1, seed=2)
    sim = SimConfig(window=16, fee_per_lot=1.0)
    split = time_split(book, 16, 10, 200, 0.8)
    fit = fit_imbalance_threshold(book, split.train_rows, sim, BaselineConfig(imbalance_fit_envs=8))
    assert fit.threshold == NEVER_TRADES and all(pnl <= 0 for _, pnl in fit.candidates)


def test_fit_finds_the_edge_of_the_tradeable_preset(tmp_path) -> None:
    cfg = replace(PRESETS["tradeable"], snapshots_per_day=20_000, days=2)
    book = load_book_tensors(write_synth_store(tmp_path / "s", cfg))
    sim = SimConfig(fee_per_lot=1.0)
    split = time_split(book, sim.window, 10, 200, 0.8)
    base = BaselineConfig(imbalance_fit_rows=10_000, imbalance_fit_envs=16)
    fit = fit_imbalance_threshold(book, split.train_rows, sim, base)
    assert 0 < fit.threshold < 1 and max(pnl for _, pnl in fit.candidates) > 0
    env = BatchedLobEnv(book, 1, sim)
    assert "imbalance" in BASELINES
    policy = make_baseline("imbalance", env, base, split.train_rows)
    assert policy.threshold == fit.threshold
