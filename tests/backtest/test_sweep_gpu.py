"""GPU-only: the sweep's steps make no host sync, and CUDA gives the CPU's numbers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lobsurf.backtest.sweep import SweepConfig, sweep, tile_rows
from lobsurf.baselines.policies import BaselineConfig, make_baselines
from lobsurf.sim import SimConfig
from lobsurf.sim.books import random_walk_book
from lobsurf.sim.env import BatchedLobEnv

pytestmark = pytest.mark.gpu

SIM = SimConfig(window=17, fee_per_lot=1.0, max_episode_steps=100)
NAMES = ("hold", "momentum", "imbalance", "oracle")  # random: its generator is per device


def run(device: str, check_sync: bool) -> dict:
    book = random_walk_book(5000, 2, seed=4, device=device)
    rows = torch.cat([torch.arange(100, 2400), torch.arange(2600, 5000)]).to(device)
    env = BatchedLobEnv(book, 1, SIM)
    policies = make_baselines(NAMES, env, BaselineConfig(imbalance_threshold=0.3))
    steps = tile_rows(book, rows, SIM, 32).steps
    calls = []

    def progress(n: int) -> None:
        # after the first step (lazy init) every step runs with syncs as errors; the
        # final read-back after the last step is allowed
        calls.append(n)
        if check_sync:
            torch.cuda.set_sync_debug_mode("error" if len(calls) < steps else "default")

    try:
        records, _ = sweep(book, rows, policies, SIM, SweepConfig(num_envs=32), progress)
    finally:
        if check_sync:
            torch.cuda.set_sync_debug_mode("default")
    return records


def test_sweep_steps_make_no_host_sync_and_match_cpu() -> None:
    gpu, cpu = run("cuda", check_sync=True), run("cpu", check_sync=False)
    for name in NAMES:
        assert np.array_equal(gpu[name].trade_holding_steps, cpu[name].trade_holding_steps), name
        np.testing.assert_allclose(gpu[name].trade_pnl, cpu[name].trade_pnl, rtol=0, atol=1e-9)
        np.testing.assert_allclose(gpu[name].step_pnl, cpu[name].step_pnl, rtol=0, atol=1e-9)
    assert len(cpu["oracle"].trade_pnl) > 0 and len(cpu["imbalance"].trade_pnl) > 0
