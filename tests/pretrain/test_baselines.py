"""Held-out metrics and the two baselines on hand-made and simulated labels."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from lobsurf.pretrain.baselines import binary_metrics, class_prior, fit_logistic


def test_binary_metrics_by_hand() -> None:
    prob = torch.tensor([[0.9, 0.5], [0.2, 0.7], [0.6, 0.1]])
    y = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    valid = torch.tensor([[True, True], [True, True], [False, True]])
    m = binary_metrics(prob, y, valid)
    # Horizon 0: rows 0, 1 → right, wrong; log loss (-ln 0.9 - ln 0.2) / 2.
    assert m[0]["n"] == 2 and m[0]["accuracy"] == 0.5
    assert m[0]["log_loss"] == pytest.approx((-math.log(0.9) - math.log(0.2)) / 2)
    # Horizon 1: 0.5 predicts "down" (not > 0.5): wrong; 0.7 → wrong; 0.1 → right.
    assert m[1]["accuracy"] == pytest.approx(1 / 3)
    assert m[1]["log_loss"] == pytest.approx(-(math.log(0.5) + math.log(0.3) + math.log(0.9)) / 3)


def test_class_prior() -> None:
    y = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    valid = torch.tensor([[True, False], [True, False], [False, False]])
    assert class_prior(y, valid).tolist() == [1.0, 0.5]  # no valid labels → 0.5


def test_logistic_recovers_known_weights_and_ignores_invalid_rows() -> None:
    g = torch.Generator().manual_seed(0)
    n = 4000
    x = torch.randn(n, 3, generator=g, dtype=torch.float64)
    true_w = torch.tensor([[2.0], [-1.0], [0.0]], dtype=torch.float64)
    y = (torch.rand(n, 1, generator=g, dtype=torch.float64) < torch.sigmoid(x @ true_w + 0.3)).double()
    valid = torch.ones(n, 1, dtype=torch.bool)
    fit = fit_logistic(x, y, valid, l2=0.0, iterations=100)
    assert torch.allclose(fit.weight, true_w, atol=0.15)
    assert float(fit.bias[0]) == pytest.approx(0.3, abs=0.1)
    # At the optimum the mean-BCE gradient vanishes.
    w = fit.weight.clone().requires_grad_(True)
    F.binary_cross_entropy_with_logits(x @ w + fit.bias, y).backward()
    assert float(w.grad.abs().max()) < 1e-5
    # Rows marked invalid (here with inverted labels) change nothing.
    x2, y2 = torch.cat([x, x[:500]]), torch.cat([y, 1 - y[:500]])
    valid2 = torch.cat([valid, torch.zeros(500, 1, dtype=torch.bool)])
    fit2 = fit_logistic(x2, y2, valid2, l2=0.0, iterations=100)
    assert torch.allclose(fit2.weight, fit.weight, atol=1e-6)
    assert fit.predict(x).shape == (n, 1)
