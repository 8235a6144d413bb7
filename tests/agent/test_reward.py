"""The reward pipeline: scale, asymmetric clamp, atom-span EWMA; and that every path that
trains runs all three (the original shipped it orphaned, then half-wired)."""

from __future__ import annotations

import pytest
import torch

from lobsurf.agent.config import RewardConfig
from lobsurf.agent.controllers import ControllerState
from lobsurf.agent.reward import reward_pipeline, scale_and_clamp, update_atom_span
from lobsurf.agent.step import train_step


def test_atom_span_moves_from_unit_toward_minus_three_one_at_the_stated_rate():
    cfg = RewardConfig()  # WIN 1, LOSS 3, rate 0.001, floor 1
    state = ControllerState.bootstrap("cpu")
    assert (float(state.v_min), float(state.v_max)) == (-1.0, 1.0)
    for n in range(1, 2101):
        update_atom_span(state, cfg)
        if n in (1, 100, 2100):
            want = -3.0 + 2.0 * (1 - 0.001) ** n  # closed form of the EWMA from -1 toward -3
            assert float(state.v_min) == pytest.approx(want, rel=1e-9), n
            assert float(state.v_max) == 1.0
    # ~2100 steps: most of the way (1 - e^-2.1 = 88 %) from -1 to -3
    assert -2.8 < float(state.v_min) < -2.7


def test_asymmetric_clamp():
    cfg = RewardConfig()
    state = ControllerState.bootstrap("cpu")
    state.reward_scale.fill_(0.01)
    raw = torch.tensor([-1000.0, -250.0, -50.0, 0.0, 50.0, 99.0, 1000.0], dtype=torch.float64)
    got = scale_and_clamp(raw, state, cfg)
    assert got.tolist() == pytest.approx([-3.0, -2.5, -0.5, 0.0, 0.5, 0.99, 1.0])


def test_scale_follows_the_running_magnitude_of_closed_trades():
    cfg = RewardConfig(scaled_magnitude=0.5, magnitude_ema_rate=0.5)
    state = ControllerState.bootstrap("cpu")
    closed = torch.tensor([True, True, False])
    r = reward_pipeline(torch.tensor([100.0, -300.0, 0.0], dtype=torch.float64), closed, state, cfg)
    assert float(state.pnl_magnitude) == 200.0  # the first observation replaces the bootstrap
    assert float(state.reward_scale) == pytest.approx(0.5 / 200)
    assert r.tolist() == pytest.approx([0.25, -0.75, 0.0])
    # a step with nothing closed leaves the magnitude alone; then the EMA moves halfway
    reward_pipeline(torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.bool), state, cfg)
    assert float(state.pnl_magnitude) == 200.0
    reward_pipeline(torch.tensor([400.0, 0, 0], dtype=torch.float64),
                    torch.tensor([True, False, False]), state, cfg)
    assert float(state.pnl_magnitude) == 300.0


@pytest.mark.parametrize("learning", [False, True], ids=["prefill", "learning"])
def test_every_training_path_runs_the_whole_pipeline(tiny_setup, learning):
    cfg, data, state, scfg = tiny_setup
    ctl = state.controllers
    for _ in range(6):  # prefill first in both cases (the replay needs rows to learn from)
        train_step(state, data.train_book, scfg, learning=False)
    span_before = float(ctl.v_min)
    scale_before = float(ctl.reward_scale)
    # a step of this path: rewards in replay must be clamp(raw * scale) + beta log pi_ref(a),
    # and the span must move
    seen, shaped = [], []
    orig = state.env.step
    gamma = cfg.learner.gamma

    def spy(action, *args, **kwargs):
        before = state.env.state.unrealized_pnl.clone()
        result = orig(action, *args, **kwargs)
        seen.append(result.reward.clone())
        # mark-to-market shaping, written out: gamma * mark(s') (0 at an episode end) - mark(s)
        after = state.env.state.unrealized_pnl * (~result.episode_end) * gamma
        shaped.append(result.reward + after - before)
        return result

    state.env.step = spy
    for _ in range(20):
        ptr = int(state.replay.pointer)
        train_step(state, data.train_book, scfg, learning=learning)
        stored = state.replay.storage.reward[ptr:ptr + cfg.train.envs]
        actions = state.replay.storage.action[ptr:ptr + cfg.train.envs]
        want = (shaped[-1] * ctl.reward_scale).clamp(-cfg.reward.loss, cfg.reward.win).float()
        want = want + ctl.kl_beta.float() * state.tables.log_pi_ref[actions]  # KL reference
        torch.testing.assert_close(stored, want)
    assert float(ctl.v_min) < span_before  # atom span update ran
    assert sum(int((r != 0).sum()) for r in seen) > 0, "no trade closed: pipeline untested"
    assert any(bool(((m - r) != 0).any()) for m, r in zip(shaped, seen)), "no mark moved"
    assert float(ctl.reward_scale) != scale_before or float(ctl.pnl_magnitude) > 0


def test_mark_shaping_telescopes_to_the_realized_pnl_and_leaves_the_magnitude_alone():
    """At gamma 1 a trade's shaped step PnLs add up to its realized net PnL (fees and the
    spread included); the pnl_magnitude controller still reads whole trades only."""
    from lobsurf.agent.reward import mark_shaping
    from lobsurf.sim import SimConfig
    from lobsurf.sim.books import random_walk_book
    from lobsurf.sim.env import BatchedLobEnv

    book = random_walk_book(4000, 1, seed=5)
    env = BatchedLobEnv(book, 8, SimConfig(window=8, fee_per_lot=1.0, max_episode_steps=40))
    env.reset()
    gen = torch.Generator().manual_seed(0)
    realized = torch.zeros(8, dtype=torch.float64)
    shaped = torch.zeros(8, dtype=torch.float64)
    moved = 0
    for _ in range(200):
        before = env.state.unrealized_pnl.clone()
        res = env.step(torch.randint(0, env.cfg.num_actions, (8,), generator=gen))
        term = mark_shaping(before, env.state.unrealized_pnl, res.episode_end, 1.0)
        moved += int((term != 0).sum())
        realized += res.reward
        shaped += res.reward + term
    open_mark = env.state.unrealized_pnl  # trades still open at the end: their mark so far
    torch.testing.assert_close(shaped, realized + open_mark, rtol=0, atol=1e-9)
    assert bool((realized != 0).any()) and moved > 100

    cfg = RewardConfig(magnitude_ema_rate=0.5)
    state = ControllerState.bootstrap("cpu")
    closed = torch.tensor([True, False])
    r = reward_pipeline(torch.tensor([100.0, 0.0], dtype=torch.float64), closed, state, cfg,
                        shaping=torch.tensor([-40.0, 30.0], dtype=torch.float64))
    assert float(state.pnl_magnitude) == 100.0
    assert r.tolist() == pytest.approx([0.5 * 60 / 100, 0.5 * 30 / 100])
