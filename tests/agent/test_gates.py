"""The confidence and FRD gates: against a per-env loop reference, across the warm-up
boundary in the real step, exploration slots, the symmetric threshold, and post-gate
entropy."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lobsurf.agent.config import GateConfig
from lobsurf.agent.controllers import ControllerState, action_histogram_update
from lobsurf.agent.gates import (apply_gates, exploration_slots, move_probabilities,
                                 profit_confidence, update_gate_threshold)
from lobsurf.agent.step import train_step
from tests.agent.conftest import tiny_config
from lobsurf.training.data import load_training_data
from lobsurf.training.run.state import build_state, step_config


def gate_reference(proposed, conf, p_up, p_down, lots, threshold, active, slots, cfg):
    out, gated = [], []
    for e, a in enumerate(proposed):
        g = False
        if active and e >= slots and a != 0:
            frd_block = p_up[e] < cfg.frd_min_prob if lots[a] > 0 else p_down[e] < cfg.frd_min_prob
            g = conf[e][a] < threshold or frd_block
        out.append(0 if g else a)
        gated.append(g)
    return out, gated


@pytest.mark.parametrize("active", [False, True])
def test_apply_gates_matches_a_loop(active):
    rng = np.random.default_rng(0)
    b, a = 40, 11
    cfg = GateConfig()
    lots = torch.tensor([0, 1, 2, 3, 4, 5, -1, -2, -3, -4, -5])
    proposed = torch.tensor(rng.integers(0, a, b))
    conf = torch.tensor(rng.random((b, a)), dtype=torch.float32)
    p_up = torch.tensor(rng.random(b) * 0.3, dtype=torch.float32)
    p_down = torch.tensor(rng.random(b) * 0.3, dtype=torch.float32)
    slots = exploration_slots(b, cfg)
    assert slots == 6  # 40 x (1 - 0.85)
    got = apply_gates(proposed, conf, p_up, p_down, lots, torch.tensor(0.4), torch.tensor(active),
                      slots, cfg)
    want, want_gated = gate_reference(proposed.tolist(), conf.tolist(), p_up.tolist(),
                                      p_down.tolist(), lots.tolist(), 0.4, active, slots, cfg)
    assert got.actions.tolist() == want and got.gated.tolist() == want_gated
    assert any(want_gated) == active


def test_profit_confidence_and_move_probabilities():
    z = torch.linspace(-1, 1, 5)  # atoms -1, -0.5, 0, 0.5, 1
    probs = torch.tensor([[[0.1, 0.2, 0.3, 0.25, 0.15]]])
    assert profit_confidence(probs, z).item() == pytest.approx(0.4)  # strictly above 0
    edges = torch.tensor([-2.0, -1.0, 1.0, 2.0])
    inf = torch.tensor([float("inf")])
    lower, upper = torch.cat((-inf, edges)), torch.cat((edges, inf))
    frd = torch.tensor([[0.1, 0.2, 0.3, 0.25, 0.15]])  # (-inf,-2) [-2,-1) [-1,1) [1,2) [2,inf)
    up, down = move_probabilities(frd, lower, upper, torch.tensor([1.0]))
    assert (up.item(), down.item()) == pytest.approx((0.4, 0.3))
    up, down = move_probabilities(frd, lower, upper, torch.tensor([1.5]))
    assert (up.item(), down.item()) == pytest.approx((0.15, 0.1))


def test_threshold_moves_symmetrically():
    cfg = GateConfig(adjust_rate=1.1, target_hold_fraction=0.5)
    state = ControllerState.bootstrap("cpu")
    state.hold_fraction.fill_(0.2)  # below target: raise
    update_gate_threshold(state, torch.tensor(True), cfg)
    assert float(state.gate_threshold) == pytest.approx(0.33)
    state.hold_fraction.fill_(0.8)  # above: lower by the same factor
    update_gate_threshold(state, torch.tensor(True), cfg)
    assert float(state.gate_threshold) == pytest.approx(0.3)
    update_gate_threshold(state, torch.tensor(False), cfg)  # warm-up: frozen
    assert float(state.gate_threshold) == pytest.approx(0.3)


def test_post_gate_entropy_reads_the_actions_sent():
    state = ControllerState.bootstrap("cpu")
    state.action_entropy.fill_(0.0)
    sent = torch.tensor([0, 0, 0, 1])  # what the gates let through
    action_histogram_update(state, sent, 11, rate=1.0)
    p = np.array([0.75, 0.25])
    assert float(state.action_entropy) == pytest.approx(-(p * np.log(p)).sum())
    assert float(state.hold_fraction) == pytest.approx(0.75)


def test_gates_fire_after_the_warm_up_in_the_real_step(tiny_store):
    warmup = 6
    cfg = tiny_config(tiny_store.path, gates={"warmup_steps": warmup, "frd_min_prob": 1.0,
                                              "target_hold_fraction": 1.0},
                      train={"envs": 40})
    data = load_training_data(cfg, "cpu", tiny_store.path)
    state = build_state(cfg, data, "cpu")
    scfg = step_config(cfg)
    slots = exploration_slots(40, cfg.gates)
    gated_by_step, sent = [], []
    orig = state.env.step

    def spy(action, *args, **kwargs):
        sent.append(action.clone())
        return orig(action, *args, **kwargs)

    state.env.step = spy
    for step in range(12):
        before = float(state.metrics.gated)
        train_step(state, data.train_book, scfg, learning=step >= 4)
        gated_by_step.append(float(state.metrics.gated) - before)
    print("gated per step:", gated_by_step)
    assert all(g == 0 for g in gated_by_step[:warmup])
    assert all(g > 0 for g in gated_by_step[warmup:])
    # after the warm-up, only exploration slots trade (frd_min_prob 1 blocks every trade)
    for action in sent[warmup:]:
        assert (action[slots:] == 0).all() and (action[:slots] != 0).any()
    # the entropy controller (which alpha and tau read) follows the actions sent, post-gate
    ema = math.log(11)
    for action in sent:
        p = np.bincount(action.numpy(), minlength=11) / len(action)
        h = -(p[p > 0] * np.log(p[p > 0])).sum()
        ema += cfg.policy.action_ema_rate * (h - ema)
    assert float(state.controllers.action_entropy) == pytest.approx(ema, rel=1e-9)
