"""``baseline:optimal``: the DP's value equals brute force over every action sequence, and the
replayed plan earns exactly that value in the sweep."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch

from lobsurf.backtest.metrics import compute_metrics
from lobsurf.backtest.sweep import SweepConfig, schedule, sweep, tile_rows
from lobsurf.baselines.optimal import make_optimal, plan_optimal
from lobsurf.baselines.policies import BaselineConfig, make_baselines
from lobsurf.data.dataset import load_book_tensors
from lobsurf.sim.config import SimConfig
from lobsurf.sim.env import BatchedLobEnv
from tests.conftest import TICK_FIXED, random_walk_books, write_store

#: shallow books (1-2 lots a level): a 2-lot order walks two levels, a 3-lot one three
SHALLOW_LOTS = 3
ROWS = 60


def shallow_book(tmp_path, trend: bool, seed: int = 5):
    """A shallow random-walk book; with ``trend`` the mid also rises a tick a row, then
    falls (something to earn long and short even after walking a few levels)."""
    chunk = random_walk_books(ROWS, seed)
    if trend:
        ticks = np.minimum(np.arange(ROWS), ROWS // 4 - np.arange(ROWS) + ROWS // 4)
        move = (ticks * TICK_FIXED)[:, None]
        chunk.bid_px[:] += move
        chunk.ask_px[:] += move
    rng = np.random.default_rng(seed)
    chunk.bid_sz[:] = rng.integers(1, SHALLOW_LOTS, chunk.bid_sz.shape)
    chunk.ask_sz[:] = rng.integers(1, SHALLOW_LOTS, chunk.ask_sz.shape)
    return load_book_tensors(write_store(tmp_path / "store", [chunk]), "cpu")


def brute_force(book, rows: torch.Tensor, sim: SimConfig) -> float:
    """Best net PnL over every action sequence of a one-env sweep, all run as one batch."""
    tiling = tile_rows(book, rows, sim, 1)
    seqs = torch.tensor(list(itertools.product(range(sim.num_actions), repeat=tiling.steps)))
    env = BatchedLobEnv(book, len(seqs), sim)
    env.reset()
    env.reset_stats()
    for t in range(tiling.steps):  # the sweep's own schedule, one env replicated
        _, cursor, stop, force_end = schedule(tiling, book, t)
        env.state.cursor.fill_(int(cursor[0]))
        env.state.stop.fill_(int(stop[0]))
        env.step(seqs[:, t], force_end=force_end.expand(len(seqs)))
    return float(env.stats.net_pnl.max())


@pytest.mark.parametrize("latency,sizes,limit,steps,episode", [
    (1, (1,), 2, 6, 1000),      # 3 actions
    (0, (1,), 1, 6, 1000),      # 3 actions, no latency
    (1, (2,), 3, 5, 1000),      # 2-lot orders walk two shallow levels
    (1, (1, 3), 3, 4, 1000),    # 5 actions; 3 lots walk three levels
    (1, (1,), 2, 6, 3),         # an episode ends (forced close) inside the piece
])
@pytest.mark.parametrize("trend", [False, True])
def test_dp_equals_brute_force_and_the_replay(tmp_path, latency, sizes, limit, steps, episode,
                                              trend):
    book = shallow_book(tmp_path, trend)
    sim = SimConfig(window=2, latency_rows=latency, order_sizes_lots=sizes,
                    position_limit_lots=limit, fee_per_lot=0.5, fee_bps=0.2,
                    max_episode_steps=episode)
    rows = torch.arange(ROWS // 4 - 2, ROWS // 4 - 2 + steps)  # the top of the trend inside
    plan = plan_optimal(BatchedLobEnv(book, 1, sim), rows, 1)
    best = brute_force(book, rows, sim)
    print(f"dp {plan.value!r} brute force {best!r}")
    assert plan.value == pytest.approx(best, rel=1e-12, abs=1e-9)
    assert best > 0 or not trend  # the trend pays for the walk and the fees
    records, _ = sweep(book, rows, {"optimal": make_optimal(BatchedLobEnv(book, 1, sim), rows, 1)},
                       sim, SweepConfig(1))
    assert compute_metrics(records["optimal"])["net_pnl"] == pytest.approx(plan.value, rel=1e-12)


def test_replay_over_pieces_gaps_and_segments_beats_every_baseline(tiny_store):
    book = load_book_tensors(tiny_store, "cpu")
    sim = SimConfig(window=8, max_episode_steps=40, fee_per_lot=1.0)
    # a gap inside segment 0 and both segments: pieces jump, episodes end at the gaps
    rows = torch.cat([torch.arange(100, 400), torch.arange(450, 700), torch.arange(2100, 2500)])
    envs = 7
    env = BatchedLobEnv(book, 1, sim)
    policies = make_baselines(("hold", "random", "momentum", "oracle", "optimal"), env,
                              BaselineConfig(momentum_lookback_rows=4), sweep_rows=rows,
                              sweep_envs=envs)
    records, _ = sweep(book, rows, policies, sim, SweepConfig(envs))
    net = {name: compute_metrics(rec)["net_pnl"] for name, rec in records.items()}
    value = policies["optimal"].value
    assert net["optimal"] == pytest.approx(value, rel=1e-9)
    assert all(net["optimal"] >= v for v in net.values()), net
    assert net["optimal"] > net["oracle"] > 0
    # the replay position never leaves the limit and the record has the positions
    assert np.abs(records["optimal"].step_position).max() <= sim.position_limit_lots
    # a second sweep with the same policy replays the plan again (the counter wraps)
    again, _ = sweep(book, rows, {"optimal": policies["optimal"]}, sim, SweepConfig(envs))
    assert compute_metrics(again["optimal"])["net_pnl"] == net["optimal"]


def test_optimal_needs_a_sweep(tiny_store):
    env = BatchedLobEnv(load_book_tensors(tiny_store, "cpu"), 1, SimConfig(window=8))
    with pytest.raises(ValueError, match="needs a sweep"):
        make_optimal(env, None, None)


def test_eval_command_optimal_and_capture(tiny_store, capsys):
    from lobsurf.cli import main

    args = ["eval", "baseline:hold", "baseline:oracle", "baseline:optimal", "--store",
            str(tiny_store.path), "--window", "8", "--horizons", "2,4,8", "--envs", "8",
            "--json", "--no-progress"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)["policies"]
    assert out["optimal"]["capture"] == 1.0 and out["hold"]["capture"] == 0.0
    assert 0 < out["oracle"]["capture"] < 1
    # random cursors have no sweep to plan over: optimal is left out, with a warning
    assert main([*args[:-2], "--split", "random", "--steps", "20", "--json", "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "left out of --split random" in captured.err
    assert set(json.loads(captured.out)["policies"]) == {"hold", "oracle"}
