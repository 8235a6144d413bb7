"""pi distillation + entropy (gradient against the change log's formula, float64 numpy),
alpha/tau co-tuning, the done-gated V loss, pi_ref, and outcome labels in replay."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lobsurf.agent.config import PolicyConfig, ReplayConfig
from lobsurf.agent.controllers import ControllerState
from lobsurf.agent.policy import (agreement, entropy_target, pi_loss, reference_log_probs,
                                  update_alpha_tau, value_loss)
from lobsurf.agent.replay import PrioritizedReplay
from tests.agent.test_replay import batch


def test_pi_gradient_is_the_distillation_formula():
    rng = np.random.default_rng(0)
    b, a = 6, 11
    logits = rng.normal(size=(b, a))
    q_mean = rng.normal(size=(b, a))
    cfg = PolicyConfig(distill_weight=0.3)
    state = ControllerState.bootstrap("cpu")
    state.sac_alpha.fill_(0.7)
    state.distill_tau.fill_(2.0)
    x = torch.tensor(logits, requires_grad=True)
    loss, _ = pi_loss(x, torch.tensor(q_mean), state, cfg)
    loss.backward()
    # numpy reference: per row, lambda (pi - softmax(Q / tau)) + alpha pi (log pi + H), / B
    pi = np.exp(logits - logits.max(1, keepdims=True))
    pi /= pi.sum(1, keepdims=True)
    tgt = np.exp(q_mean / 2.0 - (q_mean / 2.0).max(1, keepdims=True))
    tgt /= tgt.sum(1, keepdims=True)
    h = -(pi * np.log(pi)).sum(1, keepdims=True)
    want = (0.3 * (pi - tgt) + 0.7 * pi * (np.log(pi) + h)) / b
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-10, atol=1e-12)


def test_alpha_and_tau_ramp_fast_below_target_and_decay_slowly_above():
    cfg = PolicyConfig(ramp_rate=0.01, decay_rate=0.0001)
    state = ControllerState.bootstrap("cpu")
    assert entropy_target(11, cfg) == pytest.approx(0.7 * math.log(11))
    state.action_entropy.fill_(0.5)
    update_alpha_tau(state, 11, cfg)
    assert float(state.sac_alpha) == pytest.approx(0.0101)
    assert float(state.distill_tau) == pytest.approx(5.05)
    state.action_entropy.fill_(2.0)
    update_alpha_tau(state, 11, cfg)
    assert float(state.sac_alpha) == pytest.approx(0.0101 * 0.9999)
    state.sac_alpha.fill_(1.99)
    state.action_entropy.fill_(0.1)
    for _ in range(10):
        update_alpha_tau(state, 11, cfg)
    assert float(state.sac_alpha) == 2.0  # its declared maximum


def test_value_loss_is_gated_on_closed_trades():
    v = torch.tensor([0.5, 0.0, -1.0])
    loss, adv = value_loss(v, torch.tensor([1.0, 9.0, -2.0]), torch.tensor([True, False, True]))
    assert float(loss) == pytest.approx((0.25 + 1.0) / 2)
    assert adv.tolist() == pytest.approx([0.5, 0.0, -1.0])


def test_reference_policy_and_agreement():
    ref = reference_log_probs(11, PolicyConfig(), "cpu").exp()
    assert ref[0] == pytest.approx(0.5) and ref[1:].tolist() == pytest.approx([0.05] * 10)
    q = torch.randn(4, 11)
    linear = torch.log(q - q.min(-1, keepdim=True).values + 1)  # pi proportional to q + c
    assert float(agreement(linear, q)) == pytest.approx(1.0, abs=1e-5)
    assert float(agreement(-linear, q)) < -0.5


def test_outcomes_label_the_transition_that_opened_the_trade():
    b = 4
    rb = PrioritizedReplay(ReplayConfig(capacity=40), "cpu", seed=0)
    for step in range(5):
        rb.add(batch(b, start=100 * step))
    # now, before step 5's write: env 2 closes a trade it opened 3 steps ago (at step 2),
    # with a win; env 0 closes one opened 1 step ago (step 4), a loss; env 1 closes nothing
    pointer = rb.pointer.clone()
    rb.add(batch(b, start=500))
    rb.record_outcomes(pointer, torch.tensor([1, 0, 3, 0]), torch.tensor([True, False, True, False]),
                       torch.tensor([False, False, True, False]))
    valid = rb.storage.outcome_valid
    labelled = {int(rb.storage.row[i]): bool(rb.storage.outcome_win[i])
                for i in range(40) if valid[i]}
    assert labelled == {400: False, 202: True}
