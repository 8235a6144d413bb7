"""GPU-only: ``baseline:bayes`` plans on the book's device, its steps make no host sync, and
CUDA trades exactly as the CPU."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from lobsurf.baselines.bayes import make_bayes
from lobsurf.data.dataset import load_book_tensors
from lobsurf.data.synth import write_synth_store
from lobsurf.eval.evaluate import eval_split
from lobsurf.backtest.sweep import SweepConfig, sweep, tile_rows
from lobsurf.presets import TRADEABLE
from lobsurf.sim.config import SimConfig
from lobsurf.sim.env import BatchedLobEnv

pytestmark = pytest.mark.gpu

SIM = SimConfig(stride=10, fee_per_lot=1.0, fee_bps=0.0)


def run(store, device: str, check_sync: bool):
    book = load_book_tensors(store, device)
    rows = eval_split(book, SIM.window, "all").rows
    policy = make_bayes(BatchedLobEnv(book, 1, SIM), rows, 16, 41, 100_000)
    steps = tile_rows(book, rows, SIM, 16).steps
    calls = []

    def progress(n: int) -> None:
        calls.append(n)
        if check_sync:
            torch.cuda.set_sync_debug_mode("error" if len(calls) < steps else "default")

    try:
        records, _ = sweep(book, rows, {"bayes": policy}, SIM, SweepConfig(16), progress)
    finally:
        if check_sync:
            torch.cuda.set_sync_debug_mode("default")
    return records["bayes"]


def test_bayes_on_cuda_makes_no_sync_and_matches_cpu(tmp_path) -> None:
    store = write_synth_store(tmp_path / "s", replace(TRADEABLE, snapshots_per_day=5000))
    gpu, cpu = run(store, "cuda", check_sync=True), run(store, "cpu", check_sync=False)
    assert len(cpu.trade_pnl) > 0
    assert np.array_equal(gpu.step_action, cpu.step_action)
    np.testing.assert_allclose(gpu.step_pnl, cpu.step_pnl, rtol=0, atol=1e-9)
